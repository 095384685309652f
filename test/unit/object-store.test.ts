import type { V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { ObjectStore, type ObjectEvent } from '../../src/kube/object-store.js';
import { decodeStatefulSet } from '../../src/kube/statefulsets.js';

const set = (namespace: string, name: string, resourceVersion: string): V1StatefulSet => ({ metadata: { namespace, name, resourceVersion } });

describe('ObjectStore', () => {
  it('emits a change only for a new resourceVersion, and the differences on a relist', () => {
    const store = new ObjectStore<V1StatefulSet>();
    const events: ObjectEvent<V1StatefulSet>[] = [];
    store.onEvent((e) => events.push(e));
    store.replace([set('ns', 'a', '1'), set('ns', 'b', '1')], undefined);
    store.upsert(set('ns', 'a', '1'));
    store.upsert(set('ns', 'a', '2'));
    store.replace([set('ns', 'a', '2'), set('ns', 'c', '3')], 'ns');
    expect(events.map((e) => `${e.type} ${(e.current ?? e.previous)?.metadata?.name}@${(e.current ?? e.previous)?.metadata?.resourceVersion}`)).toEqual([
      'added a@1',
      'added b@1',
      'updated a@2',
      'deleted b@1',
      'added c@3',
    ]);
    expect(events[2]?.previous?.metadata?.resourceVersion).toBe('1');
    expect(store.list().map((s) => s.metadata?.name).sort()).toEqual(['a', 'c']);
    expect(store.get('ns', 'c')?.metadata?.resourceVersion).toBe('3');
    expect(store.size()).toBe(2);
  });

  it('refuses an object without a name', () => {
    expect(() => new ObjectStore<V1StatefulSet>().upsert({ metadata: { namespace: 'ns' } })).toThrow('object in namespace "ns" has no metadata.name');
  });
});

describe('decodeStatefulSet', () => {
  it('turns wire JSON into the typed model', () => {
    const decoded = decodeStatefulSet({
      apiVersion: 'apps/v1',
      kind: 'StatefulSet',
      metadata: { name: 'web', namespace: 'ns', resourceVersion: '7', creationTimestamp: '2025-01-02T03:04:05Z' },
      spec: { selector: {}, serviceName: 'web', template: { metadata: { annotations: { a: 'b' } } } },
    });
    expect(decoded.metadata?.creationTimestamp).toEqual(new Date('2025-01-02T03:04:05Z'));
    expect(decoded.spec?.template.metadata?.annotations).toEqual({ a: 'b' });
  });

  it('refuses an object that is not one', () => {
    expect(() => decodeStatefulSet({ metadata: { name: 'web' } })).toThrow('StatefulSet without metadata.name or metadata.resourceVersion');
  });
});
