import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { createMetadataCache, PARTIAL_METADATA_LIST_ACCEPT, type MetadataEvent } from '../../src/kube/metadata-cache.js';
import { ApiStatusError, RawApi } from '../../src/kube/raw-api.js';
import { createStatefulSetCache } from '../../src/kube/statefulsets.js';
import type { ObjectEvent } from '../../src/kube/object-store.js';
import type { V1StatefulSet } from '@kubernetes/client-node';

// The caches against a real API server: metadata only, scoped, and told of every change.
describe('metadata and StatefulSet caches', () => {
  const { kc, core, apps } = testCluster();
  const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'warn' });
  const api = new RawApi(kc);
  let namespace: string;
  let other: string;
  const abort = new AbortController();
  const stops: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    namespace = await createNamespace(core, 'reconcile-cache');
    other = await createNamespace(core, 'reconcile-cache-other');
  });
  afterAll(async () => {
    abort.abort();
    for (const stop of stops) await stop();
    await core.deleteNamespace({ name: namespace });
    await core.deleteNamespace({ name: other });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('gets metadata only: no data crosses the wire', async () => {
    await core.createNamespacedSecret({ namespace, body: { metadata: { name: 'wire' }, stringData: { password: 'hunter2' } } });
    const list = (await api.getJson({ path: `/api/v1/namespaces/${namespace}/secrets`, accept: PARTIAL_METADATA_LIST_ACCEPT })) as {
      kind: string;
      items: Record<string, unknown>[];
    };
    expect(list.kind).toBe('PartialObjectMetadataList');
    expect(list.items.map((i) => i.kind)).toEqual(['PartialObjectMetadata']);
    expect(Object.keys(list.items[0]!)).toEqual(['kind', 'apiVersion', 'metadata']);
    expect(JSON.stringify(list)).not.toContain(Buffer.from('hunter2').toString('base64'));
    await core.deleteNamespacedSecret({ name: 'wire', namespace });
  });

  it('names the request and the Status in an API error', async () => {
    const err = await api.getJson({ path: `/api/v1/namespaces/${namespace}/configmaps/nope`, accept: 'application/json' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiStatusError);
    expect((err as ApiStatusError).statusCode).toBe(404);
    expect((err as Error).message).toBe(`GET /api/v1/namespaces/${namespace}/configmaps/nope: HTTP 404 NotFound: configmaps "nope" not found`);
  });

  it('keeps the versions of the ConfigMaps of its namespaces, and says what changed', async () => {
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'before-start' }, data: { a: '1' } } });
    const cache = createMetadataCache({ name: 'ConfigMap cache', api, plural: 'configmaps', namespaces: [namespace], ignoreLabel: 'rollguard.io/ignore', logger });
    const events: MetadataEvent[] = [];
    cache.store.onEvent((e) => events.push(e));
    await cache.informer.start(abort.signal);
    stops.push(() => cache.informer.stopped());
    expect(await cache.informer.whenSynced(abort.signal)).toBe(true);
    const listed = await core.readNamespacedConfigMap({ name: 'before-start', namespace });
    expect(cache.store.get(namespace, 'before-start')).toEqual({ uid: listed.metadata!.uid, resourceVersion: listed.metadata!.resourceVersion, ignored: false });

    const created = await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'live' }, data: { a: '1' } } });
    await core.createNamespacedConfigMap({ namespace: other, body: { metadata: { name: 'elsewhere' }, data: { a: '1' } } });
    const updated = await core.patchNamespacedConfigMap({
      name: 'live',
      namespace,
      body: [{ op: 'add', path: '/metadata/labels', value: { 'rollguard.io/ignore': 'true' } }],
    });
    await core.deleteNamespacedConfigMap({ name: 'live', namespace });
    await waitUntil('the delete seen', () => events.some((e) => e.type === 'deleted' && e.name === 'live') || JSON.stringify(events));
    const live = events.filter((e) => e.name === 'live');
    expect(live.map((e) => [e.type, e.current?.resourceVersion ?? e.previous?.resourceVersion, e.current?.ignored ?? e.previous?.ignored])).toEqual([
      ['added', created.metadata!.resourceVersion, false],
      ['updated', updated.metadata!.resourceVersion, true],
      ['deleted', updated.metadata!.resourceVersion, true],
    ]);
    expect(events.some((e) => e.namespace === other)).toBe(false);
    expect(cache.store.get(other, 'elsewhere')).toBeUndefined();
    expect(Number(cache.informer.resourceVersion(namespace))).toBeGreaterThanOrEqual(Number(updated.metadata!.resourceVersion));
  });

  it('watches every namespace when not scoped', async () => {
    const cache = createMetadataCache({ name: 'Secret cache', api, plural: 'secrets', namespaces: undefined, ignoreLabel: 'rollguard.io/ignore', logger });
    await cache.informer.start(abort.signal);
    stops.push(() => cache.informer.stopped());
    await cache.informer.whenSynced(abort.signal);
    await core.createNamespacedSecret({ namespace: other, body: { metadata: { name: 'anywhere' }, stringData: { k: 'v' } } });
    await waitFor('the secret in the other namespace', () => cache.store.get(other, 'anywhere'));
    expect(cache.informer.covers('any-namespace')).toBe(true);
  });

  it('holds only the StatefulSets with the label, and drops one that loses it', async () => {
    const cache = createStatefulSetCache({ api, namespaces: [namespace], labelSelector: 'rollguard.io/enabled=true', logger });
    const events: ObjectEvent<V1StatefulSet>[] = [];
    cache.store.onEvent((e) => events.push(e));
    await cache.informer.start(abort.signal);
    stops.push(() => cache.informer.stopped());
    await cache.informer.whenSynced(abort.signal);
    await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('plain', { replicas: 0 }) });
    await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('opted', { replicas: 0, labels: { 'rollguard.io/enabled': 'true' } }) });
    const seen = await waitFor('opted in the cache', () => cache.store.get(namespace, 'opted'));
    expect(seen.metadata?.creationTimestamp).toBeInstanceOf(Date);
    expect(seen.spec?.template.spec?.containers[0]?.name).toBe('app');
    await apps.patchNamespacedStatefulSet({ name: 'opted', namespace, body: [{ op: 'remove', path: '/metadata/labels/rollguard.io~1enabled' }] });
    await waitUntil('opted gone from the cache', () => cache.store.get(namespace, 'opted') === undefined);
    // In between, the StatefulSet controller writes status: updates.
    const kinds = events.filter((e) => e.type !== 'updated').map((e) => `${e.type} ${(e.current ?? e.previous)?.metadata?.name}`);
    expect(kinds).toEqual(['added opted', 'deleted opted']);
    expect(cache.store.get(namespace, 'plain')).toBeUndefined();
  });
});
