import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CoreV1Event, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import type { AppsWorkloadKind as WorkloadKind } from '../../src/kube/workloads.js';
import { ENABLED_LABEL, LAST_RESTART_ANNOTATION, annotationKey } from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { TIMING_ANNOTATION } from '../../src/restarter/timing.js';
import { daemonSet, deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { endsWithVersion } from '../env/event-text.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { createNamespace } from '../env/cluster.js';
import { registerWebhook as registerDevWebhook, type WebhookRegistration } from '../../src/dev/webhook-registration.js';
import { serviceAccountCredentials, type ServiceAccountCredentials } from '../env/service-account.js';
import { startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { RESTART_REASON_ANNOTATION } from '../../src/restarter/annotations.js';
import { rolloutsOf, workloadApi, type AnyWorkload } from '../env/workload-rollouts.js';
import { againOnConflict } from '../env/conflict-retry.js';

// The restart promise against the operations users make with whole objects: kubectl replace
// (Argo CD's Replace=true), kubectl rollout undo, a copy made with kubectl get -o yaml. rollguard
// runs as a ServiceAccount of its own, as in a cluster; the test's kubectl is the admin, a user.

const { kc, core, apps, kubeconfigPath } = testCluster();
const KUBECTL = (): string => path.join(controlPlaneBinaries(), 'kubectl');

function kubectl(namespace: string, ...args: string[]): string {
  return execFileSync(KUBECTL(), [`--kubeconfig=${kubeconfigPath}`, '-n', namespace, ...args], { encoding: 'utf8', timeout: 30_000 });
}

/** `kubectl replace -f`, run again on a Conflict as a user would (test/env/conflict-retry.ts). */
function replace(namespace: string, file: string, ...args: string[]): Promise<string> {
  return againOnConflict(() => kubectl(namespace, 'replace', '-f', file, ...args));
}

/** A manifest as a user keeps it in git: labelled, reading `configMap` through envFrom, no pods to play (a DaemonSet has its one). */
function manifest(kind: WorkloadKind, name: string, configMap: string): AnyWorkload {
  const labels = { [ENABLED_LABEL]: 'true' };
  const w: AnyWorkload = kind === 'StatefulSet' ? statefulSet(name, { replicas: 0, labels }) : kind === 'Deployment' ? deployment(name, { replicas: 0, labels }) : daemonSet(name, { labels });
  w.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: configMap } }];
  return w;
}

let dir: string;
function manifestFile(w: AnyWorkload): string {
  const file = path.join(dir, `${w.kind}-${w.metadata!.name}.json`);
  fs.writeFileSync(file, JSON.stringify(w));
  return file;
}

async function changeConfigMap(namespace: string, name: string, value: string): Promise<string> {
  const cm = await core.patchNamespacedConfigMap({ name, namespace, body: [{ op: 'replace', path: '/data/v', value }] });
  return cm.metadata!.resourceVersion!;
}

async function eventsOf(namespace: string, name: string, reason: string): Promise<CoreV1Event[]> {
  return (await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name},reason=${reason}` })).items;
}
const count = (events: CoreV1Event[]): number => events.reduce((sum, e) => sum + (e.count ?? 1), 0);

async function idle(fixture: RollguardFixture): Promise<void> {
  await waitUntil('rollguard idle', async () => {
    const s = (await fixture.rollguard.status()) as { reconcile: { queued: number; in_flight: number } };
    return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
  });
}

/** The workload as the loop leaves it once it has nothing left to write: its records there (a Deployment gets them only with a template write). */
async function settled(fixture: RollguardFixture, kind: WorkloadKind, name: string): Promise<AnyWorkload> {
  const api = workloadApi(apps, kind);
  const w = await waitFor(`${kind} ${name} with its records`, async () => {
    const got = await api.read(fixture.ns, name);
    const a = got.metadata?.annotations ?? {};
    return a[TIMING_ANNOTATION] !== undefined && (kind === 'Deployment' || a[DIGESTS_ANNOTATION] !== undefined) ? got : undefined;
  });
  await idle(fixture);
  return w;
}

/**
 * Once a probe StatefulSet has rolled a change made now, the loop has had a full round trip
 * (ConfigMap watch, StatefulSet watch, queue, write) after every write made before it: what it
 * did not do by then, it was not going to do. (Ordered with the StatefulSet and ConfigMap watches;
 * the other kinds' watches are as fast, not ordered with them.) Only for a fixture without debounce.
 */
async function loopCaughtUp(fixture: RollguardFixture): Promise<void> {
  const ns = fixture.ns;
  const probe = 'caught-up';
  const exists = await core.readNamespacedConfigMap({ namespace: ns, name: probe }).then(() => true, () => false);
  if (!exists) {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: probe }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({ namespace: ns, body: manifest('StatefulSet', probe, probe) as V1StatefulSet });
  }
  const to = await changeConfigMap(ns, probe, String(Date.now()));
  await waitUntil('the probe set rolled', async () => (await apps.readNamespacedStatefulSet({ namespace: ns, name: probe })).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', probe)]?.endsWith(`/${to}`) || 'not yet');
  await idle(fixture);
}

async function metric(fixture: RollguardFixture, name: string): Promise<number> {
  const text = await (await fetch(`${fixture.rollguard.adminUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(name))
    .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-user-ops-'));
});

describe('kubectl replace of an unchanged manifest (Argo CD Replace=true) bypasses no debounce', () => {
  let fixture: RollguardFixture;
  const DEBOUNCE_MS = 6_000;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'replace-debounce', webhook: 'registered', identity: 'service-account', args: [`--debounce=${DEBOUNCE_MS}ms`] });
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it.each(['StatefulSet', 'Deployment', 'DaemonSet'] as const)('%s: the replace rolls nothing and keeps rollguard\'s records; the change rolls once, after the debounce, with its Event', async (kind) => {
    const ns = fixture.ns;
    const name = `replaced-${kind.toLowerCase()}`;
    const cm = `cfg-${kind.toLowerCase()}`;
    const key = annotationKey('ConfigMap', cm);
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: cm }, data: { v: '0' } } });
    const file = manifestFile(manifest(kind, name, cm));
    kubectl(ns, 'create', '-f', file);
    const before = await settled(fixture, kind, name);
    const api = workloadApi(apps, kind);
    const rolloutsBefore = await waitFor('the first rollout recorded', async () => ((await rolloutsOf(apps, kind, ns, before.metadata!.uid!)) === 1 ? 1 : undefined));

    const changedTo = await changeConfigMap(ns, cm, '1');
    const changedAt = Date.now();
    await replace(ns, file);
    const replaced = await api.read(ns, name);
    // the replace itself: the template as it was, no new generation, rollguard's records kept. (A
    // Deployment's replace drops deployment.kubernetes.io/revision, which is a generation whatever
    // rollguard does; what a user checks there is that no ReplicaSet was made.)
    if (kind === 'Deployment') expect(replaced.metadata?.generation).toBe((before.metadata?.generation ?? 0) + 1);
    else expect(replaced.metadata?.generation).toBe(before.metadata?.generation);
    expect(replaced.spec?.template.metadata?.annotations?.[key]).toBe(before.spec?.template.metadata?.annotations?.[key]);
    for (const record of [TIMING_ANNOTATION, DIGESTS_ANNOTATION]) expect(replaced.metadata?.annotations?.[record], record).toBe(before.metadata?.annotations?.[record]);
    expect(await rolloutsOf(apps, kind, ns, before.metadata!.uid!)).toBe(rolloutsBefore);

    const rolled = await waitFor('the loop to roll the change', async () => {
      const w = await api.read(ns, name);
      return w.spec?.template.metadata?.annotations?.[key]?.endsWith(`/${changedTo}`) ? w : undefined;
    }, { timeoutMs: 30_000 });
    const rolledAt = Date.parse(rolled.metadata!.annotations![LAST_RESTART_ANNOTATION]!);
    // one second of slack: the debounce counts from when rollguard saw the change
    expect(rolledAt - changedAt).toBeGreaterThanOrEqual(DEBOUNCE_MS - 1_000);
    expect(rolled.metadata?.generation).toBe((replaced.metadata?.generation ?? 0) + 1);
    await waitUntil('its Event', async () => (await eventsOf(ns, name, 'ConfigChanged')).some((e) => endsWithVersion(e.message, changedTo)) || 'none yet');
    await idle(fixture);
    expect(count(await eventsOf(ns, name, 'ConfigChanged'))).toBe(1);
    await waitUntil('one new rollout', async () => (await rolloutsOf(apps, kind, ns, before.metadata!.uid!)) === rolloutsBefore + 1 || 'not yet');
  });
});

describe('kubectl replace bypasses no restart floor and no data check', () => {
  let fixture: RollguardFixture;
  const FLOOR_MS = 10_000;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'replace-floor', webhook: 'registered', identity: 'service-account', args: ['--debounce=0s', `--min-restart-interval=${FLOOR_MS}ms`] });
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it('a change replaced right after a rollout waits out the floor; a metadata-only change replaced rolls nothing', async () => {
    const ns = fixture.ns;
    const key = annotationKey('ConfigMap', 'floor');
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'floor' }, data: { v: '0' } } });
    const file = manifestFile(manifest('StatefulSet', 'floored', 'floor'));
    kubectl(ns, 'create', '-f', file);
    await settled(fixture, 'StatefulSet', 'floored');
    const read = (): Promise<AnyWorkload> => apps.readNamespacedStatefulSet({ namespace: ns, name: 'floored' });

    const first = await changeConfigMap(ns, 'floor', '1');
    const once = await waitFor('the first change rolled', async () => {
      const w = await read();
      return w.spec?.template.metadata?.annotations?.[key]?.endsWith(`/${first}`) ? w : undefined;
    });
    const firstAt = Date.parse(once.metadata!.annotations![LAST_RESTART_ANNOTATION]!);
    const second = await changeConfigMap(ns, 'floor', '2');
    await replace(ns, file);
    const replaced = await read();
    expect(replaced.metadata?.generation).toBe(once.metadata?.generation);
    expect(replaced.metadata?.annotations?.[LAST_RESTART_ANNOTATION]).toBe(once.metadata!.annotations![LAST_RESTART_ANNOTATION]);
    const twice = await waitFor('the second change rolled after the floor', async () => {
      const w = await read();
      return w.spec?.template.metadata?.annotations?.[key]?.endsWith(`/${second}`) ? w : undefined;
    }, { timeoutMs: 40_000 });
    expect(Date.parse(twice.metadata!.annotations![LAST_RESTART_ANNOTATION]!) - firstAt).toBeGreaterThanOrEqual(FLOOR_MS);
    expect(twice.metadata?.generation).toBe((once.metadata?.generation ?? 0) + 1);
    await idle(fixture);

    // a label on the ConfigMap (its data the same), then the replace: the data check still decides, nothing rolls
    const metadataOnlyBefore = await metric(fixture, 'rollguard_metadata_only_changes_total');
    await core.patchNamespacedConfigMap({ name: 'floor', namespace: ns, body: [{ op: 'add', path: '/metadata/labels', value: { team: 'a' } }] });
    await replace(ns, file);
    await waitUntil('the loop to judge the label a metadata-only change', async () => (await metric(fixture, 'rollguard_metadata_only_changes_total')) > metadataOnlyBefore || 'not yet', { timeoutMs: 30_000 });
    await idle(fixture);
    const after = await read();
    expect(after.metadata?.generation).toBe(twice.metadata?.generation);
    expect(after.spec?.template.metadata?.annotations?.[key]).toBe(twice.spec?.template.metadata?.annotations?.[key]);
  });
});

// Found by the model checker (seed 1025929423, trace of 5 operations): with the webhook down, a
// kubectl replace of the manifest drops rollguard's annotations from the set and its template, its
// rollguard.io/last-restart-at with them; the loop put them back 0.5 s after its first write to the
// set, a second rollout inside the restart floor.
describe('kubectl replace while the webhook is unreachable (the loop alone) bypasses no restart floor', () => {
  let fixture: RollguardFixture;
  const FLOOR_MS = 8_000;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'replace-no-webhook', webhook: 'unreachable', identity: 'service-account', args: ['--debounce=0s', `--min-restart-interval=${FLOOR_MS}ms`] });
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it.each(['StatefulSet', 'Deployment', 'DaemonSet'] as const)('%s: the loop\'s write after the replace waits out the floor from its first, with RestartsDeferred', async (kind) => {
    const ns = fixture.ns;
    const name = `bare-${kind.toLowerCase()}`;
    const cm = `bare-${kind.toLowerCase()}`;
    const key = annotationKey('ConfigMap', cm);
    const api = workloadApi(apps, kind);
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: cm }, data: { v: '0' } } });
    const file = manifestFile(manifest(kind, name, cm));
    kubectl(ns, 'create', '-f', file);
    const annotated = await waitFor(`the loop to annotate ${kind} ${name}`, async () => {
      const w = await api.read(ns, name);
      return w.spec?.template.metadata?.annotations?.[key] !== undefined && w.metadata?.annotations?.[LAST_RESTART_ANNOTATION] ? w : undefined;
    });
    const firstAt = Date.parse(annotated.metadata!.annotations![LAST_RESTART_ANNOTATION]!);

    // the object as the replace stored it, before the loop's answer
    const replaced = JSON.parse(await replace(ns, file, '-o', 'json')) as AnyWorkload;
    expect(replaced.spec?.template.metadata?.annotations?.[key], 'the replace dropped the annotation').toBeUndefined();
    expect(replaced.metadata?.annotations?.[LAST_RESTART_ANNOTATION]).toBeUndefined();

    const again = await waitFor('the loop to write the annotation again', async () => {
      const w = await api.read(ns, name);
      return BigInt(w.metadata!.resourceVersion!) > BigInt(replaced.metadata!.resourceVersion!) && w.spec?.template.metadata?.annotations?.[key] !== undefined ? w : undefined;
    }, { timeoutMs: FLOOR_MS + 20_000 });
    expect(Date.parse(again.metadata!.annotations![LAST_RESTART_ANNOTATION]!) - firstAt).toBeGreaterThanOrEqual(FLOOR_MS);
    expect(await eventsOf(ns, name, 'RestartsDeferred')).not.toEqual([]);
  });
});

describe('kubectl rollout undo', () => {
  let fixture: RollguardFixture;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'undo', webhook: 'registered', identity: 'service-account', args: ['--debounce=0s'] });
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it.each(['StatefulSet', 'Deployment', 'DaemonSet'] as const)(
    "%s: undo to the first revision brings back its old version, yet the template names today's and no second rollout follows",
    async (kind) => {
      const ns = fixture.ns;
      const name = `undone-${kind.toLowerCase()}`;
      const cm = `undo-${kind.toLowerCase()}`;
      const key = annotationKey('ConfigMap', cm);
      const resource = `${kind.toLowerCase()}/${name}`;
      const api = workloadApi(apps, kind);
      await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: cm }, data: { v: '0' } } });
      kubectl(ns, 'create', '-f', manifestFile(manifest(kind, name, cm)));
      const created = await settled(fixture, kind, name);
      const uid = created.metadata!.uid!;
      const firstValue = created.spec!.template.metadata!.annotations![key]!;

      // revision 2: rollguard's, for a change of the ConfigMap
      const changedTo = await changeConfigMap(ns, cm, '1');
      await waitFor('rollguard to roll the change', async () => ((await api.read(ns, name)).spec?.template.metadata?.annotations?.[key]?.endsWith(`/${changedTo}`) ? true : undefined));
      await idle(fixture);
      // undo of rollguard's rollout: revision 1's template names the old version, but its pods would
      // read today's data; nothing to go back to, so nothing rolls, and the template keeps today's
      const restarted = await api.read(ns, name);
      kubectl(ns, 'rollout', 'undo', resource);
      await loopCaughtUp(fixture);
      const noop = await api.read(ns, name);
      expect(noop.metadata?.generation).toBe(restarted.metadata?.generation);
      expect(noop.spec?.template.metadata?.annotations?.[key]).toBe(restarted.spec?.template.metadata?.annotations?.[key]);
      expect(noop.metadata?.annotations?.[LAST_RESTART_ANNOTATION]).toBe(restarted.metadata?.annotations?.[LAST_RESTART_ANNOTATION]);
      expect(await rolloutsOf(apps, kind, ns, uid)).toBe(2);
      // revision 3: the user's new image
      kubectl(ns, 'set', 'image', resource, 'app=registry.example/app:2');
      await waitUntil('three revisions', async () => (await rolloutsOf(apps, kind, ns, uid)) === 3 || `${await rolloutsOf(apps, kind, ns, uid)}`);
      await idle(fixture);
      const beforeUndo = await api.read(ns, name);
      const rolloutsBefore = await rolloutsOf(apps, kind, ns, uid);
      const eventsBefore = count(await eventsOf(ns, name, 'ConfigChanged'));

      // back to revision 1: image 1 and the ConfigMap version of then
      kubectl(ns, 'rollout', 'undo', resource, '--to-revision=1');
      const undone = await api.read(ns, name);
      expect(undone.spec?.template.spec?.containers[0]?.image).toBe('registry.example/app:1');
      const current = await core.readNamespacedConfigMap({ namespace: ns, name: cm });
      // the pods of the undone template read today's data: the template says so, not the first version
      expect(undone.spec?.template.metadata?.annotations?.[key]).toBe(`${current.metadata!.uid}/${current.metadata!.resourceVersion}`);
      expect(undone.spec?.template.metadata?.annotations?.[key]).not.toBe(firstValue);
      // rollguard's records on the workload are today's, not the old revision's (a Deployment's undo copies an old ReplicaSet's annotations)
      for (const record of [LAST_RESTART_ANNOTATION, TIMING_ANNOTATION, DIGESTS_ANNOTATION]) {
        expect(undone.metadata?.annotations?.[record], record).toBe(beforeUndo.metadata?.annotations?.[record]);
      }
      await loopCaughtUp(fixture);
      // the undone template is revision 2's (image 1, today's version): that revision runs again, nothing new, nothing after it
      const settledAfter = await api.read(ns, name);
      expect(settledAfter.metadata?.generation).toBe(undone.metadata?.generation);
      expect(settledAfter.spec?.template.metadata?.annotations?.[key]).toBe(undone.spec?.template.metadata?.annotations?.[key]);
      expect(await rolloutsOf(apps, kind, ns, uid)).toBe(rolloutsBefore);
      expect(count(await eventsOf(ns, name, 'ConfigChanged'))).toBe(eventsBefore);
    },
  );
});

describe('kubectl apply --server-side by two field managers', () => {
  let fixture: RollguardFixture;
  const USER = 'user-gitops';
  const TOOL = 'second-tool';

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'server-side-apply', webhook: 'registered', identity: 'service-account', args: ['--debounce=0s'] });
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  /** `kubectl apply --server-side` as `manager`; what kubectl printed, or the error it failed with (a conflict among them). */
  function apply(ns: string, manager: string, file: string, ...flags: string[]): { ok: true; out: string } | { ok: false; err: string } {
    try {
      return { ok: true, out: kubectl(ns, 'apply', '--server-side', `--field-manager=${manager}`, ...flags, '-f', file) };
    } catch (err) {
      return { ok: false, err: String((err as { stderr?: unknown }).stderr ?? err) };
    }
  }
  const applied = (ns: string, manager: string, file: string, ...flags: string[]): string => {
    const result = apply(ns, manager, file, ...flags);
    if (!result.ok) throw new Error(`kubectl apply --server-side --field-manager=${manager} failed: ${result.err}`);
    return result.out;
  };
  const rollguardValues = (w: AnyWorkload): Record<string, string> =>
    Object.fromEntries(Object.entries(w.spec?.template.metadata?.annotations ?? {}).filter(([k]) => k.includes('.rollguard.io/')));
  /** The fields each field manager owns, as paths (`spec.template.metadata.annotations.<key>`), from managedFields. */
  const owned = (w: AnyWorkload): Map<string, string[]> => {
    const out = new Map<string, string[]>();
    const walk = (node: unknown, at: string[], into: string[]): void => {
      const entries = Object.entries((node ?? {}) as Record<string, unknown>).filter(([k]) => k.startsWith('f:'));
      if (entries.length === 0 && at.length > 0) into.push(at.join('.'));
      for (const [k, v] of entries) walk(v, [...at, k.slice(2)], into);
    };
    for (const m of w.metadata?.managedFields ?? []) {
      const paths = out.get(m.manager ?? '') ?? [];
      walk(m.fieldsV1, [], paths);
      out.set(m.manager ?? '', paths);
    }
    return out;
  };
  const records = (w: AnyWorkload): Record<string, string | undefined> =>
    Object.fromEntries([LAST_RESTART_ANNOTATION, TIMING_ANNOTATION, DIGESTS_ANNOTATION].map((k) => [k, w.metadata?.annotations?.[k]]));

  it.each(['StatefulSet', 'Deployment', 'DaemonSet'] as const)(
    "%s: unchanged applies roll nothing, an apply that drops or names an old copy of rollguard's annotation neither rolls nor fights, and rollguard's writes leave the managers' next applies without conflicts",
    async (kind) => {
      const ns = fixture.ns;
      const name = `applied-${kind.toLowerCase()}`;
      const cm = `ssa-${kind.toLowerCase()}`;
      const key = annotationKey('ConfigMap', cm);
      const api = workloadApi(apps, kind);
      await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: cm }, data: { v: '0' } } });
      // the user's manifest as kept in git; the second tool manages an annotation of the set and one of the template
      const userManifest = manifest(kind, name, cm);
      const userFile = manifestFile(userManifest);
      const toolPart = { apiVersion: 'apps/v1', kind, metadata: { name, annotations: { 'example.com/owner': 'team-a' } }, spec: { template: { metadata: { annotations: { 'example.com/scrape': 'true' } } } } };
      const toolFile = path.join(dir, `${kind}-${name}-tool.json`);
      fs.writeFileSync(toolFile, JSON.stringify(toolPart));
      applied(ns, USER, userFile);
      applied(ns, TOOL, toolFile);
      const before = await settled(fixture, kind, name);
      const uid = before.metadata!.uid!;
      const rolloutsBefore = await rolloutsOf(apps, kind, ns, uid);
      expect(rollguardValues(before)[key]).toBeDefined();

      // 1. each manager applies its unchanged manifest: nothing changes, nothing rolls
      for (const [manager, file] of [[USER, userFile], [TOOL, toolFile]] as const) {
        applied(ns, manager, file);
        await loopCaughtUp(fixture);
        const now = await api.read(ns, name);
        expect(now.metadata?.generation, `${manager}'s unchanged apply`).toBe(before.metadata?.generation);
        expect(rollguardValues(now), manager).toEqual(rollguardValues(before));
        expect(records(now), manager).toEqual(records(before));
      }
      expect(await rolloutsOf(apps, kind, ns, uid)).toBe(rolloutsBefore);

      // 2. a ConfigMap change: rollguard rolls once, with its Event
      const changedTo = await changeConfigMap(ns, cm, '1');
      const rolled = await waitFor('rollguard to roll the change', async () => {
        const w = await api.read(ns, name);
        return rollguardValues(w)[key]?.endsWith(`/${changedTo}`) ? w : undefined;
      });
      await waitUntil('its Event', async () => (await eventsOf(ns, name, 'ConfigChanged')).some((e) => endsWithVersion(e.message, changedTo)) || 'none yet');
      await idle(fixture);
      const rolledOnce = await api.read(ns, name);
      expect(rolledOnce.metadata?.generation).toBe((before.metadata?.generation ?? 0) + 1);
      // rollguard's writes are its own field manager's, and it owns only its own annotations
      const ownership = owned(rolledOnce);
      const rollguards = ownership.get('rollguard') ?? [];
      expect(rollguards, JSON.stringify([...ownership])).toContain(`spec.template.metadata.annotations.${key}`);
      expect(rollguards.filter((f) => !/^(metadata\.annotations\.rollguard\.io\/|spec\.template\.metadata\.annotations\.(configmap|secret)\.rollguard\.io\/)/.test(f))).toEqual([]);

      // 3. after rollguard's write, both managers' next applies pass without a conflict and roll nothing
      for (const [manager, file] of [[USER, userFile], [TOOL, toolFile]] as const) {
        const result = apply(ns, manager, file);
        expect(result.ok ? '' : result.err, `${manager}'s apply after rollguard's write`).toBe('');
        await loopCaughtUp(fixture);
        const now = await api.read(ns, name);
        expect(now.metadata?.generation, manager).toBe(rolledOnce.metadata?.generation);
        expect(rollguardValues(now), manager).toEqual(rollguardValues(rolledOnce));
      }

      // 4. the user's manifest once names rollguard's annotation (copied from the cluster), then drops it again:
      //    neither apply changes the template, rolls, or makes rollguard write
      const copied = structuredClone(userManifest);
      copied.spec!.template.metadata = { ...copied.spec!.template.metadata, annotations: { [key]: rollguardValues(rolled)[key]! } };
      const copiedFile = path.join(dir, `${kind}-${name}-copied.json`);
      fs.writeFileSync(copiedFile, JSON.stringify(copied));
      applied(ns, USER, copiedFile);
      applied(ns, USER, userFile);
      await loopCaughtUp(fixture);
      const dropped = await api.read(ns, name);
      expect(dropped.metadata?.generation).toBe(rolledOnce.metadata?.generation);
      expect(rollguardValues(dropped)).toEqual(rollguardValues(rolledOnce));
      expect(records(dropped)).toEqual(records(rolledOnce));

      // 5. the second tool applies an old copy of rollguard's annotation (the version before the change), forcing
      //    the conflict it gets: the webhook keeps today's version, nothing rolls, and rollguard does not write back
      const stale = { ...toolPart, spec: { template: { metadata: { annotations: { ...toolPart.spec.template.metadata.annotations, [key]: rollguardValues(before)[key]! } } } } };
      const staleFile = path.join(dir, `${kind}-${name}-tool-stale.json`);
      fs.writeFileSync(staleFile, JSON.stringify(stale));
      const refused = apply(ns, TOOL, staleFile);
      // the conflict names rollguard's manager and the field: the tool's manifest names a field rollguard keeps
      expect(refused.ok ? 'applied' : refused.err).toMatch(new RegExp(`conflict with "rollguard"[\\s\\S]*${key.replace(/[.]/g, '\\.')}`));
      applied(ns, TOOL, staleFile, '--force-conflicts');
      await loopCaughtUp(fixture);
      const forced = await api.read(ns, name);
      expect(forced.metadata?.generation).toBe(rolledOnce.metadata?.generation);
      expect(rollguardValues(forced)).toEqual(rollguardValues(rolledOnce));
      expect(records(forced)).toEqual(records(rolledOnce));

      expect(await rolloutsOf(apps, kind, ns, uid)).toBe(rolloutsBefore + 1);
      expect(count(await eventsOf(ns, name, 'ConfigChanged'))).toBe(1);
    },
  );
});

/** rollguard (as its own ServiceAccount) in front of two namespaces, with or without its webhook: a copy from one to the other. */
interface TwoNamespaces {
  a: string;
  b: string;
  rollguard: RollguardProcess;
  teardown(): Promise<void>;
}

async function startTwoNamespaces(name: string, webhook: boolean): Promise<TwoNamespaces> {
  const a = await createNamespace(core, `${name}-a`);
  const b = await createNamespace(core, `${name}-b`);
  const own = await createNamespace(core, `${name}-rollguard`);
  let account: ServiceAccountCredentials | undefined;
  let rollguard: RollguardProcess | undefined;
  let registration: WebhookRegistration | undefined;
  const teardown = async (): Promise<void> => {
    await rollguard?.kill();
    await registration?.delete();
    await account?.remove();
    for (const ns of [a, b, own]) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  };
  try {
    account = await serviceAccountCredentials(kc, own, 'rollguard');
    rollguard = await startRollguardProcess({
      name,
      kubeconfigPath: account.kubeconfigPath,
      args: [`--namespace=${own}`, `--watch-namespaces=${a},${b}`, `--webhook-configuration=${webhook ? a : ''}`, '--debounce=0s'],
    });
    if (webhook) {
      registration = await registerDevWebhook(kc, {
        name: a,
        port: rollguard.webhookPort,
        namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: [a, b] }] },
      });
    }
    await rollguard.waitReady();
    return { a, b, rollguard, teardown };
  } catch (err) {
    await teardown();
    throw err;
  }
}

async function statusIdle(rollguard: RollguardProcess): Promise<void> {
  await waitUntil('rollguard idle', async () => {
    const s = (await rollguard.status()) as { reconcile: { queued: number; in_flight: number } };
    return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
  });
}

/** `kubectl get -o json` of a set, made into what a user creates elsewhere: no identity of the original, no status; annotations and template as they were. */
function copyOf(namespace: string, name: string, newName = name): string {
  const got = JSON.parse(kubectl(namespace, 'get', 'statefulset', name, '-o', 'json')) as AnyWorkload & { status?: unknown };
  const m = got.metadata!;
  for (const field of ['namespace', 'uid', 'resourceVersion', 'creationTimestamp', 'generation', 'managedFields'] as const) delete m[field];
  m.name = newName;
  delete got.status;
  const file = path.join(dir, `copy-${namespace}-${name}-${newName}.json`);
  fs.writeFileSync(file, JSON.stringify(got));
  return file;
}

/**
 * A source set in namespace a whose ConfigMap is newer than b's ConfigMap of the same name (so the
 * copy's value looks newer than what b's cache knows), rolled once by rollguard, with its records.
 */
async function sourceSet(env: TwoNamespaces): Promise<AnyWorkload> {
  await core.createNamespacedConfigMap({ namespace: env.b, body: { metadata: { name: 'app' }, data: { v: 'b' } } });
  await core.createNamespacedConfigMap({ namespace: env.a, body: { metadata: { name: 'app' }, data: { v: '0' } } });
  kubectl(env.a, 'create', '-f', manifestFile(manifest('StatefulSet', 'web', 'app')));
  const to = await changeConfigMap(env.a, 'app', '1');
  const source = await waitFor('the source rolled once, with its records', async () => {
    const w = await apps.readNamespacedStatefulSet({ namespace: env.a, name: 'web' });
    const a = w.metadata?.annotations ?? {};
    return w.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'app')]?.endsWith(`/${to}`) && a[LAST_RESTART_ANNOTATION] && a[DIGESTS_ANNOTATION] ? w : undefined;
  });
  await statusIdle(env.rollguard);
  return source;
}

const cmValue = async (namespace: string, name: string): Promise<string> => {
  const cm = await core.readNamespacedConfigMap({ namespace, name });
  return `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
};

describe('a set created from another\'s kubectl get -o yaml (a copy, a restore), with the webhook', () => {
  let env: TwoNamespaces;
  beforeAll(async () => {
    env = await startTwoNamespaces('copy-webhook', true);
  });
  afterAll(async () => env?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([env.rollguard]);
  });

  it("is created naming its own namespace's versions, with none of the original's records, and is not rolled after", async () => {
    const source = await sourceSet(env);
    const key = annotationKey('ConfigMap', 'app');
    for (const [ns, name] of [[env.b, 'web'], [env.a, 'web-copy']] as const) {
      // the object as admitted: a read after it may already show the loop's own record of the same version, which in
      // the same namespace is the original's to the letter
      const created = JSON.parse(kubectl(ns, 'create', '-f', copyOf(env.a, 'web', name), '-o', 'json')) as V1StatefulSet;
      expect(created.metadata?.generation, `${ns}/${name}`).toBe(1);
      expect(created.spec?.template.metadata?.annotations?.[key], `${ns}/${name}`).toBe(await cmValue(ns, 'app'));
      for (const record of [LAST_RESTART_ANNOTATION, RESTART_REASON_ANNOTATION]) expect(created.metadata?.annotations?.[record], `${ns}/${name} ${record}`).toBeUndefined();
      expect(created.metadata?.annotations?.[DIGESTS_ANNOTATION], `${ns}/${name}`).not.toBe(source.metadata?.annotations?.[DIGESTS_ANNOTATION]);
    }
    await statusIdle(env.rollguard);
    for (const [ns, name] of [[env.b, 'web'], [env.a, 'web-copy']] as const) {
      const after = await apps.readNamespacedStatefulSet({ namespace: ns, name });
      expect(after.metadata?.generation, `${ns}/${name}`).toBe(1);
      expect(count(await eventsOf(ns, name, 'ConfigChanged')), `${ns}/${name}`).toBe(0);
    }
  });
});

describe('a copy from another namespace with no webhook (the loop alone)', () => {
  let env: TwoNamespaces;
  beforeAll(async () => {
    env = await startTwoNamespaces('copy-loop', false);
  });
  afterAll(async () => env?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([env.rollguard]);
  });

  it('is brought to its own namespace\'s version, with a Warning and the metric, not held forever', async () => {
    await sourceSet(env);
    const key = annotationKey('ConfigMap', 'app');
    kubectl(env.b, 'create', '-f', copyOf(env.a, 'web'));
    const own = await cmValue(env.b, 'app');
    const fixed = await waitFor('the copy to name b\'s version', async () => {
      const w = await apps.readNamespacedStatefulSet({ namespace: env.b, name: 'web' });
      return w.spec?.template.metadata?.annotations?.[key] === own ? w : undefined;
    }, { timeoutMs: 30_000 });
    expect(fixed.metadata?.generation).toBe(2);
    const warnings = await eventsOf(env.b, 'web', 'ForeignVersion');
    expect(warnings.map((e) => e.type)).toEqual(['Warning']);
    expect(warnings[0]?.message).toContain(`it is now ${own}`);
    const text = await (await fetch(`${env.rollguard.adminUrl}/metrics`)).text();
    expect(text).toMatch(/rollguard_restarter_warnings_total\{reason="foreign_version"\} 1\b/);
    await statusIdle(env.rollguard);
    expect((await apps.readNamespacedStatefulSet({ namespace: env.b, name: 'web' })).metadata?.generation).toBe(2);
  });
});

describe('a write the API server refuses as invalid', () => {
  let fixture: RollguardFixture;
  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'invalid-write', webhook: 'registered', identity: 'service-account', args: ['--debounce=0s'] });
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it('is a Warning naming the field, told once and not retried, where a conflict would be', async () => {
    const ns = fixture.ns;
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'full' }, data: { v: '0' } } });
    kubectl(ns, 'create', '-f', manifestFile(manifest('StatefulSet', 'full', 'full')));
    const before = await settled(fixture, 'StatefulSet', 'full');
    // the user fills the set's annotations to 40 bytes below the API server's limit (256 KiB, keys and values):
    // the loop's restart time and digest record no longer fit
    const used = Object.entries(before.metadata?.annotations ?? {}).reduce((sum, [k, v]) => sum + k.length + v.length, 0);
    const filler = 'x'.repeat(256 * 1024 - used - 'filler'.length - 40);
    await apps.patchNamespacedStatefulSet({ namespace: ns, name: 'full', body: [{ op: 'add', path: '/metadata/annotations/filler', value: filler }] });
    await changeConfigMap(ns, 'full', '1');
    await waitUntil('a WriteInvalid Warning', async () => (await eventsOf(ns, 'full', 'WriteInvalid')).length > 0 || 'none yet', { timeoutMs: 20_000 });
    const [warning] = await eventsOf(ns, 'full', 'WriteInvalid');
    expect(warning?.type).toBe('Warning');
    expect(warning?.message).toContain('metadata.annotations');
    await loopCaughtUp(fixture);
    expect(count(await eventsOf(ns, 'full', 'WriteInvalid'))).toBe(1);
    const text = await (await fetch(`${fixture.rollguard.adminUrl}/metrics`)).text();
    expect(text).toMatch(/rollguard_restarter_warnings_total\{reason="invalid"\} 1\b/);
    expect((await apps.readNamespacedStatefulSet({ namespace: ns, name: 'full' })).metadata?.generation).toBe(before.metadata?.generation);
  });
});
