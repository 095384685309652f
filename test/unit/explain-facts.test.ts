import { describe, expect, it } from 'vitest';
import { controllerRevisionFact, eventFactOf, lastWriteOf, objectFactOf, replicaSetFact } from '../../src/explain/facts.js';

describe('facts from what the API server sends', () => {
  it("an object's last write is its newest managedFields entry, else its creation", () => {
    expect(lastWriteOf({ creationTimestamp: '2026-01-01T00:00:00Z', managedFields: [{ time: '2026-01-01T00:01:00Z' }, { time: '2026-01-01T00:05:00Z' }, { time: 'bad' }] })).toEqual(new Date('2026-01-01T00:05:00Z'));
    expect(lastWriteOf({ creationTimestamp: '2026-01-01T00:00:00Z' })).toEqual(new Date('2026-01-01T00:00:00Z'));
    expect(lastWriteOf(undefined)).toBeUndefined();
    // a workload's status writes (every pod that turns Ready) are not writes of it that wake rollguard
    const workload = { managedFields: [{ time: '2026-01-01T00:01:00Z' }, { time: '2026-01-01T00:09:00Z', subresource: 'status' }] };
    expect(lastWriteOf(workload, { subresources: false })).toEqual(new Date('2026-01-01T00:01:00Z'));
    expect(lastWriteOf(workload)).toEqual(new Date('2026-01-01T00:09:00Z'));
  });

  it('a PartialObjectMetadata: uid, version, labels; none: absent', () => {
    const raw = { kind: 'PartialObjectMetadata', metadata: { name: 'app', uid: 'u', resourceVersion: '7', labels: { a: 'b', n: 3 }, managedFields: [{ time: '2026-01-01T00:01:00Z' }] } };
    expect(objectFactOf('ConfigMap', 'app', raw)).toEqual({ kind: 'ConfigMap', name: 'app', status: 'found', uid: 'u', resourceVersion: '7', labels: { a: 'b' }, changedAt: new Date('2026-01-01T00:01:00Z') });
    expect(objectFactOf('Secret', 'x', undefined)).toEqual({ kind: 'Secret', name: 'x', status: 'absent' });
  });

  it("a StatefulSet's ControllerRevision: its template without $patch, pods carry its name; a DaemonSet's pods its hash", () => {
    const cr = { metadata: { name: 'web-5f9', labels: { 'controller-revision-hash': '5f9' }, creationTimestamp: new Date('2026-01-01T00:00:00Z') }, revision: 3, data: { spec: { template: { $patch: 'replace', metadata: { annotations: { a: 'b' } } } } } };
    expect(controllerRevisionFact('StatefulSet', cr)).toEqual({ name: 'web-5f9', revision: 3, createdAt: new Date('2026-01-01T00:00:00Z'), podLabel: 'web-5f9', template: { metadata: { annotations: { a: 'b' } } } });
    expect(controllerRevisionFact('DaemonSet', cr).podLabel).toBe('5f9');
  });

  it("a Deployment's ReplicaSet: its revision number, its template without the hash label the controller adds", () => {
    const rs = { metadata: { name: 'api-6d8', labels: { 'pod-template-hash': '6d8' }, annotations: { 'deployment.kubernetes.io/revision': '4' } }, spec: { selector: {}, template: { metadata: { labels: { app: 'api', 'pod-template-hash': '6d8' } } } } };
    expect(replicaSetFact(rs)).toEqual({ name: 'api-6d8', revision: 4, createdAt: undefined, podLabel: '6d8', template: { metadata: { labels: { app: 'api' } } } });
  });

  it('an Event: who wrote it, its first and last time', () => {
    const first = new Date('2026-01-01T00:00:00Z');
    const e = eventFactOf({ metadata: {}, involvedObject: {}, reason: 'ConfigChanged', message: 'm', count: 2, firstTimestamp: first, lastTimestamp: new Date('2026-01-01T00:02:00Z'), source: { component: 'rollguard' } });
    expect(e).toEqual({ type: 'Normal', reason: 'ConfigChanged', message: 'm', count: 2, firstAt: first, lastAt: new Date('2026-01-01T00:02:00Z'), component: 'rollguard' });
  });
});
