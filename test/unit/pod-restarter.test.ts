import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { EXPIRES_AT_PREFIX, expiryOf } from '../../src/compat/expiry.js';
import { decodeExpiringPod, ExpiringPodStore, type ExpiringPod } from '../../src/compat/expiring-pods.js';
import { PodRestarter, REASON_EVICTION_BLOCKED, REASON_EXPIRED, REASON_INVALID_EXPIRY } from '../../src/compat/pod-restarter.js';

const AT = Date.UTC(2026, 11, 1, 12);

function expiring(annotations: Record<string, string>, terminating = false): ExpiringPod {
  return { namespace: 'ns', name: 'p', uid: 'u1', resourceVersion: '7', terminating, expiry: expiryOf(annotations) };
}

function apiError(code: number): Error {
  return Object.assign(new Error(`HTTP ${code}`), { code });
}

function restarter(pod: ExpiringPod | undefined, evict: () => Promise<void>, now: number) {
  const recorded: { reason: string; type: string; message: string }[] = [];
  const evictions: string[] = [];
  const r = new PodRestarter({
    pod: () => pod,
    evict: async (_ns, _name, uid) => {
      evictions.push(uid);
      await evict();
    },
    events: { record: async (_s, spec) => void recorded.push({ reason: spec.reason, type: spec.type, message: spec.message }) },
    logger: pino({ level: 'silent' }),
    now: () => now,
  });
  return { r, recorded, evictions };
}

describe('PodRestarter', () => {
  const annotations = { [`${EXPIRES_AT_PREFIX}tls`]: new Date(AT).toISOString() };

  it('waits until the time, not a moment before', async () => {
    const { r, evictions } = restarter(expiring(annotations), async () => undefined, AT - 2_000);
    expect(await r.reconcile('ns/p')).toEqual({ requeueAfterMs: 2_000 });
    expect(evictions).toEqual([]);
  });

  it('evicts at the time, with the uid as precondition, and says so', async () => {
    const { r, evictions, recorded } = restarter(expiring(annotations), async () => undefined, AT);
    expect(await r.reconcile('ns/p')).toEqual({});
    expect(evictions).toEqual(['u1']);
    expect(recorded.map((e) => e.reason)).toEqual([REASON_EXPIRED]);
  });

  it('retries a 429 with a doubling wait and tells it once', async () => {
    const { r, recorded } = restarter(expiring(annotations), async () => Promise.reject(apiError(429)), AT + 1);
    const waits = [];
    for (let i = 0; i < 4; i++) waits.push((await r.reconcile('ns/p')).requeueAfterMs);
    expect(waits).toEqual([5_000, 10_000, 20_000, 40_000]);
    expect(recorded.map((e) => e.reason)).toEqual([REASON_EVICTION_BLOCKED]);
  });

  it('leaves a pod that is gone or replaced, and fails other errors with context', async () => {
    expect(await restarter(expiring(annotations), async () => Promise.reject(apiError(404)), AT).r.reconcile('ns/p')).toEqual({});
    expect(await restarter(expiring(annotations), async () => Promise.reject(apiError(409)), AT).r.reconcile('ns/p')).toEqual({});
    await expect(restarter(expiring(annotations), async () => Promise.reject(apiError(500)), AT).r.reconcile('ns/p')).rejects.toThrow(/evicting Pod ns\/p/);
  });

  it('leaves a terminating pod alone, and warns once about an unreadable time', async () => {
    expect((await restarter(expiring(annotations, true), async () => undefined, AT + 1).r.reconcile('ns/p'))).toEqual({});
    const { r, recorded, evictions } = restarter(expiring({ [`${EXPIRES_AT_PREFIX}x`]: 'next week' }), async () => undefined, AT);
    await r.reconcile('ns/p');
    await r.reconcile('ns/p');
    expect(recorded.map((e) => [e.type, e.reason])).toEqual([['Warning', REASON_INVALID_EXPIRY]]);
    expect(evictions).toEqual([]);
  });
});

describe('ExpiringPodStore', () => {
  const raw = (name: string, rv: string, annotations?: Record<string, string>) => ({ metadata: { namespace: 'ns', name, uid: `u-${name}`, resourceVersion: rv, annotations } });

  it('keeps only pods with an expires-at annotation, and only that annotation', () => {
    const store = new ExpiringPodStore();
    const changed: string[] = [];
    store.onChange((_ns, name) => changed.push(name));
    store.replace([decodeExpiringPod(raw('plain', '1', { a: 'b' })), decodeExpiringPod(raw('cert', '2', { [`${EXPIRES_AT_PREFIX}t`]: '2026-12-01T12:00:00Z', big: 'x'.repeat(1000) }))], undefined);
    expect(store.keys()).toEqual(['ns/cert']);
    expect(store.get('ns', 'cert')?.expiry.at).toBe(AT);
    expect(JSON.stringify(store.get('ns', 'cert'))).not.toContain('xxx');
    // losing the annotation drops it
    store.upsert(decodeExpiringPod(raw('cert', '3', {})));
    expect(store.size()).toBe(0);
    expect(changed).toEqual(['cert', 'cert']);
  });

  it('keeps nothing about a pod once it is gone: refusals, the Warning of an unreadable time, the Events to aggregate', async () => {
    const valid = { [`${EXPIRES_AT_PREFIX}tls`]: new Date(AT).toISOString() };
    let pod: ExpiringPod | undefined = expiring({ ...valid, [`${EXPIRES_AT_PREFIX}bad`]: 'soon' });
    const forgotten: string[] = [];
    const r = new PodRestarter({
      pod: () => pod,
      evict: async () => Promise.reject(apiError(429)),
      events: { record: async () => undefined, forget: (uid) => void forgotten.push(uid) },
      logger: pino({ level: 'silent' }),
      now: () => AT + 1,
    });
    await r.reconcile('ns/p');
    expect(r.memory()).toEqual({ refusals: 1, warned: 1, told: 1 });
    // the same name, another pod: its refusals count afresh
    pod = { ...pod!, uid: 'u2', resourceVersion: '9', expiry: expiryOf(valid) };
    await r.reconcile('ns/p');
    expect(r.memory()).toEqual({ refusals: 1, warned: 0, told: 1 });
    pod = undefined;
    await r.reconcile('ns/p');
    expect(r.memory()).toEqual({ refusals: 0, warned: 0, told: 0 });
    expect(forgotten).toEqual(['u2']);
  });
});

