import { describe, expect, it } from 'vitest';
import type { ArgoWorkloadRef, Workload, WorkloadKind } from '../../src/kube/workloads.js';
import { PRIMARY_HANDOVER } from '../../src/handover/settings.js';
import { templateElsewhere, templateElsewhereMessage, unsupportedFeatures, unsupportedMessage } from '../../src/restarter/kind-features.js';
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

describe('templateElsewhere (Argo Rollouts workloadRef)', () => {
  const ref = { apiVersion: 'apps/v1', kind: 'Deployment', name: 'web-base' };
  it.each<{ name: string; kind: WorkloadKind; workload: Workload; want: ArgoWorkloadRef | undefined }>([
    { name: 'a Rollout with a workloadRef and no template', kind: 'Rollout', workload: { metadata: { name: 'r' }, spec: { workloadRef: ref } }, want: ref },
    { name: 'a Rollout with its own template', kind: 'Rollout', workload: { metadata: { name: 'r' }, spec: { template: { spec: { containers: [] } } } }, want: undefined },
    { name: 'a Rollout with both: the template is what Argo runs', kind: 'Rollout', workload: { metadata: { name: 'r' }, spec: { template: { spec: { containers: [] } }, workloadRef: ref } }, want: undefined },
    { name: 'a Rollout with neither', kind: 'Rollout', workload: { metadata: { name: 'r' }, spec: {} }, want: undefined },
    { name: 'any other kind', kind: 'Deployment', workload: { metadata: { name: 'd' }, spec: { selector: {}, template: {} } }, want: undefined },
  ])('$name', ({ kind, workload, want }) => {
    expect(templateElsewhere(kind, workload)).toEqual(want);
  });

  it('the Warning names the workload to opt in, and says when Argo scales it to 0', () => {
    expect(templateElsewhereMessage(ref)).toBe(
      "no spec.template: its pods run the template of Deployment web-base (spec.workloadRef), and rollguard writes nothing to this Rollout. " +
        "Label Deployment web-base rollguard.io/enabled=true instead: rollguard then annotates its template, and Argo Rollouts rolls each change out through this Rollout's steps",
    );
    expect(templateElsewhereMessage({ ...ref, scaleDown: 'progressively' })).toContain('; Argo scales Deployment web-base to 0 (scaleDown: progressively), so its own rollout replaces no pod');
    expect(templateElsewhereMessage({ ...ref, scaleDown: 'never' })).not.toContain('scales');
  });
});

describe('unsupportedMessage on a Rollout', () => {
  it('names the Rollout strategy as what it paces with', () => {
    expect(unsupportedFeatures('Rollout', { 'rollguard.io/rollout': 'health-gated' }, [HEALTH_GATED_ROLLOUTS])).toEqual([{ feature: 'health-gated rollouts', annotations: ['rollguard.io/rollout'] }]);
    expect(unsupportedMessage('Rollout', [{ feature: 'health-gated rollouts', annotations: ['rollguard.io/rollout'] }])).toContain(
      "ignored on a Rollout, which paces its rollouts with spec.strategy (Argo Rollouts' canary or blue-green steps and analysis)",
    );
  });
});
