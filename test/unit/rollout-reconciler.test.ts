import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch from 'fast-json-patch';
import type { Operation } from 'fast-json-patch';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { EventSpec } from '../../src/kube/events.js';
import { createMetrics } from '../../src/metrics.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE, HEALTH_URL_ANNOTATION } from '../../src/rollout/decision.js';
import type { HealthResult } from '../../src/rollout/health-probe.js';
import { LAST_STEP_ANNOTATION } from '../../src/rollout/last-step.js';
import { ConflictError } from '../../src/kube/api-status.js';
import { RolloutReconciler } from '../../src/rollout/reconciler.js';

const KEY = 'shop/web';
const OLD = 'web-5d8f7c';
const NEW = 'web-7b9c4e';
const NOW = new Date('2025-03-01T12:00:00Z');
const MIN_STEP_INTERVAL_MS = 60_000;
const REPORT_AFTER_MS = 1_000;
const RECHECK_MS = 300;

function makeSet(opts: { partition?: number; replicas?: number; current?: string; update?: string; annotations?: Record<string, string>; rv?: string; image?: string } = {}): V1StatefulSet {
  const replicas = opts.replicas ?? 3;
  return {
    metadata: {
      name: 'web',
      namespace: 'shop',
      uid: 'set-uid',
      resourceVersion: opts.rv ?? '100',
      generation: 2,
      labels: { 'rollguard.io/enabled': 'true' },
      annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE, ...opts.annotations },
    },
    spec: {
      replicas,
      serviceName: 'web',
      selector: { matchLabels: { app: 'web' } },
      template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'app', image: opts.image ?? 'registry.example/web:1' }] } },
      updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: opts.partition ?? replicas } },
    },
    status: { replicas, observedGeneration: 2, currentRevision: opts.current ?? OLD, updateRevision: opts.update ?? NEW },
  };
}

function makePod(ordinal: number, revision: string, waiting?: string): V1Pod {
  return {
    metadata: { name: `web-${ordinal}`, namespace: 'shop', uid: `uid-${ordinal}-${revision}`, resourceVersion: `${10 + ordinal}`, labels: { 'controller-revision-hash': revision } },
    status: {
      phase: 'Running',
      conditions: [{ type: 'Ready', status: waiting ? 'False' : 'True', lastTransitionTime: new Date(NOW.getTime() - 3_600_000) }],
      containerStatuses: [{ name: 'app', image: '', imageID: '', restartCount: 0, ready: !waiting, ...(waiting ? { state: { waiting: { reason: waiting } } } : {}) }],
    },
  };
}

/**
 * An API server of one StatefulSet (JSON Patch applied for real, so a failed `test` is a 422)
 * and a cache that only catches up when told: the gap between the two is what a stale view is.
 */
function harness(initial: V1StatefulSet, pods: V1Pod[], opts: { health?: HealthResult } = {}) {
  let server = structuredClone(initial);
  let cached = structuredClone(initial);
  let podList = pods;
  const patches: Operation[][] = [];
  const deletes: { name: string; preconditions: { uid: string; resourceVersion: string } }[] = [];
  const events: EventSpec[] = [];
  const probes: string[] = [];
  const enqueued: string[] = [];
  let deleteError: { code: number } | undefined;
  let patchError: unknown;
  let now = NOW;
  const metrics = createMetrics(new Registry());
  const abort = new AbortController();
  const newReconciler = (): RolloutReconciler =>
    new RolloutReconciler({
      statefulSet: () => cached,
      podsOf: () => podList,
      pod: (_ns, name) => podList.find((pod) => pod.metadata?.name === name),
      patchStatefulSet: async (_ns, _name, ops) => {
        patches.push(ops);
        if (patchError) throw patchError;
        try {
          server = jsonpatch.applyPatch(structuredClone(server), ops, true, false).newDocument;
        } catch (err) {
          throw Object.assign(new Error(`test failed: ${String(err)}`), { code: 422 });
        }
        server.metadata!.resourceVersion = String(Number(server.metadata!.resourceVersion) + 1);
        return server;
      },
      deletePod: async (_ns, name, preconditions) => {
        if (deleteError) throw Object.assign(new Error('delete failed'), deleteError);
        deletes.push({ name, preconditions });
      },
      probeHealth: async (_set, url) => {
        probes.push(url);
        return opts.health ?? { ok: true, detail: 'HTTP 200 OK' };
      },
      enqueue: (key) => enqueued.push(key),
      events: { record: async (_subject, spec) => void events.push(spec) },
      metrics,
      logger: pino({ level: 'silent' }),
      minStepIntervalMs: MIN_STEP_INTERVAL_MS,
      defaultMinReadySeconds: 0,
      blockedReportAfterMs: REPORT_AFTER_MS,
      blockedRecheckMs: RECHECK_MS,
      signal: abort.signal,
      now: () => now,
    });
  return {
    reconciler: newReconciler(),
    newReconciler,
    patches,
    deletes,
    events,
    probes,
    enqueued,
    metrics,
    server: () => server,
    /** The watch delivers the server's state, with the StatefulSet controller having observed it. */
    catchUp: () => {
      cached = structuredClone(server);
      cached.metadata!.generation = 2;
    },
    setCached: (set: V1StatefulSet) => (cached = set),
    setPods: (next: V1Pod[]) => (podList = next),
    setNow: (next: Date) => (now = next),
    failDeletes: (code: number) => (deleteError = { code }),
    failPatches: (err: unknown) => (patchError = err),
  };
}

const partitionOf = (set: V1StatefulSet): number | undefined => set.spec?.updateStrategy?.rollingUpdate?.partition;

describe('RolloutReconciler', () => {
  it('steps with one write that tests the resourceVersion, moves the partition and records when, then tells', async () => {
    const h = harness(makeSet({ partition: 3 }), [makePod(0, OLD), makePod(1, OLD), makePod(2, OLD)]);
    expect(await h.reconciler.reconcile(KEY)).toEqual({});
    expect(h.patches).toEqual([
      [
        { op: 'test', path: '/metadata/resourceVersion', value: '100' },
        { op: 'test', path: '/spec/updateStrategy/rollingUpdate/partition', value: 3 },
        { op: 'replace', path: '/spec/updateStrategy/rollingUpdate/partition', value: 2 },
        { op: 'add', path: '/metadata/annotations/rollguard.io~1last-step-at', value: NOW.toISOString() },
      ],
    ]);
    expect(h.events).toEqual([
      { type: 'Normal', reason: 'PartitionUpdate', message: 'Updated partition from 3 to 2: pod web-2 ready, web-0 and web-1 healthy', action: 'UpdatePartition' },
    ]);
    expect((await h.metrics.rolloutSteps.get()).values[0]!.value).toBe(1);
    expect((await h.metrics.rolloutLastStep.get()).values[0]!.value).toBe(NOW.getTime() / 1000);
    expect(h.reconciler.state(KEY).lastStepAt).toEqual(NOW);
  });

  it('never steps twice for one ready pod: not from a cache without its write, nor once the write is seen', async () => {
    const h = harness(makeSet({ partition: 3 }), [makePod(0, OLD), makePod(1, OLD), makePod(2, OLD)]);
    await h.reconciler.reconcile(KEY);
    // a pod event wakes the set before the watch delivered the step: nothing is written
    h.setNow(new Date(NOW.getTime() + MIN_STEP_INTERVAL_MS * 2));
    expect(await h.reconciler.reconcile(KEY)).toEqual({});
    expect(h.patches).toHaveLength(1);
    // the step is seen, web-2 still runs the old revision: that is not a ready pod on the new one
    h.catchUp();
    await h.reconciler.reconcile(KEY);
    expect(h.patches).toHaveLength(1);
    expect(partitionOf(h.server())).toBe(2);
    // and a second process acting on the stale view is refused by the API server
    h.setCached(makeSet({ partition: 3 }));
    await expect(h.newReconciler().reconcile(KEY)).rejects.toBeInstanceOf(ConflictError);
    expect(partitionOf(h.server())).toBe(2);
    expect(h.events.filter((e) => e.reason === 'PartitionUpdate')).toHaveLength(1);
  });

  it('records a Warning that names the policy when an admission policy denies its write', async () => {
    const h = harness(makeSet({ partition: 3 }), [makePod(0, OLD), makePod(1, OLD), makePod(2, OLD)]);
    const message =
      "statefulsets.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'rollguard-fence-statefulsets' with binding 'rollguard-fence-statefulsets' denied request: this write changes spec.template.spec";
    h.failPatches(Object.assign(new Error('Forbidden'), { code: 403, body: JSON.stringify({ kind: 'Status', code: 403, message }) }));
    await expect(h.reconciler.reconcile(KEY)).rejects.toThrow('patching the partition of StatefulSet');
    expect(h.events).toEqual([{ type: 'Warning', reason: 'WriteDenied', message, action: 'UpdatePartition' }]);
  });

  it('after a restart, waits out the interval from the annotation before the next step', async () => {
    const h = harness(
      makeSet({ partition: 2, annotations: { [LAST_STEP_ANNOTATION]: new Date(NOW.getTime() - 10_000).toISOString() } }),
      [makePod(0, OLD), makePod(1, OLD), makePod(2, NEW)],
    );
    expect(await h.reconciler.reconcile(KEY)).toEqual({ requeueAfterMs: MIN_STEP_INTERVAL_MS - 10_000 });
    expect(h.patches).toEqual([]);
    h.setNow(new Date(NOW.getTime() + MIN_STEP_INTERVAL_MS));
    await h.reconciler.reconcile(KEY);
    expect(partitionOf(h.server())).toBe(1);
  });

  it('records RolloutBlocked once per cause, after the grace, and counts the time', async () => {
    const h = harness(makeSet({ partition: 3 }), [makePod(0, OLD, 'CrashLoopBackOff'), makePod(1, OLD), makePod(2, OLD)]);
    expect(await h.reconciler.reconcile(KEY)).toEqual({ requeueAfterMs: REPORT_AFTER_MS });
    expect(h.events).toEqual([]);
    for (const ms of [1_000, 1_300, 1_600, 5_000]) {
      h.setNow(new Date(NOW.getTime() + ms));
      expect(await h.reconciler.reconcile(KEY)).toEqual({ requeueAfterMs: RECHECK_MS });
    }
    expect(h.events).toEqual([
      { type: 'Warning', reason: 'RolloutBlocked', message: 'Rollout blocked at partition 3: pod web-0 is not ready (CrashLoopBackOff)', action: 'Wait' },
    ]);
    expect((await h.metrics.rolloutBlockedSeconds.get()).values[0]!.value).toBe(5);
    expect(h.reconciler.state(KEY).blockedOn).toBe('Rollout blocked at partition 3: pod web-0 is not ready (CrashLoopBackOff)');
    expect(h.patches).toEqual([]);
  });

  it('deletes a pod stuck on a revision the template left, guarded by its uid and resourceVersion', async () => {
    const stuck = makePod(2, 'web-bad', 'ImagePullBackOff');
    const h = harness(makeSet({ partition: 3, current: OLD, update: OLD }), [makePod(0, OLD), makePod(1, OLD), stuck]);
    await h.reconciler.reconcile(KEY);
    expect(h.deletes).toEqual([{ name: 'web-2', preconditions: { uid: 'uid-2-web-bad', resourceVersion: '12' } }]);
    expect(h.events).toHaveLength(1);
    expect(h.events[0]).toMatchObject({ type: 'Warning', reason: 'ForcedRollback', action: 'DeletePod' });
    expect(h.events[0]!.message).toMatch(/^Deleted pod web-2: stuck not ready \(ImagePullBackOff\) on revision web-bad/);
  });

  it('takes a pod that is already gone as done, and a changed one as a reason to decide again', async () => {
    const pods = [makePod(0, OLD), makePod(1, OLD), makePod(2, 'web-bad', 'ImagePullBackOff')];
    const gone = harness(makeSet({ current: OLD, update: OLD }), pods);
    gone.failDeletes(404);
    expect(await gone.reconciler.reconcile(KEY)).toEqual({});
    expect(gone.events).toEqual([]);
    const changed = harness(makeSet({ current: OLD, update: OLD }), pods);
    changed.failDeletes(409);
    await expect(changed.reconciler.reconcile(KEY)).rejects.toBeInstanceOf(ConflictError);
    expect(changed.events).toEqual([]);
  });

  it('GETs the health URL off the queue, then steps with its answer', async () => {
    const url = 'http://web.shop.svc:8080/healthz';
    const h = harness(makeSet({ partition: 3, annotations: { [HEALTH_URL_ANNOTATION]: url } }), [makePod(0, OLD), makePod(1, OLD), makePod(2, OLD)]);
    expect(await h.reconciler.reconcile(KEY)).toEqual({});
    expect(h.patches).toEqual([]);
    await h.reconciler.settled();
    expect(h.probes).toEqual([url]);
    expect(h.enqueued).toEqual([KEY]);
    await h.reconciler.reconcile(KEY);
    expect(partitionOf(h.server())).toBe(2);
    expect(h.events[0]!.message).toBe('Updated partition from 3 to 2: pod web-2 ready, web-0 and web-1 healthy, health check passed (HTTP 200 OK)');
  });

  it('blocks on a failing health URL, asking again on every recheck, with one Event', async () => {
    const url = 'http://web.shop.svc:8080/healthz';
    const h = harness(makeSet({ partition: 3, annotations: { [HEALTH_URL_ANNOTATION]: url } }), [makePod(0, OLD), makePod(1, OLD), makePod(2, OLD)], {
      health: { ok: false, detail: 'HTTP 503 Service Unavailable' },
    });
    for (const ms of [0, 1_000, 1_300]) {
      h.setNow(new Date(NOW.getTime() + ms));
      await h.reconciler.reconcile(KEY);
      await h.reconciler.settled();
      await h.reconciler.reconcile(KEY);
    }
    expect(h.probes).toHaveLength(3);
    expect(h.events.map((e) => e.message)).toEqual([
      `Rollout blocked at partition 3: health check ${url} failed (HTTP 503 Service Unavailable), pod web-2 not replaced`,
    ]);
    expect(h.patches).toEqual([]);
  });

  describe('holding the partition when the webhook did not', () => {
    it('holds before anything else when the template changed mid-rollout', async () => {
      const before = makeSet({ partition: 1 });
      const after = makeSet({ partition: 1, image: 'registry.example/web:3', rv: '101' });
      const h = harness(after, [makePod(0, OLD), makePod(1, NEW), makePod(2, NEW)]);
      h.reconciler.noteSetChange(before, after);
      await h.reconciler.reconcile(KEY);
      expect(partitionOf(h.server())).toBe(3);
      expect(h.events).toEqual([
        {
          type: 'Normal',
          reason: 'Hold',
          message: 'Updated partition from 1 to 3: the spec changed; held at replicas so that a template change rolls nothing until rollguard steps it',
          action: 'UpdatePartition',
        },
      ]);
    });

    it('resumes a set first seen mid-rollout from the partition it finds', async () => {
      const set = makeSet({ partition: 1 });
      const h = harness(set, [makePod(0, OLD), makePod(1, NEW), makePod(2, NEW)]);
      h.reconciler.noteSetChange(undefined, set);
      await h.reconciler.reconcile(KEY);
      expect(partitionOf(h.server())).toBe(0);
      expect(h.events.map((e) => e.reason)).toEqual(['PartitionUpdate']);
    });

    it('holds a set first seen at rest below replicas', async () => {
      const set = makeSet({ partition: 0, current: OLD, update: OLD });
      const h = harness(set, [makePod(0, OLD), makePod(1, OLD), makePod(2, OLD)]);
      h.reconciler.noteSetChange(undefined, set);
      await h.reconciler.reconcile(KEY);
      expect(partitionOf(h.server())).toBe(3);
      expect(h.events[0]!.message).toMatch(/^Updated partition from 0 to 3: rollguard found the set health-gated and at rest;/);
    });

    it('drops a pending hold when the partition alone is written after it (newer intent)', async () => {
      const before = makeSet({ partition: 1 });
      const changed = makeSet({ partition: 1, image: 'registry.example/web:3', rv: '101' });
      const forced = makeSet({ partition: 0, image: 'registry.example/web:3', rv: '102' });
      const h = harness(forced, [makePod(0, OLD), makePod(1, NEW), makePod(2, NEW)]);
      h.reconciler.noteSetChange(before, changed);
      h.reconciler.noteSetChange(changed, forced);
      await h.reconciler.reconcile(KEY);
      expect(h.events.filter((e) => e.reason === 'Hold')).toEqual([]);
    });
  });

  it('forgets a set that lost its opt-in', async () => {
    const set = makeSet({ partition: 3 });
    delete set.metadata!.annotations![HEALTH_GATED_ANNOTATION];
    const h = harness(set, [makePod(0, OLD), makePod(1, OLD), makePod(2, OLD)]);
    expect(await h.reconciler.reconcile(KEY)).toEqual({});
    expect(h.patches).toEqual([]);
  });
});
