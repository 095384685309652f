import { describe, expect, it } from 'vitest';
import {
  WORKLOAD_KINDS,
  decodeWorkload,
  describeWorkload,
  enabledWorkloadKinds,
  workloadApiVersion,
  isWorkloadKind,
  splitWorkloadKey,
  workloadKey,
} from '../../src/kube/workloads.js';

describe('workload keys', () => {
  it.each(WORKLOAD_KINDS)('%s: a key carries the kind and splits back', (kind) => {
    const key = workloadKey(kind, 'shop', 'db');
    expect(key).toBe(`${kind}/shop/db`);
    expect(splitWorkloadKey(key)).toEqual({ kind, namespace: 'shop', name: 'db' });
    expect(describeWorkload(key)).toBe(`${kind} shop/db`);
  });

  it.each(['shop/db', 'ReplicaSet/shop/db', 'Deployment/shop', 'Deployment/shop/', 'Deployment/shop/db/x'])('refuses %j, saying what a key is', (key) => {
    expect(() => splitWorkloadKey(key)).toThrow('is not Kind/namespace/name with Kind one of StatefulSet, Deployment, DaemonSet');
  });

  it('knows the closed set of kinds', () => {
    expect(WORKLOAD_KINDS.filter(isWorkloadKind)).toEqual(['StatefulSet', 'Deployment', 'DaemonSet', 'Rollout']);
    expect([undefined, 'ReplicaSet', 'statefulset', 7].some(isWorkloadKind)).toBe(false);
  });
});

describe('decodeWorkload', () => {
  it.each(WORKLOAD_KINDS)('%s: wire JSON to the typed model, the template where it was, managedFields dropped', (kind) => {
    const decoded = decodeWorkload(kind, {
      metadata: {
        name: 'db',
        namespace: 'shop',
        resourceVersion: '7',
        creationTimestamp: '2026-12-01T10:00:00Z',
        managedFields: [{ manager: 'kubectl', operation: 'Apply', fieldsType: 'FieldsV1', fieldsV1: { 'f:spec': {} } }],
      },
      spec: { selector: {}, template: { metadata: { annotations: { a: '1' } }, spec: { containers: [{ name: 'app' }] } } },
    });
    expect(decoded.metadata?.creationTimestamp).toBeInstanceOf(Date);
    expect(decoded.spec?.template?.metadata?.annotations).toEqual({ a: '1' });
    expect(decoded.metadata?.managedFields, 'not cached').toBeUndefined();
  });

  it('Rollout: keeps the workloadRef of a Rollout without a template, and nothing of Argo\'s strategy', () => {
    const decoded = decodeWorkload('Rollout', {
      apiVersion: 'argoproj.io/v1alpha1',
      kind: 'Rollout',
      metadata: { name: 'web', namespace: 'shop', resourceVersion: '3' },
      spec: { replicas: 2, strategy: { canary: { steps: [{ setWeight: 20 }] } }, workloadRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'web-base', scaleDown: 'onsuccess', extra: 1 } },
      status: { currentPodHash: 'abc', replicas: 2, phase: 'Healthy' },
    });
    expect(decoded).toEqual({
      apiVersion: 'argoproj.io/v1alpha1',
      kind: 'Rollout',
      metadata: expect.objectContaining({ name: 'web', namespace: 'shop', resourceVersion: '3' }),
      spec: { replicas: 2, template: undefined, workloadRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'web-base', scaleDown: 'onsuccess' }, restartAt: undefined },
      status: { currentPodHash: 'abc', observedGeneration: undefined, replicas: 2, updatedReplicas: undefined, readyReplicas: undefined },
    });
  });

  it('knows where each kind is served and its apiVersion', () => {
    expect(WORKLOAD_KINDS.map(workloadApiVersion)).toEqual(['apps/v1', 'apps/v1', 'apps/v1', 'argoproj.io/v1alpha1']);
    expect(enabledWorkloadKinds()).toEqual(['StatefulSet', 'Deployment', 'DaemonSet']);
    expect(enabledWorkloadKinds({ argoRollouts: true })).toEqual(['StatefulSet', 'Deployment', 'DaemonSet', 'Rollout']);
  });

  it.each(WORKLOAD_KINDS)('%s: refuses an object without name or resourceVersion, naming the kind', (kind) => {
    expect(() => decodeWorkload(kind, { metadata: { name: 'db' } })).toThrow(`${kind} without metadata.name or metadata.resourceVersion`);
  });
});
