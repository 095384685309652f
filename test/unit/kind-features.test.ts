import { describe, expect, it } from 'vitest';
import type { WorkloadKind } from '../../src/kube/workloads.js';
import { PRIMARY_HANDOVER } from '../../src/handover/settings.js';
import { unsupportedFeatures, unsupportedMessage } from '../../src/restarter/kind-features.js';
import { HEALTH_GATED_ROLLOUTS } from '../../src/rollout/decision.js';

describe('unsupportedFeatures', () => {
  it.each<{ name: string; kind: WorkloadKind; annotations: Record<string, string> | undefined; want: unknown }>([
    { name: 'a StatefulSet may ask for anything', kind: 'StatefulSet', annotations: { 'rollguard.io/rollout': 'health-gated', 'rollguard.io/primary-selector': 'role=primary' }, want: [] },
    { name: 'a Deployment without such annotations', kind: 'Deployment', annotations: { 'rollguard.io/ignore-secrets': 'x' }, want: [] },
    { name: 'no annotations at all', kind: 'DaemonSet', annotations: undefined, want: [] },
    {
      name: 'a health-gated Deployment',
      kind: 'Deployment',
      annotations: { 'rollguard.io/rollout': 'health-gated', 'rollguard.io/health-url': 'http://web/healthz' },
      want: [{ feature: 'health-gated rollouts', annotations: ['rollguard.io/health-url', 'rollguard.io/rollout'] }],
    },
    {
      name: 'a DaemonSet asking for a primary handover',
      kind: 'DaemonSet',
      annotations: { 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': 'POST /step-down' },
      want: [{ feature: 'primary handover', annotations: ['rollguard.io/handover-http', 'rollguard.io/primary-selector'] }],
    },
  ])('$name', ({ kind, annotations, want }) => {
    expect(unsupportedFeatures(kind, annotations, [HEALTH_GATED_ROLLOUTS, PRIMARY_HANDOVER])).toEqual(want);
  });
});

describe('unsupportedMessage', () => {
  it('says what is ignored, that it is for StatefulSets, and what the kind has instead', () => {
    expect(unsupportedMessage('Deployment', [{ feature: 'health-gated rollouts', annotations: ['rollguard.io/rollout'] }])).toBe(
      'health-gated rollouts (rollguard.io/rollout): StatefulSets only; ignored on a Deployment, which paces its rollouts with spec.strategy.rollingUpdate (maxUnavailable, maxSurge) and spec.minReadySeconds',
    );
    expect(unsupportedMessage('DaemonSet', [{ feature: 'a', annotations: ['x'] }, { feature: 'b', annotations: ['y'] }])).toContain('a (x) and b (y): StatefulSets only; ignored on a DaemonSet, which paces its rollouts with spec.updateStrategy');
  });
});
