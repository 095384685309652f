import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { affinityNode } from '../../src/dev/fake-kubelet.js';

const podWith = (affinity: NonNullable<V1Pod['spec']>['affinity']): V1Pod => ({ spec: { containers: [], affinity } });
const fields = (...matchFields: { key: string; operator: string; values?: string[] }[]) =>
  podWith({ nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchFields }] } } });

describe('affinityNode', () => {
  it.each([
    ['no affinity', podWith(undefined), undefined],
    ['a DaemonSet pod pinned by metadata.name', fields({ key: 'metadata.name', operator: 'In', values: ['node-a'] }), 'node-a'],
    ['another field', fields({ key: 'metadata.uid', operator: 'In', values: ['x'] }), undefined],
    ['NotIn is no pin', fields({ key: 'metadata.name', operator: 'NotIn', values: ['node-a'] }), undefined],
    ['no values', fields({ key: 'metadata.name', operator: 'In', values: [] }), undefined],
    [
      'label expressions only',
      podWith({ nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] }] } } }),
      undefined,
    ],
  ])('%s', (_, pod, expected) => {
    expect(affinityNode(pod)).toBe(expected);
  });
});
