import { describe, expect, it } from 'vitest';
import {
  WORKLOAD_KINDS,
  decodeWorkload,
  describeWorkload,
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

  it.each(WORKLOAD_KINDS)('%s: refuses an object without name or resourceVersion, naming the kind', (kind) => {
    expect(() => decodeWorkload(kind, { metadata: { name: 'db' } })).toThrow(`${kind} without metadata.name or metadata.resourceVersion`);
  });
});
