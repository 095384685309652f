import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CoreV1Event, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { kubeconfigThrough, startFaultProxy, type FaultProxy } from '../env/fault-proxy.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { waitUntil } from '../env/wait.js';

/** How long the injected lag holds the ConfigMap on its way to rollguard's cache. */
const LAG_MS = 400;

type Status = { reconcile: { queued: number; in_flight: number } };

// A ConfigMap created just before the workload that reads it (`kubectl apply` of one file, a
// chart) is often still on the watch when the workload's admission comes. Written `absent`, its
// arrival a moment later rolls the new set for nothing: the first rollout would not be the only
// one. rollguard reaches the API server through a fault proxy; the injected fault holds the bytes
// of its open connections (its watches) for LAG_MS from just before the ConfigMap is created.
describe('a ConfigMap created just before its workload, still on the watch at admission', () => {
  const { core, apps } = testCluster();
  const fixtures: RollguardFixture[] = [];
  const proxies = new Map<RollguardFixture, FaultProxy>();
  let dir: string;

  async function start(name: string, args: string[]): Promise<RollguardFixture> {
    const server = new URL(testCluster().kc.getCurrentCluster()!.server);
    const proxy = await startFaultProxy({ host: server.hostname, port: Number(server.port) });
    const fixture = await startRollguardFixture({
      name,
      webhook: 'registered',
      args: ['--leader-election=false', '--debounce=0s', '--min-restart-interval=0s', '--shutdown-delay=0s', ...args],
      kubeconfig: (p) => kubeconfigThrough(proxy, p, dir),
    }).catch(async (err: unknown) => {
      await proxy.close();
      throw err;
    });
    fixtures.push(fixture);
    proxies.set(fixture, proxy);
    return fixture;
  }

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-reference-wait-'));
  });
  afterAll(async () => {
    for (const f of fixtures) await f.teardown();
    for (const p of proxies.values()) await p.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(fixtures.map((f) => f.rollguard), 40);
  });

  const sample = async (f: RollguardFixture, series: string): Promise<number> => {
    const text = await (await fetch(`${f.rollguard.adminUrl}/metrics`, { signal: AbortSignal.timeout(2_000) })).text();
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? NaN : Number(line.slice(series.length + 1));
  };
  const metric = (f: RollguardFixture, result: string): Promise<number> => sample(f, `rollguard_admission_reference_waits_total{result="${result}"}`);
  const cachedSets = async (f: RollguardFixture): Promise<number> => (await sample(f, 'rollguard_cached_objects{kind="StatefulSet"}')) || 0;

  /** The ConfigMap, then at once the set that mounts it, with rollguard's watches held for LAG_MS. */
  async function createBoth(f: RollguardFixture, name: string): Promise<{ set: V1StatefulSet; version: string }> {
    const proxy = proxies.get(f)!;
    proxy.freezeOpenConnections();
    const released = new Promise<void>((resolve) =>
      setTimeout(() => {
        proxy.restore();
        resolve();
      }, LAG_MS),
    );
    try {
      const cm = await core.createNamespacedConfigMap({ namespace: f.ns, body: { metadata: { name }, data: { value: 'one' } } });
      const body = statefulSet(name, { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
      body.spec!.template.spec!.volumes = [{ name: 'config', configMap: { name } }];
      const set = await apps.createNamespacedStatefulSet({ namespace: f.ns, body });
      return { set, version: `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}` };
    } finally {
      await released;
    }
  }

  /** The loop has seen everything (the held watches flowed again) and has nothing left to do. */
  async function settled(f: RollguardFixture): Promise<void> {
    await waitUntil(`${f.rollguard.name} idle`, async () => {
      const s = (await f.rollguard.status()) as unknown as Status;
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
  }

  const rollguardEvents = async (f: RollguardFixture, name: string): Promise<string[]> =>
    (await core.listNamespacedEvent({ namespace: f.ns, fieldSelector: `involvedObject.name=${name},involvedObject.kind=StatefulSet` })).items
      .filter((e: CoreV1Event) => e.source?.component === 'rollguard')
      .map((e) => `${e.reason}: ${e.message}`);

  it('waits for it (--reference-wait): the set is stored with its version at generation 1, and nothing rolls when the ConfigMap arrives', async () => {
    const f = await start('refwait', ['--reference-wait=1500ms']);
    await settled(f);
    const before = await cachedSets(f);
    const { set, version } = await createBoth(f, 'web');
    expect(set.spec!.template.metadata?.annotations?.['configmap.rollguard.io/web']).toBe(version);
    expect(await metric(f, 'appeared')).toBe(1);
    expect(await metric(f, 'absent')).toBe(0);
    // the ConfigMap is in the cache (the review saw it); once the set's own event has come too and
    // the loop is idle, a set written `absent` would have been rolled
    await waitUntil('the new set in the cache', async () => ((await cachedSets(f)) > before ? true : `sets cached ${await cachedSets(f)}`));
    await settled(f);
    const stored = await apps.readNamespacedStatefulSet({ name: 'web', namespace: f.ns });
    expect(stored.metadata!.generation, 'no rollout after the creation').toBe(1);
    expect(await rollguardEvents(f, 'web')).toEqual([]);
  });

  it('an object that does not come within the wait is written absent, and the review is answered', async () => {
    const f = fixtures[0]!;
    const body = statefulSet('orphan', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    body.spec!.template.spec!.volumes = [{ name: 'config', configMap: { name: 'never-made' } }];
    const set = await apps.createNamespacedStatefulSet({ namespace: f.ns, body });
    expect(set.spec!.template.metadata?.annotations?.['configmap.rollguard.io/never-made']).toBe('absent');
    expect(await metric(f, 'absent')).toBe(1);
  });

  it('the same lag with --reference-wait=0s (the fault is real): written absent, and its arrival rolls the new set', async () => {
    const f = await start('refwait-off', ['--reference-wait=0s']);
    const { set, version } = await createBoth(f, 'web');
    expect(set.spec!.template.metadata?.annotations?.['configmap.rollguard.io/web']).toBe('absent');
    await waitUntil('the loop writes the version that arrived', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace: f.ns });
      return s.spec!.template.metadata?.annotations?.['configmap.rollguard.io/web'] === version || `annotation ${s.spec!.template.metadata?.annotations?.['configmap.rollguard.io/web']}`;
    });
    expect((await apps.readNamespacedStatefulSet({ name: 'web', namespace: f.ns })).metadata!.generation).toBe(2);
  });
});
