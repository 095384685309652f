import { AppsV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFailed } from 'vitest';
import { ConfigWorkloads } from '../env/config-workloads.js';
import { startControlPlane, type ControlPlane } from '../../src/dev/control-plane.js';
import { compactEtcd } from '../env/etcd-compaction.js';
import { kubeconfigThrough, startFaultProxy, type FaultProxy } from '../env/fault-proxy.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { expectRollouts, rolloutSnapshot } from '../env/rollout-expectations.js';
import { waitUntil } from '../env/wait.js';

/** Short enough that the changes of a test do not wait; long enough to fold nothing that should not be. */
const DEBOUNCE = '500ms';
const ROLLGUARD_NAMESPACE = 'rollguard-system';

type Status = { ready: boolean; reconcile: { in_flight: number; queued: number } };
type LogLine = Record<string, unknown> & { msg?: string; time?: string; resource?: string; resourceVersion?: string };

// kube-apiserver and etcd fail here, so these tests run on a control plane of their own: the
// shared one stays up for every other test file.
describe('rollguard while its control plane fails', () => {
  let cp: ControlPlane | undefined;
  let core: CoreV1Api;
  let apps: AppsV1Api;
  let apiPort: number;
  const processes: RollguardProcess[] = [];
  const proxies: FaultProxy[] = [];

  beforeAll(async () => {
    cp = await startControlPlane();
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    core = kc.makeApiClient(CoreV1Api);
    apps = kc.makeApiClient(AppsV1Api);
    apiPort = Number(new URL(cp.server).port);
    await core.createNamespace({ body: { metadata: { name: ROLLGUARD_NAMESPACE } } });
  });

  afterAll(async () => {
    for (const proc of processes) await proc.kill();
    for (const proxy of proxies) await proxy.close();
    await cp?.stop();
  });

  beforeEach(() => {
    printProcessLogsOnFailure(processes, 40);
    onTestFailed(() => console.error(cp?.logTail(30)));
  });

  async function workloads(namespace: string, configMapOf: Record<string, string>): Promise<ConfigWorkloads> {
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    const w = new ConfigWorkloads(core, apps, namespace, configMapOf);
    await w.create();
    return w;
  }

  async function startRollguard(name: string, kubeconfigPath: string, watched: string): Promise<RollguardProcess> {
    const proc = await startRollguardProcess({
      name,
      kubeconfigPath,
      args: [
        `--namespace=${ROLLGUARD_NAMESPACE}`,
        `--watch-namespaces=${watched}`,
        `--tls-secret=${name}-tls`,
        `--debounce=${DEBOUNCE}`,
        // one replica: the watches are under test, not a handover (a new term's full pass would hide a missed event)
        '--leader-election=false',
        // the reconcile loop alone writes: a webhook would need the API server to reach it
        '--webhook-configuration=',
        '--shutdown-delay=0s',
      ],
    });
    processes.push(proc);
    await proc.waitReady();
    return proc;
  }

  async function idle(proc: RollguardProcess): Promise<void> {
    await waitUntil(`${proc.name} idle`, async () => {
      const s = (await proc.status()) as unknown as Status;
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
  }

  const logsSince = (proc: RollguardProcess, since: number, msg: string, resource?: string): LogLine[] =>
    (proc.logLines() as LogLine[]).filter((l) => Date.parse(l.time ?? '') >= since && l.msg === msg && (resource === undefined || l.resource === resource));

  it('rolls a change made just before kube-apiserver stops and one made just after it is back, once each, and nothing else', async () => {
    // Injected: kube-apiserver stopped (SIGTERM) right after a ConfigMap change, kept down until
    // rollguard's watches have failed, started again on the same etcd; a second ConfigMap
    // changed as soon as it answers again.
    const started = Date.now();
    const ns = 'apiserver-restart';
    const w = await workloads(ns, { before: 'before', after: 'after', steady: 'steady' });
    const rollguard = await startRollguard('restart', cp!.kubeconfigPath, ns);
    await w.waitAnnotated();
    await idle(rollguard);
    const baseline = await rolloutSnapshot(apps, core, ns, w.sets);

    const beforeVersion = await w.change('before', '1');
    const stopAt = Date.now();
    await cp!.stopApiServer();
    const stoppedAt = Date.now();
    await waitUntil('rollguard to see its ConfigMap watch fail', () =>
      logsSince(rollguard, stopAt, 'list/watch failed; retrying', `configmaps in namespace ${ns}`).length > 0 || 'no failure logged yet',
    );
    await cp!.startApiServer();
    const upAt = Date.now();
    const afterVersion = await w.change('after', '1');

    await w.waitForVersion('before', beforeVersion);
    await w.waitForVersion('after', afterVersion);
    const recoveredMs = Date.now() - upAt;
    await idle(rollguard);
    const final = await rolloutSnapshot(apps, core, ns, w.sets);

    expectRollouts('before', baseline, final, [beforeVersion]);
    expectRollouts('after', baseline, final, [afterVersion]);
    expectRollouts('steady', baseline, final, []);
    expect(((await rollguard.status()) as unknown as Status).ready).toBe(true);
    const relists = logsSince(rollguard, stopAt, 'resourceVersion expired; relisting').length;
    console.log(
      `[faults] injected: kube-apiserver stopped ${stoppedAt - stopAt} ms after a ConfigMap change, down ${upAt - stoppedAt} ms, ` +
        `restarted on the same etcd, a second ConfigMap changed at once; both changes rolled ${recoveredMs} ms after it was back ` +
        `(${relists} relists on 410); rollouts: before 1/1 change, after 1/1, steady 0/0; test ${Date.now() - started} ms`,
    );
  });

  it('relists when its watch resumes from a resourceVersion etcd has compacted away, rolling what changed once and nothing else', async () => {
    // Injected, in two steps. (1) etcd compacted at its current revision under rollguard's
    // established watches: they are served from the API server's watch cache, nothing breaks.
    // (2) rollguard cut off by a fault proxy (connections reset, new ones refused); meanwhile a
    // ConfigMap changes, etcd is compacted past every revision rollguard holds, and kube-apiserver
    // restarts (otherwise its watch cache would still serve the old revision); then let through.
    const started = Date.now();
    const ns = 'etcd-compaction';
    const w = await workloads(ns, { changed: 'changed', steady: 'steady' });
    const proxy = await startFaultProxy({ host: '127.0.0.1', port: apiPort });
    proxies.push(proxy);
    const rollguard = await startRollguard('compaction', kubeconfigThrough(proxy, cp!.kubeconfigPath, cp!.dir), ns);
    await w.waitAnnotated();
    await idle(rollguard);
    const baseline = await rolloutSnapshot(apps, core, ns, w.sets);

    // (1) compaction alone
    const firstCompactionAt = Date.now();
    await compactEtcd(cp!.etcdUrl);
    const whileConnected = await w.change('changed', '1');
    await w.waitForVersion('changed', whileConnected);
    expect(logsSince(rollguard, firstCompactionAt, 'resourceVersion expired; relisting')).toEqual([]);

    // (2) cut off, changed, compacted, watch cache gone, let through
    const cutAt = Date.now();
    proxy.cut();
    await waitUntil('rollguard to see its ConfigMap watch fail', () =>
      logsSince(rollguard, cutAt, 'list/watch failed; retrying', `configmaps in namespace ${ns}`).length > 0 || 'no failure logged yet',
    );
    const whileCutOff = await w.change('changed', '2');
    const compactedAt = await compactEtcd(cp!.etcdUrl);
    await cp!.stopApiServer();
    await cp!.startApiServer();
    proxy.restore();
    const restoredAt = Date.now();

    await w.waitForVersion('changed', whileCutOff);
    const recoveredMs = Date.now() - restoredAt;
    const relists = logsSince(rollguard, cutAt, 'resourceVersion expired; relisting', `configmaps in namespace ${ns}`);
    expect(relists.length, 'relists of the ConfigMap cache after the cut').toBeGreaterThanOrEqual(1);
    const expired = Number(relists[0]!.resourceVersion);
    expect(expired, `the resourceVersion rollguard resumed from (${expired}) is below etcd's compaction (${compactedAt})`).toBeLessThan(compactedAt);
    await idle(rollguard);
    const final = await rolloutSnapshot(apps, core, ns, w.sets);

    expectRollouts('changed', baseline, final, [whileConnected, whileCutOff]);
    expectRollouts('steady', baseline, final, []);
    console.log(
      `[faults] injected: etcd compacted under established watches (no relist); then cut off ${restoredAt - cutAt} ms while a ConfigMap ` +
        `changed, etcd was compacted at revision ${compactedAt} and kube-apiserver restarted; resumed from ${expired}: 410, ` +
        `${relists.length} relist(s), the change rolled ${recoveredMs} ms after the cut ended; rollouts: changed 2/2 changes, steady 0/0; ` +
        `test ${Date.now() - started} ms`,
    );
  });
});
