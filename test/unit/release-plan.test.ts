import type { V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { releaseOf } from '../../src/release/plan.js';

function set(opts: { gated?: boolean; enabled?: boolean; partition?: number; type?: string }): V1StatefulSet {
  return {
    metadata: {
      namespace: 'ns',
      name: 'web',
      resourceVersion: '42',
      labels: opts.enabled === false ? {} : { 'rollguard.io/enabled': 'true' },
      annotations: opts.gated === false ? {} : { 'rollguard.io/rollout': 'health-gated' },
    },
    spec: {
      selector: {},
      serviceName: 'web',
      template: {},
      updateStrategy: { type: opts.type ?? 'RollingUpdate', ...(opts.partition !== undefined ? { rollingUpdate: { partition: opts.partition } } : {}) },
    },
  };
}

const TEST = { op: 'test', path: '/metadata/resourceVersion', value: '42' };
const UNGATE = { op: 'remove', path: '/metadata/annotations/rollguard.io~1rollout' };
const ZERO = { op: 'replace', path: '/spec/updateStrategy/rollingUpdate/partition', value: 0 };

describe('releaseOf', () => {
  it.each([
    { what: 'held at replicas', s: set({ partition: 3 }), want: [TEST, UNGATE, ZERO] },
    { what: 'mid-rollout', s: set({ partition: 1 }), want: [TEST, UNGATE, ZERO] },
    { what: 'partition 0 already', s: set({ partition: 0 }), want: [TEST, UNGATE] },
    { what: 'no partition', s: set({}), want: [TEST, UNGATE] },
    { what: 'OnDelete', s: set({ partition: 3, type: 'OnDelete' }), want: [TEST, UNGATE] },
  ])('a health-gated set, $what', ({ s, want }) => {
    expect(releaseOf(s)?.ops).toEqual(want);
  });

  it.each([
    { what: 'not health-gated', s: set({ gated: false, partition: 2 }) },
    { what: 'not opted in', s: set({ enabled: false, partition: 2 }) },
  ])('leaves a set alone that is $what', ({ s }) => {
    expect(releaseOf(s)).toBeUndefined();
  });
});
