import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { podsReplacedBy } from '../../src/rollout/replaced-pods.js';

const set: V1StatefulSet = { metadata: { name: 'db' }, spec: { selector: {}, template: {}, serviceName: 'db', replicas: 3 }, status: { replicas: 3, updateRevision: 'new' } };
const pod = (ordinal: number, revision: string): V1Pod => ({ metadata: { name: `db-${ordinal}`, labels: { 'controller-revision-hash': revision } } });

describe('podsReplacedBy', () => {
  it('a step down replaces the pod it passes when that pod is not on the update revision', () => {
    const pods = [pod(0, 'old'), pod(1, 'old'), pod(2, 'old')];
    expect(podsReplacedBy({ action: 'set-partition', from: 3, to: 2, event: 'PartitionUpdate', message: '' }, set, pods)).toEqual(['db-2']);
  });

  it('stepping over pods that already run the update replaces none', () => {
    const pods = [pod(0, 'old'), pod(1, 'new'), pod(2, 'new')];
    expect(podsReplacedBy({ action: 'set-partition', from: 3, to: 1, event: 'PartitionUpdate', message: '' }, set, pods)).toEqual([]);
  });

  it('counts ordinals from spec.ordinals.start', () => {
    const shifted: V1StatefulSet = { ...set, spec: { ...set.spec!, ordinals: { start: 5 } } };
    expect(podsReplacedBy({ action: 'set-partition', from: 1, to: 0, event: 'PartitionUpdate', message: '' }, shifted, [])).toEqual(['db-5']);
  });

  it('a forced rollback replaces its pod; putting the partition back and the rest replace none', () => {
    expect(podsReplacedBy({ action: 'delete-pod', pod: 'db-1', message: '' }, set, [])).toEqual(['db-1']);
    expect(podsReplacedBy({ action: 'set-partition', from: 0, to: 3, event: 'RolloutComplete', message: '' }, set, [])).toEqual([]);
    expect(podsReplacedBy({ action: 'wait', retryAfterMs: 1, reason: '' }, set, [])).toEqual([]);
  });
});
