import type { CoreV1Event } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { AppsWorkloadKind as WorkloadKind } from '../../src/kube/workloads.js';
import { ENABLED_LABEL, LAST_RESTART_ANNOTATION, annotationKey } from '../../src/restarter/annotations.js';
import { daemonSet, deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { endsWithVersion } from '../env/event-text.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import type { RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { rolledOutWorkload, rolloutsOf, workloadApi, type AnyWorkload } from '../env/workload-rollouts.js';

const CM_KEY = annotationKey('ConfigMap', 'app-config');
const KINDS = ['Deployment', 'DaemonSet'] as const;

/** A labelled workload of `kind` that reads app-config as a volume. */
function labelled(kind: WorkloadKind, name: string): AnyWorkload {
  const opts = { labels: { [ENABLED_LABEL]: 'true' } };
  const w = kind === 'Deployment' ? deployment(name, { ...opts, replicas: 2 }) : kind === 'DaemonSet' ? daemonSet(name, opts) : statefulSet(name, { ...opts, replicas: 2 });
  const pod = w.spec!.template.spec!;
  pod.containers[0]!.volumeMounts = [{ name: 'config', mountPath: '/etc/app' }];
  pod.volumes = [{ name: 'config', configMap: { name: 'app-config' } }];
  return w;
}

async function rollguardEventsAbout(namespace: string, kind: WorkloadKind, name: string): Promise<CoreV1Event[]> {
  const { core } = testCluster();
  return (await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}` })).items.filter(
    (e) => e.source?.component === 'rollguard',
  );
}

async function loopIdle(rollguard: RollguardProcess): Promise<void> {
  await waitUntil('the loop idle', async () => {
    const r = (await rollguard.status()).reconcile as { queued: number; in_flight: number };
    return (r.queued === 0 && r.in_flight === 0) || JSON.stringify(r);
  });
}

async function setConfig(namespace: string, value: string): Promise<string> {
  const { core } = testCluster();
  const cm = await core.replaceNamespacedConfigMap({ name: 'app-config', namespace, body: { metadata: { name: 'app-config' }, data: { a: value } } });
  return cm.metadata!.resourceVersion!;
}

// The test of record of issue 13 for Deployments and DaemonSets: the same contract as StatefulSets,
// rollouts counted as a user counts them (ReplicaSets, ControllerRevisions), Events read back.
describe.each(KINDS)('%s with the webhook', (kind) => {
  const { core, apps } = testCluster();
  const api = workloadApi(apps, kind);
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: `wk-${kind.toLowerCase()}`, webhook: 'registered', args: ['--debounce=1s', '--min-restart-interval=0s'] });
    ns = fixture.ns;
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('created after its ConfigMap: stored annotated, rolled out once (generation 1, one rollout) with every pod Ready', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1' } } });
    const created = await api.create(ns, labelled(kind, 'web'));
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns });
    expect(created.spec!.template.metadata!.annotations![CM_KEY]).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    const ready = await rolledOutWorkload(api, ns, 'web');
    await loopIdle(fixture.rollguard);
    const after = await api.read(ns, 'web');
    expect(after.metadata!.generation).toBe(1);
    expect(await rolloutsOf(apps, kind, ns, ready.metadata!.uid!)).toBe(1);
    expect(await rollguardEventsAbout(ns, kind, 'web')).toEqual([]);
  });

  it('a ConfigMap change: exactly one new rollout, and an Event that names the object and both versions', async () => {
    const before = await rolledOutWorkload(api, ns, 'web', 1);
    const rv = await setConfig(ns, '2');
    const after = await rolledOutWorkload(api, ns, 'web', 2);
    expect(after.spec!.template.metadata!.annotations![CM_KEY]).toMatch(new RegExp(`/${rv}$`));
    await loopIdle(fixture.rollguard);
    expect((await api.read(ns, 'web')).metadata!.generation).toBe(2);
    expect(await rolloutsOf(apps, kind, ns, before.metadata!.uid!)).toBe(2);
    const events = await waitFor('the ConfigChanged Event', async () => {
      const found = (await rollguardEventsAbout(ns, kind, 'web')).filter((e) => e.reason === 'ConfigChanged');
      return found.length > 0 ? found : undefined;
    });
    expect(events).toHaveLength(1);
    expect(events[0]!.involvedObject).toMatchObject({ kind, apiVersion: 'apps/v1', uid: before.metadata!.uid });
    expect(events[0]!.message).toContain('ConfigMap app-config');
    expect(endsWithVersion(events[0]!.message, rv), events[0]!.message).toBe(true);
    expect(events[0]!.count ?? 1).toBe(1);
  });

  it('the owner re-applies its manifest without the template annotations: no new rollout', async () => {
    const before = await rolledOutWorkload(api, ns, 'web', 2);
    // the original manifest, put back whole as `kubectl apply` would leave it: the workload's own
    // annotations (the Deployment controller's revision among them) stay, the template is the owner's
    const manifest = labelled(kind, 'web');
    manifest.metadata!.resourceVersion = before.metadata!.resourceVersion;
    manifest.metadata!.annotations = before.metadata!.annotations;
    const replaced = await api.replace(ns, 'web', manifest);
    expect(replaced.spec!.template.metadata!.annotations![CM_KEY]).toBe(before.spec!.template.metadata!.annotations![CM_KEY]);
    expect(replaced.metadata!.generation).toBe(2);
    await loopIdle(fixture.rollguard);
    expect((await api.read(ns, 'web')).metadata!.generation).toBe(2);
    expect(await rolloutsOf(apps, kind, ns, before.metadata!.uid!)).toBe(2);
  });

  it('asks for a health-gated rollout: a Warning that says it is for StatefulSets, once, and nothing is held', async () => {
    const before = await api.read(ns, 'web');
    before.metadata!.annotations = { ...before.metadata!.annotations, 'rollguard.io/rollout': 'health-gated' };
    // a Deployment's annotations are part of its generation; a DaemonSet's are not
    const asked = await api.replace(ns, 'web', before);
    const warning = await waitFor('the UnsupportedForKind Warning', async () => {
      const found = (await rollguardEventsAbout(ns, kind, 'web')).filter((e) => e.reason === 'UnsupportedForKind');
      return found.length > 0 ? found : undefined;
    });
    expect(warning[0]!.type).toBe('Warning');
    expect(warning[0]!.message).toContain(`health-gated rollouts (rollguard.io/rollout): StatefulSets only; ignored on a ${kind}`);
    // status writes, resyncs and the rollout of a change tell it no more; the change rolls as ever
    const rv = await setConfig(ns, '3');
    await waitUntil('the change rolled', async () => {
      const w = await api.read(ns, 'web');
      return w.spec!.template.metadata!.annotations![CM_KEY]!.endsWith(`/${rv}`) || `template at ${w.spec!.template.metadata!.annotations![CM_KEY]}`;
    });
    const rolled = await rolledOutWorkload(api, ns, 'web', asked.metadata!.generation! + 1);
    expect(rolled.spec?.template.metadata?.annotations?.[CM_KEY]).toMatch(new RegExp(`/${rv}$`));
    expect(await rolloutsOf(apps, kind, ns, rolled.metadata!.uid!)).toBe(3);
    await loopIdle(fixture.rollguard);
    const told = (await rollguardEventsAbout(ns, kind, 'web')).filter((e) => e.reason === 'UnsupportedForKind');
    expect(told.map((e) => e.count ?? 1)).toEqual([1]);
  });
});

describe.each(KINDS)('%s without the webhook', (kind) => {
  const { core, apps } = testCluster();
  const api = workloadApi(apps, kind);
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: `wk-${kind.toLowerCase()}-nowh`, webhook: 'unreachable', args: ['--debounce=1s', '--min-restart-interval=0s'] });
    ns = fixture.ns;
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('the loop annotates it, and its one extra rollout has its Event', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1' } } });
    const created = await api.create(ns, labelled(kind, 'web'));
    expect(created.spec!.template.metadata?.annotations?.[CM_KEY]).toBeUndefined();
    const after = await rolledOutWorkload(api, ns, 'web', 2);
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns });
    expect(after.spec!.template.metadata!.annotations![CM_KEY]).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    await loopIdle(fixture.rollguard);
    expect((await api.read(ns, 'web')).metadata!.generation).toBe(2);
    expect(await rolloutsOf(apps, kind, ns, created.metadata!.uid!)).toBe(2);
    const events = await waitFor('the ReferencesAnnotated Event', async () => {
      const found = (await rollguardEventsAbout(ns, kind, 'web')).filter((e) => e.reason === 'ReferencesAnnotated');
      return found.length > 0 ? found : undefined;
    });
    expect(events).toHaveLength(1);
    expect(events[0]!.message).toContain('ConfigMap app-config');
  });
});

describe('one ConfigMap referenced by a StatefulSet, a Deployment and a DaemonSet', () => {
  const { core, apps } = testCluster();
  let fixture: RollguardFixture;
  let ns: string;
  const ALL = ['StatefulSet', 'Deployment', 'DaemonSet'] as const;

  beforeAll(async () => {
    // one restart a second: three workloads take at least two seconds to roll
    fixture = await startRollguardFixture({ name: 'wk-three', webhook: 'registered', args: ['--debounce=1s', '--min-restart-interval=0s', '--max-restarts-per-second=1'] });
    ns = fixture.ns;
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('one change rolls all three, each once, paced by the global limit', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1' } } });
    const uids = new Map<WorkloadKind, string>();
    for (const kind of ALL) uids.set(kind, (await workloadApi(apps, kind).create(ns, labelled(kind, 'web'))).metadata!.uid!);
    for (const kind of ALL) await rolledOutWorkload(workloadApi(apps, kind), ns, 'web', 1);
    await loopIdle(fixture.rollguard);

    const rv = await setConfig(ns, '2');
    const patchedAt: number[] = [];
    for (const kind of ALL) {
      const after = await rolledOutWorkload(workloadApi(apps, kind), ns, 'web', 2);
      expect(after.spec!.template.metadata!.annotations![CM_KEY], kind).toMatch(new RegExp(`/${rv}$`));
      patchedAt.push(Date.parse(after.metadata!.annotations![LAST_RESTART_ANNOTATION]!));
    }
    await loopIdle(fixture.rollguard);
    for (const kind of ALL) {
      expect((await workloadApi(apps, kind).read(ns, 'web')).metadata!.generation, kind).toBe(2);
      expect(await rolloutsOf(apps, kind, ns, uids.get(kind)!), kind).toBe(2);
      const changed = (await rollguardEventsAbout(ns, kind, 'web')).filter((e) => e.reason === 'ConfigChanged');
      expect(changed.map((e) => [e.count ?? 1, endsWithVersion(e.message, rv)]), kind).toEqual([[1, true]]);
    }
    // the pace: a token a second, a burst of one (rollguard's own clock, written with each patch)
    expect(Math.max(...patchedAt) - Math.min(...patchedAt)).toBeGreaterThanOrEqual(1_500);
  });
});
