import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadKubeConfig } from '../../src/kube/kubeconfig.js';
import { RawApi } from '../../src/kube/raw-api.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { kubeconfigThrough, startFaultProxy, type FaultProxy } from '../env/fault-proxy.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';

const SETS = 10;
const CHANGES = 3;
/** Pinned: with the pace this test sets, sizing would run a worker per set under a slow API server */
const WORKERS = 4;
const KEY = annotationKey('ConfigMap', 'shared');
/** ConfigMaps of one set each: every change is a GET of its own for the data check */
const OWN_CONFIGMAPS = 12;

// rollguard's writes (patches, Events, the data check's GETs) go over connections it keeps: a
// TCP connect and a TLS handshake per API call cost the API server and rollguard CPU each time
// (client-node 2.0 builds a new connection pool for every call it makes).
describe('connections to the API server', () => {
  const { core, apps, kubeconfigPath } = testCluster();
  let ns: string;
  let own: string;
  let dir: string;
  let proxy: FaultProxy | undefined;
  let direct: FaultProxy | undefined;
  let rollguard: RollguardProcess | undefined;

  beforeAll(async () => {
    ns = await createNamespace(core, 'conns');
    own = await createNamespace(core, 'conns-rollguard');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-conns-'));
  });
  afterAll(async () => {
    await rollguard?.kill();
    await proxy?.close();
    await direct?.close();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deleteNamespace({ name: own }).catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    if (rollguard) printProcessLogsOnFailure([rollguard]);
  });

  it(`${SETS} sets rolled ${CHANGES} times reuse a handful of connections, not one per call`, async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'shared' }, data: { v: '0' } } });
    for (let i = 0; i < SETS; i++) {
      const set = statefulSet(`web-${i}`, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'shared' } }];
      await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    }
    const server = new URL(testCluster().kc.getCurrentCluster()!.server);
    proxy = await startFaultProxy({ host: server.hostname, port: Number(server.port) });
    rollguard = await startRollguardProcess({
      name: 'conns',
      kubeconfigPath: kubeconfigThrough(proxy, kubeconfigPath, dir),
      args: [`--namespace=${own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', '--leader-election=false', '--debounce=100ms', '--max-restarts-per-second=1000', `--workers=${WORKERS}`, `--max-workers=${WORKERS}`],
    });
    printProcessLogsOnFailure([rollguard]);
    await rollguard.waitReady();
    const allAt = async (resourceVersion: string): Promise<boolean | string> => {
      const sets = (await apps.listNamespacedStatefulSet({ namespace: ns })).items;
      const behind = sets.filter((s) => !s.spec?.template.metadata?.annotations?.[KEY]?.endsWith(`/${resourceVersion}`));
      return behind.length === 0 || `${behind.length} of ${sets.length} not at ${resourceVersion}`;
    };
    const first = (await core.readNamespacedConfigMap({ name: 'shared', namespace: ns })).metadata!.resourceVersion!;
    await waitUntil('every set annotated', () => allAt(first));

    const before = proxy.accepted();
    for (let n = 1; n <= CHANGES; n++) {
      const cm = await core.patchNamespacedConfigMap({ name: 'shared', namespace: ns, body: [{ op: 'replace', path: '/data/v', value: String(n) }] });
      await waitUntil(`change ${n} rolled every set`, () => allAt(cm.metadata!.resourceVersion!));
    }
    await waitUntil('every ConfigChanged Event written', async () => {
      const events = (await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'reason=ConfigChanged' })).items;
      const count = events.reduce((sum, e) => sum + (e.count ?? 1), 0);
      return count >= SETS * CHANGES || `${count} of ${SETS * CHANGES}`;
    });
    // each change: one GET (the data check), SETS patches, SETS Events
    const calls = CHANGES * (1 + 2 * SETS);
    const opened = proxy.accepted() - before;
    // A pool opens a socket per call in flight (a worker's patch or Event, the data check's GET)
    // and keeps it: 0 to 4 here on a quiet machine. Should every kept socket go idle past
    // IDLE_SOCKET_MS between two changes of a busy run, each change opens them again. A
    // connection per call is 63 or more.
    const bound = CHANGES * (WORKERS + 1);
    expect(opened, `${opened} connections opened for about ${calls} API calls`).toBeLessThanOrEqual(bound);
  });

  it(`the data check's GETs reuse connections too: ${OWN_CONFIGMAPS} ConfigMaps of a set each, changed ${CHANGES} times`, async () => {
    expect(rollguard, 'the test above started rollguard').toBeDefined();
    for (let i = 0; i < OWN_CONFIGMAPS; i++) {
      await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: `own-${i}` }, data: { v: '0' } } });
      const set = statefulSet(`own-${i}`, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: `own-${i}` } }];
      await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    }
    const annotatedAt = async (i: number, resourceVersion: string): Promise<boolean> =>
      (await apps.readNamespacedStatefulSet({ name: `own-${i}`, namespace: ns })).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', `own-${i}`)]?.endsWith(`/${resourceVersion}`) === true;
    const versions = await Promise.all(
      Array.from({ length: OWN_CONFIGMAPS }, async (_, i) => (await core.readNamespacedConfigMap({ name: `own-${i}`, namespace: ns })).metadata!.resourceVersion!),
    );
    await waitUntil('every own-N set annotated', async () => (await Promise.all(versions.map((v, i) => annotatedAt(i, v)))).every(Boolean) || 'not yet');

    const before = proxy!.accepted();
    for (let n = 1; n <= CHANGES; n++) {
      const changed = await Promise.all(
        Array.from({ length: OWN_CONFIGMAPS }, async (_, i) =>
          (await core.patchNamespacedConfigMap({ name: `own-${i}`, namespace: ns, body: [{ op: 'replace', path: '/data/v', value: String(n) }] })).metadata!.resourceVersion!,
        ),
      );
      await waitUntil(`change ${n} of every own-N rolled its set`, async () => {
        const done = await Promise.all(changed.map((v, i) => annotatedAt(i, v)));
        return done.every(Boolean) || `${done.filter((d) => !d).length} behind`;
      });
    }
    // each change of each ConfigMap: one GET (the data check), one patch, one Event, in that
    // order in one worker: a socket per worker in each of the two pools, kept unless idle past
    // IDLE_SOCKET_MS between changes. A connection per GET is 36 or more.
    const gets = CHANGES * OWN_CONFIGMAPS;
    const opened = proxy!.accepted() - before;
    const bound = CHANGES * 2 * WORKERS;
    expect(opened, `${opened} connections opened for about ${gets * 3} API calls, ${gets} of them the data check's GETs`).toBeLessThanOrEqual(bound);
  });

  it("a data check's GET on a kept connection gone half-open fails at its deadline; the next one opens a fresh connection", async () => {
    const server = new URL(testCluster().kc.getCurrentCluster()!.server);
    direct = await startFaultProxy({ host: server.hostname, port: Number(server.port) });
    const api = new RawApi(loadKubeConfig(kubeconfigThrough(direct, kubeconfigPath, dir)));
    const get = { path: `/api/v1/namespaces/${ns}/configmaps/shared`, accept: 'application/json', timeoutMs: 2_000 };
    const name = (body: unknown): unknown => (body as { metadata?: { name?: string } }).metadata?.name;
    expect(name(await api.getJson(get))).toBe('shared');
    const opened = direct.accepted();
    expect(name(await api.getJson(get))).toBe('shared');
    expect(direct.accepted(), 'the second GET on the kept connection').toBe(opened);

    // Injected: the kept connection holds its bytes for good (a NAT or load balancer lost it); new ones pass
    direct.freezeOpenConnections();
    await expect(api.getJson(get)).rejects.toThrow(`GET ${get.path}: no answer within 2000 ms`);
    expect(name(await api.getJson(get))).toBe('shared');
    expect(direct.accepted(), 'the GET after the deadline, on a fresh connection').toBe(opened + 1);
  });
});
