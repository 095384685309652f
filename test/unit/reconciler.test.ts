import type { Operation } from 'fast-json-patch';
import jsonpatch from 'fast-json-patch';
import type { V1StatefulSet } from '@kubernetes/client-node';
import pino from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { PRIMARY_HANDOVER } from '../../src/handover/settings.js';
import { createMetrics } from '../../src/metrics.js';
import { ENABLED_LABEL, LAST_RESTART_ANNOTATION, annotationKey, desiredAnnotations, annotationChanges, type ObjectVersion } from '../../src/restarter/annotations.js';
import { ConflictError } from '../../src/kube/api-status.js';
import { describeChange } from '../../src/restarter/change-text.js';
import {
  RestarterReconciler,
  annotationPatch,
  patchReason,
  type FreshRead,
  type ReconcilerDeps,
} from '../../src/restarter/reconciler.js';
import type { ObjectKind } from '../../src/restarter/references.js';
import type { ArgoRollout, Workload } from '../../src/kube/workloads.js';
import { HEALTH_GATED_ROLLOUTS } from '../../src/rollout/decision.js';
import { EVENT_DUE_ANNOTATION, EVENT_DUE_MAX_AGE_MS, dueEventName, formatEventDue, type EventDue } from '../../src/restarter/event-due.js';

const DUE_PATH = '/metadata/annotations/rollguard.io~1event-due';

const CM = annotationKey('ConfigMap', 'app');
const SECRET = annotationKey('Secret', 'creds');

function set(annotations: Record<string, string> | undefined, opts: { rv?: string; labelled?: boolean } = {}): V1StatefulSet {
  return {
    metadata: { namespace: 'ns', name: 'web', uid: 'set-uid', resourceVersion: opts.rv ?? '100', labels: opts.labelled === false ? {} : { [ENABLED_LABEL]: 'true' } },
    spec: {
      selector: {},
      serviceName: 'web',
      template: {
        metadata: { labels: { app: 'web' }, annotations },
        spec: { containers: [{ name: 'app', envFrom: [{ configMapRef: { name: 'app' } }, { secretRef: { name: 'creds' } }] }] },
      },
    },
  };
}

describe('annotationPatch', () => {
  const versions: Record<string, ObjectVersion> = { 'ConfigMap/app': { uid: 'u1', resourceVersion: '9', ignored: false } };
  const lookup = (kind: ObjectKind, _ns: string, name: string): ObjectVersion | undefined => versions[`${kind}/${name}`];

  it('tests the resourceVersion first, then changes only the keys that differ, escaped', () => {
    const current = set({ keep: 'me', [CM]: 'u1/5', [annotationKey('Secret', 'gone')]: 'u7/1' });
    const desired = desiredAnnotations(current, lookup);
    const changes = annotationChanges(current.spec!.template.metadata!.annotations, desired);
    const ops = annotationPatch('StatefulSet', current, desired, changes);
    expect(ops).toEqual([
      { op: 'test', path: '/metadata/resourceVersion', value: '100' },
      { op: 'replace', path: '/spec/template/metadata/annotations/configmap.rollguard.io~1app', value: 'u1/9' },
      { op: 'add', path: '/spec/template/metadata/annotations/secret.rollguard.io~1creds', value: 'absent' },
      { op: 'remove', path: '/spec/template/metadata/annotations/secret.rollguard.io~1gone' },
    ]);
    const patched = jsonpatch.applyPatch(structuredClone(current), ops as Operation[]).newDocument;
    expect(patched.spec!.template.metadata!.annotations).toEqual({ keep: 'me', [CM]: 'u1/9', [SECRET]: 'absent' });
  });

  it('adds the whole map when the template has no annotations, or no metadata', () => {
    const bare = set(undefined);
    const desired = desiredAnnotations(bare, lookup);
    const ops = annotationPatch('StatefulSet', bare, desired, annotationChanges(undefined, desired));
    expect(ops[1]).toEqual({ op: 'add', path: '/spec/template/metadata/annotations', value: { [CM]: 'u1/9', [SECRET]: 'absent' } });
    delete bare.spec!.template.metadata;
    expect(annotationPatch('StatefulSet', bare, desired, annotationChanges(undefined, desired))[1]).toEqual({
      op: 'add',
      path: '/spec/template/metadata',
      value: { annotations: { [CM]: 'u1/9', [SECRET]: 'absent' } },
    });
  });

  it('refuses a set without a resourceVersion, naming it', () => {
    const s = set({});
    delete s.metadata!.resourceVersion;
    expect(() => annotationPatch('StatefulSet', s, [], [])).toThrow('StatefulSet ns/web has no metadata.resourceVersion to patch against');
  });
});

describe('describeChange', () => {
  it.each([
    [{ key: CM, kind: 'ConfigMap', name: 'app', from: 'u1/812', to: 'u1/845' }, 'ConfigMap app changed (resourceVersion 812 → 845)'],
    [{ key: CM, kind: 'ConfigMap', name: 'app', from: 'absent', to: 'u1/845' }, 'ConfigMap app appeared (resourceVersion absent → 845)'],
    [{ key: CM, kind: 'ConfigMap', name: 'app', from: 'u1/845', to: 'absent' }, 'ConfigMap app was deleted (resourceVersion 845 → absent)'],
    [{ key: CM, kind: 'ConfigMap', name: 'app', from: 'u1/845', to: 'u2/900' }, 'ConfigMap app was recreated (uid u1 → u2, resourceVersion 845 → 900)'],
    [{ key: SECRET, kind: 'Secret', name: 'creds', to: 'u3/7' }, 'tracking Secret creds (resourceVersion 7)'],
    [{ key: SECRET, kind: 'Secret', name: 'creds', to: 'absent' }, 'tracking Secret creds (resourceVersion absent)'],
    [{ key: SECRET, kind: 'Secret', name: 'creds', from: 'u3/7' }, 'no longer tracking Secret creds'],
    [{ key: 'secret.rollguard.io/x_0123', kind: 'Secret', from: 'u3/7' }, 'no longer tracking the object of annotation secret.rollguard.io/x_0123'],
  ] as const)('%o', (change, text) => {
    expect(describeChange(change)).toBe(text);
  });
});

describe('patchReason', () => {
  it('tells a first annotation from a change and from a removal', () => {
    expect(patchReason(undefined, [{ key: CM, to: 'u/1' }])).toBe('ReferencesAnnotated');
    expect(patchReason({ other: 'x' }, [{ key: CM, to: 'u/1' }])).toBe('ReferencesAnnotated');
    expect(patchReason({ [CM]: 'u/1' }, [{ key: CM, from: 'u/1', to: 'u/2' }, { key: SECRET, to: 'absent' }])).toBe('ConfigChanged');
    expect(patchReason({ [CM]: 'u/1' }, [{ key: SECRET, to: 'absent' }])).toBe('ReferencesAnnotated');
    expect(patchReason({ [CM]: 'u/1' }, [{ key: CM, from: 'u/1' }])).toBe('ReferencesRemoved');
  });
});

describe('RestarterReconciler', () => {
  function harness(opts: {
    cached: Workload | undefined;
    versions?: Record<string, ObjectVersion>;
    progress?: string;
    synced?: boolean;
    patchError?: unknown;
    minRestartIntervalMs?: number;
    now?: Date;
    fresh?: FreshRead;
    data?: ReconcilerDeps['data'];
    timing?: string;
    /** the recorder's recordOnce: stored (true), or not (false); omitted: only record */
    recordOnce?: boolean;
  }) {
    const patches: Operation[][] = [];
    const patchedKinds: string[] = [];
    const events: string[] = [];
    const named: string[] = [];
    let tokens = 0;
    let freshReads = 0;
    let clock = opts.now ?? new Date('2026-12-01T10:00:00Z');
    const metrics = createMetrics(new Registry());
    let cache = (): Workload | undefined => opts.cached;
    const deps: ReconcilerDeps = {
      workload: () => cache(),
      lookup: (kind, _ns, name) => opts.versions?.[`${kind}/${name}`],
      cachesSynced: () => opts.synced ?? true,
      cacheProgress: () => opts.progress ?? '1000',
      readFresh: async () => {
        freshReads++;
        return opts.fresh ?? { version: undefined, revision: '1000' };
      },
      minRestartIntervalMs: opts.minRestartIntervalMs ?? 0,
      now: () => clock,
      patchWorkload: async (kind, _ns, _name, ops) => {
        if (opts.patchError) throw opts.patchError;
        patches.push(ops);
        patchedKinds.push(kind);
        return { metadata: { ...opts.cached!.metadata, resourceVersion: '101' } };
      },
      events: {
        record: async (subject, spec) => void events.push(`${subject.kind} ${subject.namespace}/${subject.name}@${subject.resourceVersion} ${spec.type} ${spec.reason}: ${spec.message}`),
        ...(opts.recordOnce === undefined
          ? {}
          : {
              recordOnce: async (subject, spec, { name, at }) => {
                named.push(`${name} at ${at.toISOString()}`);
                if (opts.recordOnce) events.push(`${subject.kind} ${subject.namespace}/${subject.name}@${subject.resourceVersion} ${spec.type} ${spec.reason}: ${spec.message}`);
                return opts.recordOnce ? ('created' as const) : ('failed' as const);
              },
            }),
      },
      restartLimiter: { take: async () => void tokens++ },
      statefulSetOnly: [HEALTH_GATED_ROLLOUTS, PRIMARY_HANDOVER],
      logger: pino({ level: 'silent' }),
      metrics,
      ...(opts.data ? { data: opts.data } : {}),
      ...(opts.timing !== undefined ? { timing: opts.timing } : {}),
    };
    const reconciler = new RestarterReconciler(deps);
    return {
      /** The reconciler; a reconcile that wrote says how long it waited for its turn of the pace (pacedMs, held apart here), and one that took no turn says nothing of it. */
      reconciler: {
        reconcile: async (key: string, on: AbortSignal) => {
          const before = tokens;
          const { pacedMs, ...result } = await reconciler.reconcile(key, on);
          if (tokens === before) expect(pacedMs).toBeUndefined();
          if (result.patched !== undefined && tokens > before) expect(pacedMs).toBeGreaterThanOrEqual(0);
          return result;
        },
        forgetWorkload: (key: string) => reconciler.forgetWorkload(key),
        memory: () => reconciler.memory(),
      },
      patches,
      patchedKinds,
      events,
      named,
      tokens: () => tokens,
      freshReads: () => freshReads,
      metrics,
      advance: (ms: number) => {
        clock = new Date(clock.getTime() + ms);
      },
      /** what the cache holds from now on */
      cache: (from: () => Workload | undefined) => {
        cache = from;
      },
    };
  }
  const signal = new AbortController().signal;
  const versions = { 'ConfigMap/app': { uid: 'u1', resourceVersion: '845', ignored: false }, 'Secret/creds': { uid: 'u2', resourceVersion: '3', ignored: false } };

  it.each(['Deployment', 'DaemonSet', 'Rollout'] as const)('%s: patches its own kind, and names the kind in its Event and metrics', async (kind) => {
    const h = harness({ cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }), versions });
    await expect(h.reconciler.reconcile(`${kind}/ns/web`, signal)).resolves.toEqual({ patched: 'ConfigChanged' });
    expect(h.patchedKinds).toEqual([kind]);
    expect(h.events).toEqual([`${kind} ns/web@101 Normal ConfigChanged: ConfigMap app changed (resourceVersion 812 → 845)`]);
    expect((await h.metrics.patches.get()).values).toEqual([expect.objectContaining({ labels: { reason: 'ConfigChanged', kind }, value: 1 })]);
    expect((await h.metrics.restarts.get()).values).toEqual([expect.objectContaining({ labels: { kind: 'ConfigMap', workload_kind: kind }, value: 1 })]);
  });

  it('a Rollout with spec.workloadRef: one TemplateInWorkloadRef Warning naming the Deployment, no write, told again only for another reference', async () => {
    const byRef = (name: string): ArgoRollout => ({
      apiVersion: 'argoproj.io/v1alpha1',
      kind: 'Rollout',
      metadata: { namespace: 'ns', name: 'web', uid: 'ro-uid', resourceVersion: '100', labels: { [ENABLED_LABEL]: 'true' } },
      spec: { replicas: 2, workloadRef: { apiVersion: 'apps/v1', kind: 'Deployment', name } },
    });
    let cached = byRef('web-base');
    const h = harness({ cached: undefined, versions });
    h.cache(() => cached);
    await expect(h.reconciler.reconcile('Rollout/ns/web', signal)).resolves.toEqual({});
    await h.reconciler.reconcile('Rollout/ns/web', signal);
    expect(h.patches).toEqual([]);
    expect(h.events).toEqual([expect.stringContaining('Rollout ns/web@100 Warning TemplateInWorkloadRef: no spec.template: its pods run the template of Deployment web-base (spec.workloadRef)')]);
    expect(h.reconciler.memory().told_unsupported).toBe(1);
    cached = byRef('web-other');
    await h.reconciler.reconcile('Rollout/ns/web', signal);
    expect(h.events).toHaveLength(2);
    expect(h.events[1]).toContain('Label Deployment web-other rollguard.io/enabled=true instead');
  });

  it('warns once that a health-gated Deployment is not stepped, also across its rollouts, and still keeps its annotations', async () => {
    const gated = (generation: number): V1StatefulSet => {
      const s = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' });
      s.metadata = { ...s.metadata, generation, annotations: { 'rollguard.io/rollout': 'health-gated' } };
      return s;
    };
    const h = harness({ cached: gated(1), versions });
    await h.reconciler.reconcile('Deployment/ns/web', signal);
    await h.reconciler.reconcile('Deployment/ns/web', signal);
    expect(h.events).toEqual([
      'Deployment ns/web@100 Warning UnsupportedForKind: health-gated rollouts (rollguard.io/rollout): StatefulSets only; ignored on a Deployment, which paces its rollouts with spec.strategy.rollingUpdate (maxUnavailable, maxSurge) and spec.minReadySeconds',
    ]);
    expect(h.patches).toEqual([]);
    const next = harness({ cached: gated(1), versions });
    await next.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(next.events, 'a StatefulSet may ask for it').toEqual([]);
  });

  it('a required object deleted: no patch, one ReferenceMissing Warning across reconciles; its return is told once', async () => {
    const known: Record<string, ObjectVersion> = { 'Secret/creds': versions['Secret/creds'] };
    const h = harness({ cached: set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }), versions: known, progress: '1000' });
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(h.patches).toEqual([]);
    expect(h.events).toEqual([
      'StatefulSet ns/web@100 Warning ReferenceMissing: ConfigMap app is gone (template keeps u1/845); its pods cannot start without it (the reference is not optional), so the set was not restarted',
    ]);
    expect((await h.metrics.restarterWarnings.get()).values).toEqual([expect.objectContaining({ labels: { reason: 'reference_missing' }, value: 1 })]);
    expect(h.reconciler.memory().told_missing).toBe(1);
    // re-created (no data check here: the bump rolls, and the return is told)
    known['ConfigMap/app'] = { uid: 'u3', resourceVersion: '900', ignored: false };
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(h.events.slice(1)).toEqual([
      'StatefulSet ns/web@100 Normal ReferenceRestored: Back: ConfigMap app; nothing was restarted for it',
      'StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app was recreated (uid u1 → u3, resourceVersion 845 → 900)',
    ]);
    expect(h.reconciler.memory().told_missing).toBe(0);
  });

  it('a required object deleted while the cache lags behind the stored version: a fresh read that finds it gone keeps the version, Warning ReferenceMissing, not ForeignVersion', async () => {
    const h = harness({ cached: set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }), versions: { 'Secret/creds': versions['Secret/creds'] }, progress: '800', fresh: { version: undefined, revision: '950' } });
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ requeueAfterMs: 250 });
    h.advance(6_000);
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(h.freshReads()).toBe(1);
    expect(h.patches).toEqual([]);
    expect(h.events).toEqual([expect.stringContaining('Warning ReferenceMissing: ConfigMap app is gone (template keeps u1/845)')]);
  });

  it('keeps nothing about a workload once it is gone: forgetWorkload drops what it was told', async () => {
    const cached = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' });
    cached.metadata = { ...cached.metadata, annotations: { 'rollguard.io/rollout': 'health-gated' } };
    const h = harness({ cached, versions });
    await h.reconciler.reconcile('Deployment/ns/web', signal);
    expect(h.reconciler.memory()).toEqual({ lag_since: 0, held_since: 0, in_doubt: 0, deferred: 0, told_unsupported: 1, told_missing: 0, told_due: 0, last_writes: 0, told_invalid: 0 });
    h.reconciler.forgetWorkload('Deployment/ns/web');
    expect(h.reconciler.memory()).toEqual({ lag_since: 0, held_since: 0, in_doubt: 0, deferred: 0, told_unsupported: 0, told_missing: 0, told_due: 0, last_writes: 0, told_invalid: 0 });
    // one of that name made again is told again
    await h.reconciler.reconcile('Deployment/ns/web', signal);
    expect(h.events.filter((e) => e.includes('UnsupportedForKind'))).toHaveLength(2);
  });

  it('warns again when the request changes, not when the generation does', async () => {
    const cached = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' });
    const h = harness({ cached, versions });
    cached.metadata = { ...cached.metadata, generation: 1, annotations: { 'rollguard.io/primary-selector': 'role=primary' } };
    await h.reconciler.reconcile('DaemonSet/ns/web', signal);
    cached.metadata.generation = 2;
    await h.reconciler.reconcile('DaemonSet/ns/web', signal);
    cached.metadata.annotations = { 'rollguard.io/primary-selector': 'role=leader' };
    await h.reconciler.reconcile('DaemonSet/ns/web', signal);
    await h.reconciler.reconcile('DaemonSet/ns/web', signal);
    expect(h.events.map((e) => e.split(':')[0])).toEqual(['DaemonSet ns/web@100 Warning UnsupportedForKind', 'DaemonSet ns/web@100 Warning UnsupportedForKind']);
  });

  it('writes nothing, and takes no turn, when the annotations are what the versions say', async () => {
    const h = harness({ cached: set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }), versions });
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
    expect(h.patches).toEqual([]);
    expect(h.tokens()).toBe(0);
  });

  it('patches a changed version, records an Event naming object, kind and both versions, and counts it', async () => {
    const h = harness({ cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }), versions });
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
    expect(h.patches).toHaveLength(1);
    expect(h.tokens()).toBe(1);
    expect(h.events).toEqual(['StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app changed (resourceVersion 812 → 845)']);
    expect((await h.metrics.restarts.get()).values).toEqual([expect.objectContaining({ labels: { kind: 'ConfigMap', workload_kind: 'StatefulSet' }, value: 1 })]);
    expect((await h.metrics.patches.get()).values).toEqual([expect.objectContaining({ labels: { reason: 'ConfigChanged', kind: 'StatefulSet' }, value: 1 })]);
  });

  it('leaves a set alone that is gone, being deleted or no longer labelled', async () => {
    for (const cached of [undefined, set({}, { labelled: false }), { ...set({}), metadata: { ...set({}).metadata, deletionTimestamp: new Date() } }]) {
      const h = harness({ cached, versions });
      await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
      expect(h.patches).toEqual([]);
    }
  });

  it('waits, without patching, until the caches have synced', async () => {
    const h = harness({ cached: set({}), versions, synced: false });
    const result = await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(result.requeueAfterMs).toBeGreaterThan(0);
    expect(h.patches).toEqual([]);
  });

  it('does not roll a set back to a version older than one a fresher cache already wrote', async () => {
    // Another replica's webhook annotated 900; this cache has only reached 850.
    // desiredAnnotations keeps the newer version, so there is nothing to patch.
    const h = harness({ cached: set({ [CM]: 'u1/900', [SECRET]: 'u2/3' }), versions, progress: '850' });
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(h.patches).toEqual([]);
    // Once the cache has caught up with a later version, it follows it.
    const caughtUp = harness({ cached: set({ [CM]: 'u1/900', [SECRET]: 'u2/3' }), versions: { ...versions, 'ConfigMap/app': { uid: 'u1', resourceVersion: '950', ignored: false } }, progress: '960' });
    await expect(caughtUp.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
  });

  it('turns a refused patch (the set changed meanwhile) into a ConflictError, and other failures into errors naming the set', async () => {
    const conflict = harness({ cached: set({ [CM]: 'u1/1' }), versions, patchError: Object.assign(new Error('test failed'), { code: 422 }) });
    await expect(conflict.reconciler.reconcile('StatefulSet/ns/web', signal)).rejects.toBeInstanceOf(ConflictError);
    expect(conflict.events).toEqual([]);
    const broken = harness({ cached: set({ [CM]: 'u1/1' }), versions, patchError: Object.assign(new Error('forbidden'), { code: 403 }) });
    await expect(broken.reconciler.reconcile('StatefulSet/ns/web', signal)).rejects.toThrow('patching the pod template annotations of StatefulSet ns/web: forbidden');
  });

  it('tells a restart whose write landed but whose answer was lost, once, when the cache shows the set with it', async () => {
    // The connection broke after the API server stored the patch: the write is in doubt.
    const opts: { cached: V1StatefulSet; versions: typeof versions; patchError?: unknown } = {
      cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }),
      versions,
      patchError: new Error('patch failed', { cause: new TypeError('fetch failed') }),
    };
    const h = harness(opts);
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).rejects.toThrow('patching the pod template annotations of StatefulSet ns/web: patch failed');
    expect(h.events).toEqual([]);
    // The cache has not seen it yet: the retry's test of the old resourceVersion is refused.
    opts.patchError = Object.assign(new Error('test failed'), { code: 422 });
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).rejects.toBeInstanceOf(ConflictError);
    expect(h.events).toEqual([]);
    // It had landed: told now, with nothing written again; and only once.
    opts.cached = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }, { rv: '101' });
    opts.patchError = undefined;
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(h.patches).toEqual([]);
    expect(h.events).toEqual(['StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app changed (resourceVersion 812 → 845)']);
    expect((await h.metrics.restarts.get()).values).toEqual([expect.objectContaining({ labels: { kind: 'ConfigMap', workload_kind: 'StatefulSet' }, value: 1 })]);
  });

  it('forgets a write in doubt that did not land: the write made instead tells its own restart, once', async () => {
    const opts: { cached: V1StatefulSet; versions: typeof versions; patchError?: unknown } = {
      cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }),
      versions,
      patchError: new Error('patch failed', { cause: Object.assign(new Error('gateway timeout'), { code: 504 }) }),
    };
    const h = harness(opts);
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).rejects.toThrow('patch failed');
    opts.patchError = undefined;
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
    opts.cached = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }, { rv: '101' });
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(h.patches).toHaveLength(1);
    expect(h.events).toEqual(['StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app changed (resourceVersion 812 → 845)']);
  });

  it('tells nothing for a refused write (its outcome is known) when another writer put the same values', async () => {
    const opts: { cached: V1StatefulSet; versions: typeof versions; patchError?: unknown } = {
      cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }),
      versions,
      patchError: Object.assign(new Error('forbidden'), { code: 403 }),
    };
    const h = harness(opts);
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).rejects.toThrow('forbidden');
    opts.cached = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }, { rv: '101' });
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    expect(h.events).toEqual([]);
  });

  it('patches at most once per restart floor: a change within it is deferred with one Event, then the newest wins', async () => {
    const lastRestart = '2026-12-01T09:59:30.000Z';
    const cached = set({ [CM]: 'u1/812', [SECRET]: 'u2/3' });
    cached.metadata!.annotations = { [LAST_RESTART_ANNOTATION]: lastRestart };
    const h = harness({ cached, versions, minRestartIntervalMs: 60_000 });
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ requeueAfterMs: 30_000 });
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ requeueAfterMs: 30_000 });
    expect(h.patches).toEqual([]);
    expect(h.events).toEqual([
      'StatefulSet ns/web@100 Normal RestartsDeferred: Restart deferred until 2026-12-01T10:00:30.000Z (at most one per 60 s): ConfigMap app changed (resourceVersion 812 → 845)',
    ]);
    expect((await h.metrics.restartsDeferred.get()).values[0]!.value).toBe(1);
    h.advance(30_000);
    await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
    // the floor moves with the patch: its time is written in the same patch
    expect(h.patches[0]).toContainEqual({ op: 'replace', path: '/metadata/annotations/rollguard.io~1last-restart-at', value: '2026-12-01T10:00:30.000Z' });
  });

  it('turns the restart reason the webhook left into one Event, after removing it in a write that carries the Event as due', async () => {
    const cached = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' });
    cached.metadata!.annotations = { 'rollguard.io/restart-reason': 'ConfigMap app changed (resourceVersion 812 → 845)' };
    const h = harness({ cached, versions });
    await h.reconciler.reconcile('StatefulSet/ns/web', signal);
    const message = "ConfigMap app changed (resourceVersion 812 → 845) (applied at admission, with the owner's change to the template)";
    expect(h.patches).toEqual([
      [
        { op: 'test', path: '/metadata/resourceVersion', value: '100' },
        { op: 'remove', path: '/metadata/annotations/rollguard.io~1restart-reason' },
        { op: 'add', path: DUE_PATH, value: formatEventDue({ uid: 'set-uid', at: '2026-12-01T10:00:00.000Z', type: 'Normal', reason: 'ConfigChanged', message }) },
      ],
    ]);
    expect(h.events).toEqual([
      "StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app changed (resourceVersion 812 → 845) (applied at admission, with the owner's change to the template)",
    ]);
    expect((await h.metrics.restarts.get()).values).toEqual([expect.objectContaining({ labels: { kind: 'ConfigMap', workload_kind: 'StatefulSet' }, value: 1 })]);
  });

  describe('the Event a write is due (rollguard.io/event-due)', () => {
    const due: EventDue = { uid: 'set-uid', at: '2026-12-01T09:59:00.000Z', type: 'Normal', reason: 'ConfigChanged', message: 'ConfigMap app changed (resourceVersion 812 → 845)' };
    const marked = (mark: EventDue, kind: 'StatefulSet' | 'Deployment' = 'StatefulSet'): V1StatefulSet => {
      const s = set({ [CM]: 'u1/845', [SECRET]: 'u2/3' });
      s.metadata!.annotations = { [LAST_RESTART_ANNOTATION]: mark.at, [EVENT_DUE_ANNOTATION]: formatEventDue(mark) };
      s.kind = kind;
      return s;
    };

    it('a template write carries its Event as due, tells it under the name made of the mark, and the next reconcile removes the mark of a StatefulSet without telling it again', async () => {
      const opts = { cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }), versions, recordOnce: true };
      const h = harness(opts);
      await h.reconciler.reconcile('StatefulSet/ns/web', signal);
      const written = h.patches[0]!.find((op) => op.path === '/metadata/annotations') as { value: Record<string, string> };
      const mark: EventDue = { uid: 'set-uid', at: '2026-12-01T10:00:00.000Z', type: 'Normal', reason: 'ConfigChanged', message: 'ConfigMap app changed (resourceVersion 812 → 845)' };
      expect(written.value[EVENT_DUE_ANNOTATION]).toBe(formatEventDue(mark));
      expect(h.named).toEqual([`${dueEventName('web', mark)} at 2026-12-01T10:00:00.000Z`]);
      expect(h.reconciler.memory().told_due).toBe(1);
      // the set as the write left it, seen by its watch event
      opts.cached = marked(mark);
      await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
      expect(h.patches[1]).toEqual([
        { op: 'test', path: '/metadata/resourceVersion', value: '100' },
        { op: 'remove', path: DUE_PATH },
      ]);
      expect(h.named).toHaveLength(1);
      expect(h.events).toHaveLength(1);
    });

    it('a StatefulSet whose process died before its Event: told once, under the mark\'s name at the time of the write, then the mark removed', async () => {
      const h = harness({ cached: marked(due), versions, recordOnce: true });
      await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
      expect(h.named).toEqual([`${dueEventName('web', due)} at ${due.at}`]);
      expect(h.events).toEqual([`StatefulSet ns/web@100 Normal ConfigChanged: ${due.message}`]);
      expect(h.patches).toEqual([[{ op: 'test', path: '/metadata/resourceVersion', value: '100' }, { op: 'remove', path: DUE_PATH }]]);
    });

    it('a Deployment: told once, and the mark stays (its removal would be a generation) until the next template write replaces it', async () => {
      const h = harness({ cached: marked(due, 'Deployment'), versions, recordOnce: true });
      await expect(h.reconciler.reconcile('Deployment/ns/web', signal)).resolves.toEqual({});
      await expect(h.reconciler.reconcile('Deployment/ns/web', signal)).resolves.toEqual({});
      expect(h.named).toHaveLength(1);
      expect(h.patches).toEqual([]);
      h.reconciler.forgetWorkload('Deployment/ns/web');
      expect(h.reconciler.memory().told_due).toBe(0);
    });

    it('an Event that cannot be written: the mark stays and is tried again, and nothing else waits for it', async () => {
      const h = harness({ cached: marked(due), versions, recordOnce: false });
      await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ requeueAfterMs: 10_000 });
      expect(h.patches).toEqual([]);
      const changed = harness({ cached: { ...marked(due), spec: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }).spec! }, versions, recordOnce: false });
      await expect(changed.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged', requeueAfterMs: 10_000 });
    });

    it('another set\'s mark (a copy made without the webhook) or one older than the Event TTL is not told; a StatefulSet\'s is removed', async () => {
      for (const mark of [{ ...due, uid: 'other-uid' }, { ...due, at: new Date(Date.parse('2026-12-01T10:00:00Z') - EVENT_DUE_MAX_AGE_MS - 1).toISOString() }]) {
        const h = harness({ cached: marked(mark), versions, recordOnce: true });
        await h.reconciler.reconcile('StatefulSet/ns/web', signal);
        expect(h.named).toEqual([]);
        expect(h.patches).toEqual([[{ op: 'test', path: '/metadata/resourceVersion', value: '100' }, { op: 'remove', path: DUE_PATH }]]);
      }
    });
  });

  it('waits for a lagging cache with no time limit, with one Warning, and corrects a stored version from the future only on a fresh read', async () => {
    // 900 stored, the cache at 850 holds 845: a lagging cache; the fresh read says the object is at 905, the store at 950
    const lagging = harness({ cached: set({ [CM]: 'u0/900', [SECRET]: 'u2/3' }), versions, progress: '850', fresh: { version: { uid: 'u0', resourceVersion: '905', ignored: false }, revision: '950' } });
    for (let i = 0; i < 4; i++) {
      expect((await lagging.reconciler.reconcile('StatefulSet/ns/web', signal)).requeueAfterMs).toBeGreaterThan(0);
      lagging.advance(10 * 60_000);
    }
    expect(lagging.patches).toEqual([]);
    expect(lagging.freshReads()).toBe(3);
    expect(lagging.events).toEqual([expect.stringMatching(/^StatefulSet ns\/web@\S+ Warning VersionHeldBack: ConfigMap app: the template names u0\/900, .*it shows u1\/845/)]);
    expect((await lagging.metrics.restarterWarnings.get()).values).toEqual([expect.objectContaining({ labels: { reason: 'cache_lag' }, value: 1 })]);
    // the same, but the store is at 860 < 900: etcd came back from a backup
    const restored = harness({ cached: set({ [CM]: 'u0/900', [SECRET]: 'u2/3' }), versions, progress: '850', fresh: { version: versions['ConfigMap/app'], revision: '860' } });
    await restored.reconciler.reconcile('StatefulSet/ns/web', signal);
    restored.advance(6_000);
    await expect(restored.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
  });

  it('brings a template value of another object (a copy from another namespace) to the object\'s own version, with a Warning, instead of waiting forever', async () => {
    // the copy names u9/900; this namespace's app is u1/845, and the fresh read agrees: it never had 900
    const copy = harness({ cached: set({ [CM]: 'u9/900', [SECRET]: 'u2/3' }), versions, progress: '1000', fresh: { version: versions['ConfigMap/app'], revision: '1000' } });
    expect((await copy.reconciler.reconcile('StatefulSet/ns/web', signal)).requeueAfterMs).toBeGreaterThan(0);
    copy.advance(6_000);
    await expect(copy.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
    expect(copy.patches[0]).toContainEqual({ op: 'replace', path: `/spec/template/metadata/annotations/${CM.replace('/', '~1')}`, value: 'u1/845' });
    expect(copy.events[0]).toMatch(/Warning ForeignVersion: ConfigMap app: the template names u9\/900, a version this object never had .* now u1\/845/);
    expect((await copy.metrics.restarterWarnings.get()).values).toEqual([expect.objectContaining({ labels: { reason: 'foreign_version' }, value: 1 })]);
  });

  it('tells a write the API server refused as invalid (a 422 naming a field) with a Warning, and does not retry it; a 422 of a failed test is a conflict', async () => {
    const status = (causes: unknown[]): unknown => Object.assign(new Error('HTTP 422'), { code: 422, body: JSON.stringify({ kind: 'Status', code: 422, reason: 'Invalid', details: { causes } }) });
    const invalid = harness({ cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }), versions, patchError: status([{ reason: 'FieldValueTooLong', field: 'metadata.annotations', message: 'Too long: may not be more than 262144 bytes' }]) });
    await expect(invalid.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
    expect(invalid.events).toEqual([expect.stringMatching(/Warning WriteInvalid: The API server refused the write of the pod template annotations as invalid: metadata\.annotations: Too long/)]);
    expect((await invalid.metrics.restarterWarnings.get()).values).toEqual([expect.objectContaining({ labels: { reason: 'invalid' }, value: 1 })]);
    // a second wake of the same set (a change of its ConfigMap) writes nothing and tells nothing again
    await expect(invalid.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
    expect(invalid.events).toHaveLength(1);
    expect(invalid.reconciler.memory().told_invalid).toBe(1);
    invalid.reconciler.forgetWorkload('StatefulSet/ns/web');
    expect(invalid.reconciler.memory().told_invalid).toBe(0);
    const testFailed = harness({ cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }), versions, patchError: status([{ message: 'testing value /metadata/resourceVersion failed: test failed' }]) });
    await expect(testFailed.reconciler.reconcile('StatefulSet/ns/web', signal)).rejects.toBeInstanceOf(ConflictError);
  });

  it('decides an absent annotation against an older cached version on one fresh read, at once', async () => {
    const cached = set({ [CM]: 'absent', [SECRET]: 'u2/3' });
    // the set was last written at 900; the cache holds version 845 of app: created since, or deleted and remembered?
    cached.metadata!.resourceVersion = '900';
    const exists = harness({ cached, versions, fresh: { version: versions['ConfigMap/app'], revision: '950' } });
    await expect(exists.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
    expect(exists.freshReads()).toBe(1);
    const gone = harness({ cached, versions, fresh: { version: undefined, revision: '950' } });
    await expect(gone.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
    expect(gone.patches).toEqual([]);
  });

  describe('the rollguard.io/timing record', () => {
    const TIMING = 'debounce=5s min-restart-interval=1m max-restarts-per-second=5 rollout-min-step-interval=10s rollout-min-ready=10s';
    const TIMING_PATH = '/metadata/annotations/rollguard.io~1timing';
    const annotated = (annotations: Record<string, string>, template = { [CM]: 'u1/812', [SECRET]: 'u2/3' }): V1StatefulSet => {
      const s = set(template);
      s.metadata!.annotations = annotations;
      return s;
    };

    it.each(['StatefulSet', 'Deployment', 'DaemonSet'] as const)('%s: rides along with a restart, in the same patch', async (kind) => {
      const h = harness({ cached: annotated({ [LAST_RESTART_ANNOTATION]: '2026-12-01T09:00:00.000Z' }), versions, timing: TIMING });
      await expect(h.reconciler.reconcile(`${kind}/ns/web`, signal)).resolves.toEqual({ patched: 'ConfigChanged' });
      expect(h.patches).toHaveLength(1);
      expect(h.patches[0]).toContainEqual({ op: 'add', path: TIMING_PATH, value: TIMING });
    });

    it('is never a reason to write: an up-to-date set without it, or with an older one, gets no patch', async () => {
      for (const cached of [annotated({ other: 'x' }, { [CM]: 'u1/845', [SECRET]: 'u2/3' }), annotated({ 'rollguard.io/timing': 'debounce=1s' }, { [CM]: 'u1/845', [SECRET]: 'u2/3' })]) {
        for (const kind of ['StatefulSet', 'Deployment'] as const) {
          const h = harness({ cached, versions, timing: TIMING });
          await expect(h.reconciler.reconcile(`${kind}/ns/web`, signal)).resolves.toEqual({});
          expect(h.patches, kind).toEqual([]);
        }
      }
    });

    it('rides along with the removal of the restart reason, and is left out when it is what the set has', async () => {
      const h = harness({ cached: annotated({ 'rollguard.io/restart-reason': 'ConfigMap app changed (resourceVersion 812 → 845)', 'rollguard.io/timing': 'debounce=1s' }, { [CM]: 'u1/845', [SECRET]: 'u2/3' }), versions, timing: TIMING });
      await h.reconciler.reconcile('Deployment/ns/web', signal);
      expect(h.patches).toEqual([
        [
          { op: 'test', path: '/metadata/resourceVersion', value: '100' },
          { op: 'remove', path: '/metadata/annotations/rollguard.io~1restart-reason' },
          { op: 'add', path: DUE_PATH, value: expect.stringContaining('"reason":"ConfigChanged"') },
          { op: 'replace', path: TIMING_PATH, value: TIMING },
        ],
      ]);
      const same = harness({ cached: annotated({ 'rollguard.io/timing': TIMING }), versions, timing: TIMING });
      await same.reconciler.reconcile('StatefulSet/ns/web', signal);
      expect(same.patches[0]!.filter((op) => op.path === TIMING_PATH)).toEqual([]);
    });

    it('a set with no annotation map gets it in one add, with the restart time beside it', async () => {
      const h = harness({ cached: set({ [CM]: 'u1/812', [SECRET]: 'u2/3' }), versions, timing: TIMING });
      await h.reconciler.reconcile('StatefulSet/ns/web', signal);
      expect(h.patches[0]!.filter((op) => op.path.startsWith('/metadata/annotations'))).toEqual([
        {
          op: 'add',
          path: '/metadata/annotations',
          value: {
            [LAST_RESTART_ANNOTATION]: '2026-12-01T10:00:00.000Z',
            [EVENT_DUE_ANNOTATION]: formatEventDue({ uid: 'set-uid', at: '2026-12-01T10:00:00.000Z', type: 'Normal', reason: 'ConfigChanged', message: 'ConfigMap app changed (resourceVersion 812 → 845)' }),
            'rollguard.io/timing': TIMING,
          },
        },
      ]);
    });
  });

  describe('the data check', () => {
    const records = (cm: string): Record<string, string> => ({
      'rollguard.io/digests': JSON.stringify({ [CM]: { v: cm, k: 'k1', d: { a: 'aa' } }, [SECRET]: { v: 'u2/3', k: 'k1', d: { p: 'pp' } } }),
    });
    const withRecords = (cm: string): V1StatefulSet => {
      const s = set({ [CM]: 'u1/812', [SECRET]: 'u2/3' });
      s.metadata!.annotations = records(cm);
      return s;
    };
    const dataOf = (digests: Record<string, string>, reads: string[]): ReconcilerDeps['data'] => ({
      read: async (kind, _ns, name, seen) => {
        reads.push(`${kind}/${name}@${seen}`);
        return { version: 'u1/845', digests: new Map([['k1', digests]]) };
      },
      currentKeyId: async () => 'k1',
    });

    it('a metadata-only change: no template patch, no restart time, no Event; the newer version recorded as equivalent', async () => {
      const reads: string[] = [];
      const h = harness({ cached: withRecords('u1/812'), versions, data: dataOf({ a: 'aa' }, reads) });
      await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
      expect(reads).toEqual(['ConfigMap/app@u1/845']);
      expect(h.events).toEqual([]);
      expect(h.patches).toEqual([
        [
          { op: 'test', path: '/metadata/resourceVersion', value: '100' },
          { op: 'replace', path: '/metadata/annotations/rollguard.io~1digests', value: records('u1/845')['rollguard.io/digests'] },
        ],
      ]);
    });

    it('a Deployment: no write of its own annotations alone, which would be a new generation; the change is still not rolled', async () => {
      const reads: string[] = [];
      const h = harness({ cached: withRecords('u1/812'), versions, data: dataOf({ a: 'aa' }, reads) });
      await expect(h.reconciler.reconcile('Deployment/ns/web', signal)).resolves.toEqual({});
      expect(reads).toEqual(['ConfigMap/app@u1/845']);
      expect(h.patches).toEqual([]);
      expect(h.events).toEqual([]);
      // no record at all (annotated by the webhook at creation): nothing read or written until a change
      const fresh = harness({ cached: set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }), versions, data: dataOf({ a: 'aa' }, reads) });
      await expect(fresh.reconciler.reconcile('Deployment/ns/web', signal)).resolves.toEqual({});
      expect(fresh.patches).toEqual([]);
      const statefulSet = harness({ cached: set({ [CM]: 'u1/845', [SECRET]: 'u2/3' }), versions, data: dataOf({ a: 'aa' }, reads) });
      await statefulSet.reconciler.reconcile('StatefulSet/ns/web', signal);
      expect(statefulSet.patches.map((ops) => ops.map((op) => op.path)), 'a StatefulSet gets its baseline records at once').toEqual([
        ['/metadata/resourceVersion', '/metadata/annotations'],
      ]);
    });

    it('the timing record rides along with a digest record written alone (a StatefulSet), and alone it is no write', async () => {
      const timing = 'debounce=5s';
      const h = harness({ cached: withRecords('u1/812'), versions, data: dataOf({ a: 'aa' }, []), timing });
      await h.reconciler.reconcile('StatefulSet/ns/web', signal);
      expect(h.patches).toEqual([
        [
          { op: 'test', path: '/metadata/resourceVersion', value: '100' },
          { op: 'replace', path: '/metadata/annotations/rollguard.io~1digests', value: records('u1/845')['rollguard.io/digests'] },
          { op: 'add', path: '/metadata/annotations/rollguard.io~1timing', value: timing },
        ],
      ]);
      const recorded = harness({ cached: withRecords('u1/845'), versions, data: dataOf({ a: 'aa' }, []), timing });
      await recorded.reconciler.reconcile('StatefulSet/ns/web', signal);
      expect(recorded.patches).toEqual([]);
    });

    it('a template that reads key a of the ConfigMap: a change to b alone writes the record (r: a), no template patch, no Event; a change to a and b names a', async () => {
      const readingA = (cm: string): V1StatefulSet => {
        const s = withRecords(cm);
        s.spec!.template.spec!.containers[0]!.envFrom = [{ secretRef: { name: 'creds' } }];
        s.spec!.template.spec!.containers[0]!.env = [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'app', key: 'a' } } }];
        return s;
      };
      const unread = harness({ cached: readingA('u1/812'), versions, data: dataOf({ a: 'aa', b: 'bb' }, []) });
      await expect(unread.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
      expect(unread.events).toEqual([]);
      expect(unread.patches).toHaveLength(1);
      expect(unread.patches[0]!.map((op) => op.path)).toEqual(['/metadata/resourceVersion', '/metadata/annotations/rollguard.io~1digests']);
      const written = JSON.parse((unread.patches[0]![1] as { value: string }).value) as Record<string, unknown>;
      expect(written[CM]).toEqual({ v: 'u1/845', k: 'k1', d: { a: 'aa', b: 'bb' }, r: ['a'] });
      // the same set with that record: nothing read, nothing written, the template keeps 812
      const recorded = readingA('u1/845');
      recorded.metadata!.annotations = { 'rollguard.io/digests': JSON.stringify({ ...written, [SECRET]: { v: 'u2/3', k: 'k1', d: { p: 'pp' } } }) };
      const reads: string[] = [];
      const after = harness({ cached: recorded, versions, data: dataOf({ a: 'aa', b: 'bb' }, reads) });
      await expect(after.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
      expect(reads).toEqual([]);
      expect(after.patches).toEqual([]);

      const read = harness({ cached: readingA('u1/812'), versions, data: dataOf({ a: 'xx', b: 'bb' }, []) });
      await expect(read.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
      expect(read.events).toEqual(['StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app: data changed (key a), resourceVersion 812 → 845']);
    });

    it('once recorded, nothing is read again and nothing written', async () => {
      const reads: string[] = [];
      const h = harness({ cached: withRecords('u1/845'), versions, data: dataOf({ a: 'aa' }, reads) });
      await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({});
      expect(reads).toEqual([]);
      expect(h.patches).toEqual([]);
    });

    it('a data change rolls, and the Event names the keys', async () => {
      const reads: string[] = [];
      const h = harness({ cached: withRecords('u1/812'), versions, data: dataOf({ a: 'xx' }, reads) });
      await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
      expect(h.events).toEqual(['StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app: data changed (key a), resourceVersion 812 → 845']);
      expect(h.patches[0]!.map((op) => op.path)).toContain('/metadata/annotations/rollguard.io~1last-restart-at');
    });
  
    it('a failing read or key never stalls restarts: the bump rolls as before the data check, and rollguard_data_check_failures_total counts it by reason', async () => {
      const failing: [ReconcilerDeps['data'], 'read' | 'key'][] = [
        [{ read: async () => Promise.reject(new Error('HTTP 403')), currentKeyId: async () => 'k1' }, 'read'],
        [{ read: async () => Promise.reject(new Error('unused')), currentKeyId: async () => Promise.reject(new Error('HTTP 403')) }, 'key'],
      ];
      for (const [data, reason] of failing) {
        const h = harness({ cached: withRecords('u1/812'), versions, data });
        await expect(h.reconciler.reconcile('StatefulSet/ns/web', signal)).resolves.toEqual({ patched: 'ConfigChanged' });
        expect(h.events).toEqual(['StatefulSet ns/web@101 Normal ConfigChanged: ConfigMap app changed (resourceVersion 812 → 845)']);
        const counted = (await h.metrics.dataCheckFailures.get()).values.map((v) => [v.labels.reason, v.value]);
        // each failed attempt counts: this reconcile makes two (a GET each of the ConfigMap and the Secret, or two key look-ups)
        expect(counted.sort()).toEqual([['key', reason === 'key' ? 2 : 0], ['read', reason === 'read' ? 2 : 0]]);
      }
    });
  });
});

