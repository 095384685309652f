import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { explainWorkload } from '../../src/explain/explain.js';
import { WORKLOAD_STATES } from '../../src/explain/explanation.js';
import { renderExplanation } from '../../src/explain/render.js';
import type { EventFact, ObjectFact, RevisionFact, WorkloadFacts } from '../../src/explain/facts.js';
import type { Workload, WorkloadKind } from '../../src/kube/workloads.js';
import { propertyRuns } from '../env/property-runs.js';

const NOW = new Date('2026-06-01T12:00:00Z');
const at = (offsetSeconds: number): Date => new Date(NOW.getTime() + offsetSeconds * 1000);
const CM_UID = 'cm-uid';
const TIMING = 'debounce=5s min-restart-interval=1m max-restarts-per-second=5 rollout-min-step-interval=10s rollout-min-ready=0s';

interface SetOptions {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  template?: Record<string, string>;
  status?: V1StatefulSet['status'];
  replicas?: number;
  env?: boolean;
}

/** StatefulSet `web` reading ConfigMap `app` as a volume, its template at rv 100 unless told. */
function set(o: SetOptions = {}): V1StatefulSet {
  return {
    metadata: {
      name: 'web',
      namespace: 'shop',
      uid: 'set-uid',
      resourceVersion: '500',
      generation: 1,
      labels: o.labels ?? { 'rollguard.io/enabled': 'true' },
      annotations: { 'rollguard.io/timing': TIMING, ...o.annotations },
    },
    spec: {
      replicas: o.replicas ?? 2,
      serviceName: 'web',
      selector: { matchLabels: { app: 'web' } },
      template: {
        metadata: { labels: { app: 'web' }, annotations: o.template ?? { 'configmap.rollguard.io/app': `${CM_UID}/100` } },
        spec: { containers: [{ name: 'app', image: 'app:1', ...(o.env ? { env: [{ name: 'A', valueFrom: { secretKeyRef: { name: 'creds', key: 'password' } } }] } : {}) }], volumes: [{ name: 'v', configMap: { name: 'app' } }] },
      },
    },
    status: o.status ?? { replicas: 2, observedGeneration: 1, currentRevision: 'web-1', updateRevision: 'web-1', updatedReplicas: 2, readyReplicas: 2 },
  };
}

const cm = (rv: string, changedAgo = 600, labels: Record<string, string> = {}): ObjectFact => ({ kind: 'ConfigMap', name: 'app', status: 'found', uid: CM_UID, resourceVersion: rv, labels, changedAt: at(-changedAgo) });

function pod(name: string, revision: string, o: { ready?: boolean; crash?: boolean; createdAgo?: number } = {}): V1Pod {
  const ready = o.ready ?? true;
  return {
    metadata: { name, namespace: 'shop', labels: { app: 'web', 'controller-revision-hash': revision }, creationTimestamp: at(-(o.createdAgo ?? 300)), ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'web', uid: 'set-uid', controller: true }] },
    status: {
      phase: 'Running',
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: at(-200) }],
      containerStatuses: [{ name: 'app', ready, image: 'app:1', imageID: '', restartCount: o.crash ? 5 : 0, ...(o.crash ? { state: { waiting: { reason: 'CrashLoopBackOff' } } } : {}) }],
    },
  };
}

function revision(name: string, n: number, annotations: Record<string, string>, createdAgo: number, image = 'app:1'): RevisionFact {
  return {
    name,
    revision: n,
    createdAt: at(-createdAgo),
    podLabel: name,
    template: { metadata: { labels: { app: 'web' }, annotations }, spec: { containers: [{ name: 'app', image }], volumes: [{ name: 'v', configMap: { name: 'app' } }] } },
  };
}

function facts(workload: Workload | undefined, o: Partial<WorkloadFacts> = {}, kind: WorkloadKind = 'StatefulSet'): WorkloadFacts {
  return {
    kind,
    namespace: 'shop',
    name: 'web',
    workload,
    objects: [cm('100')],
    events: [],
    pods: [pod('web-0', 'web-1'), pod('web-1', 'web-1')],
    revisions: [revision('web-1', 1, { 'configmap.rollguard.io/app': `${CM_UID}/100` }, 900)],
    problems: [],
    now: NOW,
    ...o,
  };
}

const event = (reason: string, message: string, agoSeconds: number, type = 'Normal'): EventFact => ({ type, reason, message, count: 1, firstAt: at(-agoSeconds), lastAt: at(-agoSeconds), component: 'rollguard' });

describe('explainWorkload: the state of one workload, from what a reader found', () => {
  it('a workload that does not exist', () => {
    const e = explainWorkload(facts(undefined));
    expect(e).toMatchObject({ state: 'not-found', managed: false, summary: 'no StatefulSet web in namespace shop' });
  });

  it.each([
    ['no label', set({ labels: {} }), 'it has no label rollguard.io/enabled: "true"'],
    ['the label not "true"', set({ labels: { 'rollguard.io/enabled': 'false' } }), 'its label rollguard.io/enabled is "false"'],
    ['being deleted', { ...set(), metadata: { ...set().metadata, deletionTimestamp: at(-5) } }, 'it is being deleted (since 2026-06-01T11:59:55.000Z)'],
  ])('unmanaged: %s', (_name, workload, why) => {
    const e = explainWorkload(facts(workload));
    expect(e.state).toBe('unmanaged');
    expect(e.managed).toBe(false);
    expect(e.notManaged).toContain(why);
    expect(e.references).toEqual([]);
  });

  it("unmanaged: a Deployment with Stackable's label, which opts in StatefulSets only", () => {
    const e = explainWorkload(facts(set({ labels: { 'restarter.stackable.tech/enabled': 'true' } }), {}, 'Deployment'));
    expect(e.state).toBe('unmanaged');
    expect(e.notManaged).toContain("Stackable's label restarter.stackable.tech/enabled, which opts in StatefulSets only");
  });

  it("a set with both labels: the dialect whose keys its template carries (which --compat rollguard runs with is not on the object)", () => {
    const both = { 'rollguard.io/enabled': 'true', 'restarter.stackable.tech/enabled': 'true' };
    expect(explainWorkload(facts(set({ labels: both }))).dialect).toBe('rollguard');
    const stackable = explainWorkload(facts(set({ labels: both, template: { 'configmap.restarter.stackable.tech/app': `${CM_UID}/100` } })));
    expect(stackable.dialect).toBe('stackable');
    expect(stackable.state).toBe('up-to-date');
    expect(stackable.notes[0]).toContain('only when rollguard runs with --compat stackable');
  });

  it('unseen: opted in, but no trace of rollguard on it', () => {
    const e = explainWorkload(facts(set({ template: {} }), { revisions: [] }));
    expect(e.state).toBe('unseen');
    expect(e.managed).toBe(true);
    expect(e.notManaged).toContain('the webhook did not see its creation');
    expect(e.references[0]).toMatchObject({ state: 'changed', change: 'tracking ConfigMap app (resourceVersion 100)' });
  });

  it('up to date: the template names the current version; the pods run it', () => {
    const e = explainWorkload(facts(set()));
    expect(e.state).toBe('up-to-date');
    expect(e.references).toEqual([
      { kind: 'ConfigMap', name: 'app', annotation: 'configmap.rollguard.io/app', reads: [{ via: 'volume' }], template: `${CM_UID}/100`, pods: [{ version: `${CM_UID}/100`, pods: 2 }], current: `${CM_UID}/100`, state: 'up-to-date' },
    ]);
    expect(e.next).toEqual([{ cause: 'nothing', text: 'nothing until a referenced object changes' }]);
    expect(e.timing).toEqual({ recorded: true, rules: { debounceMs: 5_000, minRestartIntervalMs: 60_000, maxRestartsPerSecond: 5, rolloutMinStepIntervalMs: 10_000, rolloutMinReadyMs: 0 } });
  });

  it('missing: a required object deleted keeps its version; no restart is due', () => {
    const e = explainWorkload(facts(set(), { objects: [{ kind: 'ConfigMap', name: 'app', status: 'absent' }] }));
    expect(e.references[0]).toMatchObject({ state: 'missing', template: `${CM_UID}/100`, current: 'absent' });
    expect(e.references[0]!.why).toContain('cannot start without it');
    expect(e.next.some((n) => n.cause === 'debounce')).toBe(false);
  });

  it('ignored: the object is labelled rollguard.io/ignore and moved on; nothing is pending', () => {
    const e = explainWorkload(facts(set({ annotations: { 'rollguard.io/frozen': 'ConfigMap/app' } }), { objects: [cm('180', 20, { 'rollguard.io/ignore': 'true' })] }));
    expect(e.state).toBe('ignored');
    expect(e.references[0]).toMatchObject({ state: 'ignored', template: `${CM_UID}/100`, current: `${CM_UID}/180`, why: 'label rollguard.io/ignore=true on the ConfigMap' });
    expect(e.summary).toContain('ConfigMap app opted out: its changes restart nothing');
  });

  it('untracked: opted out by the ignore annotation before rollguard tracked it', () => {
    const e = explainWorkload(facts(set({ template: {}, annotations: { 'rollguard.io/ignore-configmaps': 'app', 'rollguard.io/last-restart-at': at(-3600).toISOString() } })));
    expect(e.state).toBe('ignored');
    expect(e.references[0]).toMatchObject({ state: 'untracked', why: "named in the workload's ConfigMap opt-outs" });
  });

  it('debouncing: a change 2 s ago is looked at 5 s after it', () => {
    const e = explainWorkload(facts(set(), { objects: [cm('180', 2)] }));
    expect(e.state).toBe('debouncing');
    expect(e.references[0]).toMatchObject({ state: 'changed', change: 'ConfigMap app changed (resourceVersion 100 → 180)', changedAt: { at: at(-2).toISOString(), inSeconds: -2 } });
    expect(e.next[0]).toMatchObject({ cause: 'debounce', at: { at: at(3).toISOString(), inSeconds: 3 } });
    expect(e.next[1]).toMatchObject({ cause: 'pace' });
    expect(e.summary).toBe(`ConfigMap app changed (resourceVersion 100 → 180); debounce until ${at(3).toISOString()} (in 3s), then a restart`);
  });

  it("debouncing in a window the workload's own write opened: the change folds into it and is looked at when it closes", () => {
    const inWindow = explainWorkload(facts(set(), { objects: [cm('180', 2)], workloadWrittenAt: at(-4) }));
    expect(inWindow.next[0]).toMatchObject({ cause: 'debounce', at: { inSeconds: 1 } });
    // a write whose window closed before the change opens none for it
    const closed = explainWorkload(facts(set(), { objects: [cm('180', 2)], workloadWrittenAt: at(-30) }));
    expect(closed.next[0]).toMatchObject({ cause: 'debounce', at: { inSeconds: 3 } });
  });

  it('debouncing with the recorded rule, not the default: debounce=30s', () => {
    const e = explainWorkload(facts(set({ annotations: { 'rollguard.io/timing': 'debounce=30s' } }), { objects: [cm('180', 2)] }));
    expect(e.next[0]).toMatchObject({ cause: 'debounce', at: { inSeconds: 28 } });
    expect(e.timing.rules.minRestartIntervalMs).toBe(60_000);
  });

  it('floored: a change 10 s ago within the minute after the last restart waits for the floor', () => {
    const e = explainWorkload(facts(set({ annotations: { 'rollguard.io/last-restart-at': at(-20).toISOString() } }), { objects: [cm('180', 10)], events: [event('RestartsDeferred', 'Restart deferred until …', 5)] }));
    expect(e.state).toBe('floored');
    expect(e.next.map((n) => n.cause)).toEqual(['restart-floor', 'pace']);
    expect(e.next[0]!.at).toEqual({ at: at(40).toISOString(), inSeconds: 40 });
    expect(e.lastRestartAt).toEqual({ at: at(-20).toISOString(), inSeconds: -20 });
  });

  it('debouncing inside the floor: both deadlines, the debounce first', () => {
    const e = explainWorkload(facts(set({ annotations: { 'rollguard.io/last-restart-at': at(-20).toISOString() } }), { objects: [cm('180', 1)] }));
    expect(e.state).toBe('debouncing');
    expect(e.next.map((n) => [n.cause, n.at?.inSeconds])).toEqual([
      ['debounce', 4],
      ['restart-floor', 40],
      ['pace', undefined],
    ]);
  });

  it('waiting: past the debounce and floor, the turn in the pace has no time', () => {
    const e = explainWorkload(facts(set(), { objects: [cm('180', 10)] }));
    expect(e.state).toBe('waiting');
    expect(e.next).toEqual([{ cause: 'pace', text: expect.stringContaining('paced at 5/s across all workloads') }]);
  });

  it('waiting far past the debounce: says what that can mean, for a Deployment the unrecorded metadata-only change too', () => {
    const sts = explainWorkload(facts(set(), { objects: [cm('180', 300)] }));
    expect(sts.next[0]!.text).toContain("rollguard's leader is not running");
    expect(sts.next[0]!.text).not.toContain('a Deployment records');
    const deployment = explainWorkload(facts(set(), { objects: [cm('180', 300)], pods: [], revisions: [] }, 'Deployment'));
    expect(deployment.next.at(-1)!.text).toContain('a Deployment records that only with its next restart');
  });

  it('metadata only: the digest record knows the new version holds the same data', () => {
    const digests = JSON.stringify({ 'configmap.rollguard.io/app': { v: `${CM_UID}/180`, k: 'k1', d: { 'a.txt': '0123456789abcdef' } } });
    const e = explainWorkload(facts(set({ annotations: { 'rollguard.io/digests': digests } }), { objects: [cm('180', 10)] }));
    expect(e.state).toBe('up-to-date');
    expect(e.references[0]).toMatchObject({ state: 'metadata-only', current: `${CM_UID}/180`, template: `${CM_UID}/100` });
  });

  it('only unread keys changed: the record holds the keys read the same; the keys read are shown, and no restart is due', () => {
    const digests = JSON.stringify({ 'configmap.rollguard.io/app': { v: `${CM_UID}/180`, k: 'k1', d: { 'a.txt': '0123456789abcdef', 'b.txt': 'fedcba9876543210' }, r: ['a.txt'] } });
    const workload = set({ annotations: { 'rollguard.io/digests': digests } });
    workload.spec!.template.spec!.volumes = [{ name: 'v', configMap: { name: 'app', items: [{ key: 'a.txt', path: 'a.txt' }] } }];
    const e = explainWorkload(facts(workload, { objects: [cm('180', 10)] }));
    expect(e.state).toBe('up-to-date');
    expect(e.references[0]).toMatchObject({
      state: 'unread-keys',
      keys: ['a.txt'],
      reads: [{ via: 'volume', keys: ['a.txt'] }],
      current: `${CM_UID}/180`,
      template: `${CM_UID}/100`,
      why: `rollguard's digest record: ${CM_UID}/180 holds the data of ${CM_UID}/100 in the key read (a.txt)`,
    });
    const text = renderExplanation(e);
    expect(text).toContain('key a.txt (volume)');
    expect(text).toContain('only in keys not read, no restart');
  });

  it('a reference the template dropped is a restart due', () => {
    const e = explainWorkload(facts(set({ template: { 'configmap.rollguard.io/app': `${CM_UID}/100`, 'secret.rollguard.io/old': 's/7' } }), { objects: [cm('100')] }));
    expect(e.state).toBe('waiting');
    expect(e.references[1]).toMatchObject({ kind: 'Secret', name: 'old', state: 'dropped', change: 'no longer tracking Secret old' });
  });

  it('an object the reader cannot read claims no change, and says why', () => {
    const e = explainWorkload(facts(set(), { objects: [{ kind: 'ConfigMap', name: 'app', status: 'unreadable', error: 'get configmaps app: forbidden to you' }] }));
    expect(e.state).toBe('up-to-date');
    expect(e.references[0]).toMatchObject({ state: 'unreadable', why: 'get configmaps app: forbidden to you' });
    expect(e.notes).toContain('ConfigMap app could not be read (get configmaps app: forbidden to you): its state is the template\'s');
  });

  it('keys read: a key ref names its key', () => {
    const e = explainWorkload(facts(set({ env: true, template: { 'configmap.rollguard.io/app': `${CM_UID}/100`, 'secret.rollguard.io/creds': 'sec/3' } }), { objects: [cm('100'), { kind: 'Secret', name: 'creds', status: 'found', uid: 'sec', resourceVersion: '3', labels: {} }] }));
    expect(e.references.map((r) => [r.kind, r.name, r.keys, r.state])).toEqual([
      ['ConfigMap', 'app', undefined, 'up-to-date'],
      ['Secret', 'creds', ['password'], 'up-to-date'],
    ]);
  });

  it('rolling: the StatefulSet controller replaces pods; the pods run two versions', () => {
    const workload = set({ template: { 'configmap.rollguard.io/app': `${CM_UID}/180` }, status: { replicas: 2, observedGeneration: 1, currentRevision: 'web-1', updateRevision: 'web-2', updatedReplicas: 1 } });
    const e = explainWorkload(
      facts(workload, {
        objects: [cm('180', 30)],
        pods: [pod('web-0', 'web-1'), pod('web-1', 'web-2', { createdAgo: 10 })],
        revisions: [revision('web-1', 1, { 'configmap.rollguard.io/app': `${CM_UID}/100` }, 900), revision('web-2', 2, { 'configmap.rollguard.io/app': `${CM_UID}/180` }, 12)],
      }),
    );
    expect(e.state).toBe('rolling');
    expect(e.summary).toBe('rolling: 1/2 pods on revision web-2');
    expect(e.references[0]!.pods).toEqual([
      { version: `${CM_UID}/100`, pods: 1 },
      { version: `${CM_UID}/180`, pods: 1 },
    ]);
    expect(e.pods.map((p) => [p.revision, p.update, p.pods.map((x) => x.name)])).toEqual([
      ['web-2', true, ['web-1']],
      ['web-1', false, ['web-0']],
    ]);
  });

  it('held: a health-gated rollout blocked by a crash-looping pod, since its RolloutBlocked Event', () => {
    const workload = set({
      annotations: { 'rollguard.io/rollout': 'health-gated' },
      template: { 'configmap.rollguard.io/app': `${CM_UID}/180` },
      status: { replicas: 3, observedGeneration: 1, currentRevision: 'web-1', updateRevision: 'web-2', updatedReplicas: 1 },
      replicas: 3,
    });
    workload.spec!.updateStrategy = { type: 'RollingUpdate', rollingUpdate: { partition: 2 } };
    const message = 'Rollout blocked at partition 2: pod web-2 is not ready (CrashLoopBackOff)';
    const e = explainWorkload(
      facts(workload, {
        objects: [cm('180', 300)],
        pods: [pod('web-0', 'web-1'), pod('web-1', 'web-1'), pod('web-2', 'web-2', { ready: false, crash: true, createdAgo: 100 })],
        revisions: [revision('web-1', 1, {}, 900), revision('web-2', 2, {}, 120)],
        events: [event('RolloutBlocked', message, 60, 'Warning')],
      }),
    );
    expect(e.state).toBe('held');
    expect(e.summary).toBe(`${message} (reported ${at(-60).toISOString()})`);
    expect(e.next[0]).toMatchObject({ cause: 'rollout-blocked', text: expect.stringContaining('once pod web-2 is healthy again') });
  });

  it('handover paused: the next attempt from the state annotation', () => {
    const state = { from: 'web-0', fromUid: 'p0', to: 'web-1', trigger: 'rollout', startedAt: at(-120).toISOString(), attempt: 4, fallback: false, nextAt: at(7).toISOString(), outcome: 'paused' };
    const workload = set({ annotations: { 'rollguard.io/rollout': 'health-gated', 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-state': JSON.stringify(state) } });
    const e = explainWorkload(facts(workload));
    expect(e.state).toBe('handover-paused');
    expect(e.summary).toContain('handover of the primary role from web-0 paused');
    expect(e.next[0]).toMatchObject({ cause: 'handover', at: { at: at(7).toISOString(), inSeconds: 7 } });
  });

  it('handover in flight', () => {
    const state = { from: 'web-0', fromUid: 'p0', to: 'web-1', trigger: 'requested', startedAt: at(-3).toISOString(), attempt: 1, fallback: false, calledAt: at(-2).toISOString() };
    const e = explainWorkload(facts(set({ annotations: { 'rollguard.io/rollout': 'health-gated', 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-state': JSON.stringify(state) } })));
    expect(e.state).toBe('handover');
    expect(e.summary).toContain('handing the primary role from web-0 to web-1 (attempt 1');
  });

  it('without the timing record: the defaults, and a note that says so', () => {
    const workload = set();
    delete workload.metadata!.annotations!['rollguard.io/timing'];
    const e = explainWorkload(facts(workload, { objects: [cm('180', 1)] }));
    expect(e.timing.recorded).toBe(false);
    expect(e.next[0]!.at!.inSeconds).toBe(4);
    expect(e.notes.some((n) => n.startsWith('rollguard.io/timing is not on the workload yet'))).toBe(true);
  });

  it('notes: a StatefulSet-only feature on a Deployment, a denied write, a folded restart reason, what the reader could not list', () => {
    const workload = set({ annotations: { 'rollguard.io/rollout': 'health-gated', 'rollguard.io/restart-reason': 'ConfigMap app changed (resourceVersion 1 → 2)' } });
    const e = explainWorkload(facts(workload, { events: [event('WriteDenied', 'denied by rollguard-fence-deployments-daemonsets', 30, 'Warning')], problems: ['list pods: forbidden to you'] }, 'Deployment'));
    expect(e.notes[0]).toBe('list pods: forbidden to you');
    expect(e.notes.join('\n')).toContain('health-gated rollouts (rollguard.io/rollout): StatefulSets only');
    expect(e.notes.join('\n')).toContain("the webhook folded a version bump into the owner's last template write");
    expect(e.notes.join('\n')).toContain("rollguard's write was denied");
  });

  it('is total: any labels, annotations, object states and times give one of its states', () => {
    const value = fc.oneof(fc.constantFrom('true', 'false', '', 'absent', 'x/1', `${CM_UID}/100`, '{}', 'not json'), fc.string({ maxLength: 8 }));
    const keys = fc.constantFrom(
      'rollguard.io/enabled',
      'rollguard.io/rollout',
      'rollguard.io/timing',
      'rollguard.io/last-restart-at',
      'rollguard.io/handover-state',
      'rollguard.io/primary-selector',
      'rollguard.io/digests',
      'rollguard.io/frozen',
      'rollguard.io/ignore-configmaps',
      'rollguard.io/wanted-replicas',
      'configmap.rollguard.io/app',
      'restarter.stackable.tech/enabled',
    );
    const map = fc.dictionary(keys, value, { maxKeys: 6 });
    const object = fc.oneof(
      fc.record({ rv: fc.integer({ min: 1, max: 300 }), ago: fc.integer({ min: -5, max: 400 }), ignored: fc.boolean() }).map(({ rv, ago, ignored }) => cm(String(rv), ago, ignored ? { 'rollguard.io/ignore': 'true' } : {})),
      fc.constant<ObjectFact>({ kind: 'ConfigMap', name: 'app', status: 'absent' }),
      fc.constant<ObjectFact>({ kind: 'ConfigMap', name: 'app', status: 'unreadable', error: 'x' }),
    );
    fc.assert(
      fc.property(map, map, map, object, fc.constantFrom<WorkloadKind>('StatefulSet', 'Deployment', 'DaemonSet'), (labels, annotations, template, objectFact, kind) => {
        const e = explainWorkload(facts(set({ labels, annotations, template }), { objects: [objectFact] }, kind));
        expect(WORKLOAD_STATES).toContain(e.state);
        expect(e.summary.length).toBeGreaterThan(0);
        expect(JSON.parse(JSON.stringify(e))).toEqual(e);
        if (e.state === 'debouncing') expect(e.next[0]!.at!.inSeconds).toBeGreaterThan(0);
      }),
      propertyRuns(2_000),
    );
  });
});
