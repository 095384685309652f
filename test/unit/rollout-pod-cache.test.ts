import { describe, expect, it } from 'vitest';
import { HANDOVER_POD_ANNOTATIONS } from '../../src/handover/state.js';
import { PodCache, decodePod } from '../../src/rollout/pod-cache.js';
import { podHealth } from '../../src/rollout/pods.js';

const NOW = new Date('2025-03-01T12:00:00Z');

/** A pod as the API server sends it, with the bulk that the cache must not keep. */
function wirePod(name: string, opts: { rv?: string; owner?: string | null; ready?: boolean; waiting?: string; deleting?: boolean; namespace?: string } = {}): unknown {
  const owner = opts.owner === undefined ? 'web' : opts.owner;
  return {
    metadata: {
      name,
      namespace: opts.namespace ?? 'shop',
      uid: `uid-${name}`,
      resourceVersion: opts.rv ?? '1',
      labels: { app: 'web', 'controller-revision-hash': 'web-5d8f7c', 'statefulset.kubernetes.io/pod-name': name },
      annotations: { 'kubectl.kubernetes.io/last-applied-configuration': 'x'.repeat(4096) },
      managedFields: [{ manager: 'kube-controller-manager', fieldsV1: { f: 'x'.repeat(2048) } }],
      ownerReferences: owner === null ? [] : [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: owner, uid: 'set-uid', controller: true }],
      ...(opts.deleting ? { deletionTimestamp: '2025-03-01T11:59:00Z' } : {}),
    },
    spec: { containers: [{ name: 'app', image: 'registry.example/web:1', env: [{ name: 'BIG', value: 'x'.repeat(8192) }] }] },
    status: {
      phase: 'Running',
      podIP: '10.0.0.1',
      conditions: [
        { type: 'PodScheduled', status: 'True', lastTransitionTime: '2025-03-01T10:00:00Z' },
        { type: 'Ready', status: opts.ready === false ? 'False' : 'True', reason: opts.ready === false ? 'ContainersNotReady' : undefined, lastTransitionTime: '2025-03-01T11:00:00Z' },
      ],
      containerStatuses: [
        {
          name: 'app',
          image: 'registry.example/web:1',
          imageID: 'sha256:abc',
          restartCount: 3,
          ready: opts.ready !== false,
          state: opts.waiting ? { waiting: { reason: opts.waiting, message: 'long text' } } : { running: { startedAt: '2025-03-01T11:00:00Z' } },
        },
      ],
    },
  };
}

describe('decodePod', () => {
  it('keeps only what a rollout or handover decision, a guarded delete and a health-URL target check read', () => {
    const { setName, pod } = decodePod(wirePod('web-0'));
    expect(setName).toBe('web');
    expect(pod).toEqual({
      metadata: {
        namespace: 'shop',
        name: 'web-0',
        uid: 'uid-web-0',
        resourceVersion: '1',
        labels: { app: 'web', 'controller-revision-hash': 'web-5d8f7c', 'statefulset.kubernetes.io/pod-name': 'web-0' },
      },
      status: {
        phase: 'Running',
        podIP: '10.0.0.1',
        conditions: [{ type: 'Ready', status: 'True', reason: undefined, lastTransitionTime: new Date('2025-03-01T11:00:00Z') }],
        containerStatuses: [{ name: 'app', ready: true, image: '', imageID: '', restartCount: 0 }],
      },
    });
    expect(JSON.stringify(pod).length).toBeLessThan(JSON.stringify(wirePod('web-0')).length / 20);
  });

  it('reads the same health as the full pod would', () => {
    const health = (raw: unknown, minReadySeconds = 0): ReturnType<typeof podHealth> => podHealth(decodePod(raw).pod, NOW, minReadySeconds);
    expect(health(wirePod('web-0'), 30)).toEqual({ ready: true });
    expect(health(wirePod('web-0', { ready: false, waiting: 'CrashLoopBackOff' }))).toEqual({ ready: false, reason: 'CrashLoopBackOff' });
    expect(health(wirePod('web-0', { ready: false }))).toEqual({ ready: false, reason: 'not Ready (ContainersNotReady)' });
    expect(health(wirePod('web-0', { deleting: true }))).toEqual({ ready: false, reason: 'Terminating' });
  });

  it('keeps the handover request and the eviction guard\'s mark, and no other annotation', () => {
    const raw = wirePod('web-0') as { metadata: { annotations: Record<string, string> } };
    raw.metadata.annotations['rollguard.io/handover'] = 'requested';
    raw.metadata.annotations['rollguard.io/eviction-allowed'] = NOW.toISOString();
    raw.metadata.annotations['rollguard.io/handover-candidate'] = NOW.toISOString();
    expect(decodePod(raw, HANDOVER_POD_ANNOTATIONS).pod.metadata?.annotations).toEqual({ 'rollguard.io/handover': 'requested', 'rollguard.io/eviction-allowed': NOW.toISOString() });
    expect(decodePod(wirePod('web-0'), HANDOVER_POD_ANNOTATIONS).pod.metadata?.annotations).toBeUndefined();
  });

  it('names the pod when a required field is missing', () => {
    expect(() => decodePod({ metadata: { namespace: 'shop', name: 'web-0' } })).toThrow('pod shop/web-0 lacks');
  });

  it('finds the controlling StatefulSet, not any owner', () => {
    expect(decodePod(wirePod('web-0')).setName).toBe('web');
    expect(decodePod(wirePod('web-0', { owner: null })).setName).toBeUndefined();
    const owned = wirePod('web-0') as { metadata: { ownerReferences: { controller: boolean }[] } };
    owned.metadata.ownerReferences[0]!.controller = false;
    expect(decodePod(owned).setName).toBeUndefined();
  });
});

describe('PodCache', () => {
  const changes = (cache: PodCache): string[] => {
    const seen: string[] = [];
    cache.onChange((key) => seen.push(key));
    return seen;
  };

  it('groups pods by their set and tells which set changed', () => {
    const cache = new PodCache();
    const seen = changes(cache);
    cache.upsert(decodePod(wirePod('web-0')));
    cache.upsert(decodePod(wirePod('web-1')));
    cache.upsert(decodePod(wirePod('db-0', { owner: 'db' })));
    expect(cache.podsOf('shop', 'web').map((p) => p.metadata?.name).sort()).toEqual(['web-0', 'web-1']);
    expect(cache.get('shop', 'db-0')?.metadata?.uid).toBe('uid-db-0');
    expect(seen).toEqual(['shop/web', 'shop/web', 'shop/db']);
    expect(cache.size()).toBe(3);
  });

  it('keeps a new resourceVersion but wakes nobody when nothing a decision reads changed', () => {
    const cache = new PodCache();
    cache.upsert(decodePod(wirePod('web-0', { rv: '1' })));
    const seen = changes(cache);
    cache.upsert(decodePod(wirePod('web-0', { rv: '2' })));
    expect(seen).toEqual([]);
    expect(cache.get('shop', 'web-0')?.metadata?.resourceVersion).toBe('2');
    cache.upsert(decodePod(wirePod('web-0', { rv: '3', ready: false })));
    expect(seen).toEqual(['shop/web']);
  });

  it('ignores pods no StatefulSet controls', () => {
    const cache = new PodCache();
    const seen = changes(cache);
    cache.upsert(decodePod(wirePod('loose', { owner: null })));
    expect(cache.size()).toBe(0);
    expect(seen).toEqual([]);
  });

  it('drops on delete and on a relist that no longer has the pod, within the relisted namespace only', () => {
    const cache = new PodCache();
    cache.upsert(decodePod(wirePod('web-0')));
    cache.upsert(decodePod(wirePod('web-1')));
    cache.upsert(decodePod(wirePod('web-0', { namespace: 'other' })));
    const seen = changes(cache);
    cache.remove(decodePod(wirePod('web-1')));
    expect(seen).toEqual(['shop/web']);
    cache.replace([], 'shop');
    expect(cache.podsOf('shop', 'web')).toEqual([]);
    expect(cache.podsOf('other', 'web')).toHaveLength(1);
    cache.replace([], undefined);
    expect(cache.size()).toBe(0);
  });
});
