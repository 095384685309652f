import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { decideEviction, type EvictionFacts } from '../../src/handover/eviction.js';
import { createEvictionHandler } from '../../src/handover/eviction-handler.js';
import { createMetrics } from '../../src/metrics.js';

const NOW = new Date('2026-03-01T12:00:00Z');
const set = (annotations: Record<string, string> = {}, readyReplicas = 3): V1StatefulSet => ({
  metadata: {
    name: 'db',
    labels: { 'rollguard.io/enabled': 'true' },
    annotations: { 'rollguard.io/rollout': 'health-gated', 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': 'POST :8008/switchover', ...annotations },
  },
  status: { replicas: 3, readyReplicas },
});
const pod = (role: string, requested = false, annotations: Record<string, string> = {}): V1Pod => ({
  metadata: { name: 'db-0', uid: 'u0', labels: { role }, annotations: { ...(requested ? { 'rollguard.io/handover': 'requested' } : {}), ...annotations } },
});
const claimedUntil = (ms: number): Record<string, string> => ({ 'rollguard.io/handover-candidate': new Date(NOW.getTime() + ms).toISOString() });
const facts = (over: Partial<EvictionFacts>): EvictionFacts => ({ pod: pod('primary'), set: set(), dryRun: false, now: NOW, maxDeferMs: 600_000, ...over });

describe('decideEviction', () => {
  it('defers the eviction of the primary with 429 and marks the pod for a handover', () => {
    expect(decideEviction(facts({}))).toEqual({ allow: false, mark: true, about: 'primary', message: 'rollguard: pod db-0 is the primary of StatefulSet db; eviction triggered a handover of the role, retry' });
  });

  it('marks nothing on a dry run, or when a handover is already requested or in flight', () => {
    expect(decideEviction(facts({ dryRun: true }))).toMatchObject({ allow: false, mark: false });
    expect(decideEviction(facts({ pod: pod('primary', true) }))).toMatchObject({ allow: false, mark: false, message: expect.stringContaining('in progress') });
    const inFlight = set({ 'rollguard.io/handover-state': JSON.stringify({ from: 'db-0', fromUid: 'u0', to: 'db-1', trigger: 'rollout', startedAt: NOW.toISOString(), attempt: 1, fallback: false }) });
    expect(decideEviction(facts({ set: inFlight }))).toMatchObject({ allow: false, mark: false });
  });

  it('defers a primary that was demoted until the leader saw another Ready pod take the role', () => {
    const handingOver = (over: Record<string, unknown> = {}, readyReplicas = 3): V1StatefulSet =>
      set({ 'rollguard.io/handover-state': JSON.stringify({ from: 'db-0', fromUid: 'u0', to: 'db-1', trigger: 'requested', startedAt: NOW.toISOString(), calledAt: NOW.toISOString(), attempt: 1, fallback: false, ...over }) }, readyReplicas);
    expect(decideEviction(facts({ pod: pod('replica'), set: handingOver() }))).toEqual({
      allow: false,
      mark: false,
      about: 'primary',
      message: 'rollguard: pod db-0 handed the primary role of StatefulSet db away, and no other pod is seen to hold it yet; retry',
    });
    // the leader removed its state: the role moved
    expect(decideEviction(facts({ pod: pod('replica'), set: set() }))).toEqual({ allow: true, guarded: true });
    // another pod of that name, on-failure proceed, no other Ready pod, or deferred past the bound
    expect(decideEviction(facts({ pod: pod('replica'), set: handingOver({ fromUid: 'u-old' }) }))).toEqual({ allow: true, guarded: true });
    expect(decideEviction(facts({ pod: pod('replica'), set: handingOver({ outcome: 'proceed' }) }))).toEqual({ allow: true, guarded: true });
    expect(decideEviction(facts({ pod: pod('replica'), set: handingOver({}, 1) }))).toEqual({ allow: true, guarded: true });
    expect(decideEviction(facts({ pod: pod('replica'), set: handingOver(), firstDeferredAt: new Date(NOW.getTime() - 600_000) }))).toEqual({ allow: true, guarded: true });
  });

  it('allows every other eviction at once; a replica of a guarded set is to be marked first', () => {
    expect(decideEviction(facts({ pod: pod('replica') }))).toEqual({ allow: true, guarded: true });
    expect(decideEviction(facts({ pod: pod('replica', false, claimedUntil(-1)) }))).toEqual({ allow: true, guarded: true });
    expect(decideEviction(facts({ set: undefined }))).toEqual({ allow: true });
    expect(decideEviction(facts({ pod: undefined }))).toEqual({ allow: true });
    const notGated = set();
    delete notGated.metadata!.annotations!['rollguard.io/rollout'];
    expect(decideEviction(facts({ set: notGated }))).toEqual({ allow: true });
  });

  it('defers the candidate of a handover attempt until its deadline', () => {
    expect(decideEviction(facts({ pod: pod('replica', false, claimedUntil(30_000)) }))).toEqual({
      allow: false,
      mark: false,
      about: 'candidate',
      message: 'rollguard: pod db-0 is the candidate of a handover of the primary role of StatefulSet db in progress, retry',
    });
  });

  it('allows with a warning when no other pod is Ready, or once the deferral has lasted its bound', () => {
    expect(decideEviction(facts({ set: set({}, 1) }))).toMatchObject({ allow: true, warning: expect.stringContaining('no other pod is Ready') });
    expect(decideEviction(facts({ firstDeferredAt: new Date(NOW.getTime() - 600_000) }))).toMatchObject({ allow: true, warning: expect.stringContaining('after 10 m') });
    expect(decideEviction(facts({ firstDeferredAt: new Date(NOW.getTime() - 599_000) }))).toMatchObject({ allow: false });
  });
});

describe('createEvictionHandler', () => {
  const review = (over: Record<string, unknown> = {}) => ({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'r1',
      kind: { group: 'policy', version: 'v1', kind: 'Eviction' },
      resource: { group: '', version: 'v1', resource: 'pods' },
      subResource: 'eviction',
      name: 'db-0',
      namespace: 'shop',
      operation: 'CREATE',
      ...over,
    },
  });
  const primaryPod: V1Pod = { metadata: { name: 'db-0', uid: 'u0', labels: { role: 'primary' }, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'db', uid: 's', controller: true }] } };

  /** `between`: what happened to the pod after the guard read it and before its mark landed. */
  function handler(readPod: () => Promise<V1Pod | undefined>, between: (pod: V1Pod) => V1Pod = (p) => p) {
    const marks: string[] = [];
    const events: string[] = [];
    const metrics = createMetrics();
    const h = createEvictionHandler({
      readPod,
      recordOnSet: async (_set, spec) => {
        events.push(`${spec.reason}: ${spec.message}`);
      },
      statefulSet: () => set(),
      annotatePod: async (_ns, name, ops) => {
        const op = ops[0] as { path: string; value: unknown };
        marks.push(`${name} ${op.path === '/metadata/annotations' ? `add-map ${Object.keys(op.value as object).join()}` : `add-key ${op.path}`}`);
        const read = between((await readPod())!);
        const added = op.path === '/metadata/annotations' ? (op.value as Record<string, string>) : { [op.path.split('/').pop()!.replace('~1', '/')]: String(op.value) };
        return { ...read, metadata: { ...read.metadata, annotations: { ...read.metadata?.annotations, ...added } } };
      },
      now: () => NOW,
      maxDeferMs: 600_000,
      metrics,
      logger: pino({ level: 'silent' }),
    });
    return { h, marks, events, metrics };
  }

  const counts = async (metrics: ReturnType<typeof createMetrics>): Promise<Record<string, number>> =>
    Object.fromEntries((await metrics.evictionReviews.get()).values.map((v) => [String(v.labels.result), v.value]));

  it('answers 429 with the message and marks the pod once', async () => {
    const { h, marks, events, metrics } = handler(async () => primaryPod);
    const res = await h(review());
    await h(review({ dryRun: true }));
    expect(events).toEqual(['EvictionDeferred: Eviction of pod db-0 deferred (HTTP 429): it is the primary; handing the role over first']);
    expect(res.body).toMatchObject({ response: { uid: 'r1', allowed: false, status: { code: 429, reason: 'TooManyRequests', message: expect.stringContaining('eviction triggered a handover') } } });
    expect(marks).toEqual(['db-0 add-map rollguard.io/handover']);
    await h(review({ dryRun: true }));
    expect(marks).toHaveLength(1);
    expect(await counts(metrics)).toEqual({ deferred: 3 });
  });

  it('a dry run first neither records the deferral nor starts its clock: the real eviction after it does', async () => {
    const { h, marks, events } = handler(async () => primaryPod);
    expect((await h(review({ dryRun: true }))).body).toMatchObject({ response: { allowed: false, status: { code: 429 } } });
    expect([marks, events]).toEqual([[], []]);
    await h(review());
    expect(events).toEqual(['EvictionDeferred: Eviction of pod db-0 deferred (HTTP 429): it is the primary; handing the role over first']);
    expect(marks).toEqual(['db-0 add-map rollguard.io/handover']);
  });

  it('allows what is not an eviction, a pod that is gone, and, with a warning, a pod it cannot read', async () => {
    const notEviction = handler(async () => primaryPod);
    expect((await notEviction.h(review({ subResource: 'status' }))).body).toMatchObject({ response: { allowed: true } });
    const gone = handler(async () => undefined);
    expect((await gone.h(review())).body).toMatchObject({ response: { allowed: true } });
    const unreadable = handler(() => Promise.reject(new Error('connection refused')));
    const failing = await unreadable.h(review());
    expect(failing.body).toMatchObject({ response: { allowed: true, warnings: [expect.stringContaining('connection refused')] } });
    expect([await counts(notEviction.metrics), await counts(gone.metrics), await counts(unreadable.metrics)]).toEqual([{ allowed: 1 }, { allowed: 1 }, { error: 1 }]);
  });

  it('marks a replica of a guarded set before it allows its eviction, never on a dry run', async () => {
    const replica: V1Pod = { ...primaryPod, metadata: { ...primaryPod.metadata, labels: { role: 'replica' } } };
    const { h, marks, events, metrics } = handler(async () => replica);
    expect((await h(review({ dryRun: true }))).body).toMatchObject({ response: { allowed: true } });
    expect(marks).toEqual([]);
    expect((await h(review())).body).toMatchObject({ response: { allowed: true } });
    expect(marks).toEqual(['db-0 add-map rollguard.io/eviction-allowed']);
    expect(events).toEqual([]);
    expect(await counts(metrics)).toEqual({ allowed: 2 });
  });

  it('decides again on what the mark returned: claimed as a candidate, or made the primary, after the read', async () => {
    const replica: V1Pod = { ...primaryPod, metadata: { ...primaryPod.metadata, labels: { role: 'replica' } } };
    const claimed = handler(async () => replica, (p) => ({ ...p, metadata: { ...p.metadata, annotations: claimedUntil(30_000) } }));
    expect((await claimed.h(review())).body).toMatchObject({ response: { allowed: false, status: { code: 429, message: expect.stringContaining('is the candidate of a handover') } } });
    expect([claimed.marks, claimed.events]).toEqual([['db-0 add-map rollguard.io/eviction-allowed'], []]);
    const promoted = handler(async () => replica, (p) => ({ ...p, metadata: { ...p.metadata, labels: { role: 'primary' } } }));
    expect((await promoted.h(review())).body).toMatchObject({ response: { allowed: false, status: { code: 429, message: expect.stringContaining('eviction triggered a handover') } } });
    expect(promoted.marks).toEqual(['db-0 add-map rollguard.io/eviction-allowed', 'db-0 add-key /metadata/annotations/rollguard.io~1handover']);
    expect(await counts(promoted.metrics)).toEqual({ deferred: 1 });
  });

  it('refuses a body that is not a review with 400', async () => {
    const { h, metrics } = handler(async () => primaryPod);
    expect((await h({ kind: 'nope' })).status).toBe(400);
    expect(await counts(metrics)).toEqual({ invalid: 1 });
  });
});
