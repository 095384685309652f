import { describe, expect, it } from 'vitest';
import {
  MetadataStore,
  decodeMetadata,
  packVersion,
  unpackVersion,
  type MetadataEvent,
  type MetadataItem,
} from '../../src/kube/metadata-cache.js';

const IGNORE = 'rollguard.io/ignore';

function partial(namespace: string, name: string, uid: string, resourceVersion: string, labels?: Record<string, string>): unknown {
  return {
    kind: 'PartialObjectMetadata',
    apiVersion: 'meta.k8s.io/v1',
    metadata: { namespace, name, uid, resourceVersion, labels, managedFields: [{ manager: 'kubectl' }], annotations: { big: 'x'.repeat(1000) } },
  };
}

const item = (namespace: string, name: string, uid: string, rv: string, ignored = false): MetadataItem => ({
  namespace,
  name,
  packed: packVersion({ uid, resourceVersion: rv, ignored }),
});

function recordingStore(): { store: MetadataStore; events: MetadataEvent[] } {
  const store = new MetadataStore();
  const events: MetadataEvent[] = [];
  store.onEvent((e) => events.push(e));
  return { store, events };
}

describe('decodeMetadata', () => {
  it('keeps namespace, name, uid, resourceVersion and the ignore flag only', () => {
    expect(decodeMetadata(partial('ns', 'app', 'u-1', '42'), IGNORE)).toEqual({ namespace: 'ns', name: 'app', packed: 'u-1/42' });
    expect(decodeMetadata(partial('ns', 'app', 'u-1', '42', { [IGNORE]: 'true' }), IGNORE).packed).toBe('!u-1/42');
    // Only "true" opts out.
    expect(decodeMetadata(partial('ns', 'app', 'u-1', '42', { [IGNORE]: 'yes' }), IGNORE).packed).toBe('u-1/42');
  });

  it('names the object and the missing field', () => {
    expect(() => decodeMetadata({ metadata: { namespace: 'ns', name: 'app', uid: 'u' } }, IGNORE)).toThrow('object ns/app has no metadata.resourceVersion');
    expect(() => decodeMetadata({}, IGNORE)).toThrow('object /? has no metadata.namespace');
  });
});

describe('packVersion', () => {
  it('round-trips', () => {
    for (const v of [
      { uid: '6f1c-aa', resourceVersion: '812', ignored: false },
      { uid: '6f1c-aa', resourceVersion: '812', ignored: true },
    ]) {
      expect(unpackVersion(packVersion(v))).toEqual(v);
    }
  });
});

describe('MetadataStore', () => {
  it('emits added, then updated only when the version changes, then deleted', () => {
    const { store, events } = recordingStore();
    store.upsert(item('ns', 'a', 'u1', '1'));
    store.upsert(item('ns', 'a', 'u1', '1'));
    store.upsert(item('ns', 'a', 'u1', '2'));
    store.upsert(item('ns', 'a', 'u1', '3', true));
    store.remove(item('ns', 'a', 'u1', '4'));
    store.remove(item('ns', 'a', 'u1', '4'));
    expect(events).toEqual([
      { type: 'added', namespace: 'ns', name: 'a', previous: undefined, current: { uid: 'u1', resourceVersion: '1', ignored: false } },
      { type: 'updated', namespace: 'ns', name: 'a', previous: { uid: 'u1', resourceVersion: '1', ignored: false }, current: { uid: 'u1', resourceVersion: '2', ignored: false } },
      { type: 'updated', namespace: 'ns', name: 'a', previous: { uid: 'u1', resourceVersion: '2', ignored: false }, current: { uid: 'u1', resourceVersion: '3', ignored: true } },
      { type: 'deleted', namespace: 'ns', name: 'a', previous: { uid: 'u1', resourceVersion: '3', ignored: true } },
    ]);
    expect(store.size()).toBe(0);
    expect(store.get('ns', 'a')).toBeUndefined();
  });

  it('answers lookups by namespace and name', () => {
    const { store } = recordingStore();
    store.upsert(item('a', 'cfg', 'u1', '5'));
    store.upsert(item('b', 'cfg', 'u2', '6'));
    expect(store.get('a', 'cfg')).toEqual({ uid: 'u1', resourceVersion: '5', ignored: false });
    expect(store.get('b', 'cfg')).toEqual({ uid: 'u2', resourceVersion: '6', ignored: false });
    expect(store.get('c', 'cfg')).toBeUndefined();
    expect(store.size()).toBe(2);
  });

  it('on a relist of one namespace, emits what changed while the watch was away, and leaves other namespaces alone', () => {
    const { store, events } = recordingStore();
    store.replace([item('a', 'same', 'u1', '1'), item('a', 'changed', 'u2', '1'), item('a', 'gone', 'u3', '1'), item('b', 'other', 'u4', '1')], undefined);
    events.length = 0;
    store.replace([item('a', 'same', 'u1', '1'), item('a', 'changed', 'u2', '9'), item('a', 'new', 'u5', '9')], 'a');
    expect(events.map((e) => `${e.type} ${e.namespace}/${e.name}`)).toEqual(['deleted a/gone', 'updated a/changed', 'added a/new']);
    expect(store.get('b', 'other')).toBeDefined();
    expect(store.size()).toBe(4);
  });

  it('on a cluster-wide relist, drops whole namespaces that are gone', () => {
    const { store, events } = recordingStore();
    store.replace([item('a', 'x', 'u1', '1'), item('b', 'y', 'u2', '1')], undefined);
    events.length = 0;
    store.replace([item('b', 'y', 'u2', '1')], undefined);
    expect(events.map((e) => `${e.type} ${e.namespace}/${e.name}`)).toEqual(['deleted a/x']);
    expect(store.size()).toBe(1);
  });
});
