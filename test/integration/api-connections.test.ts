import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { kubeconfigThrough, startFaultProxy, type FaultProxy } from '../env/fault-proxy.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';

const SETS = 10;
const CHANGES = 3;
const KEY = annotationKey('ConfigMap', 'shared');

// rollguard's writes (patches, Events, the data check's GETs) go over connections it keeps: a
// TCP connect and a TLS handshake per API call cost the API server and rollguard CPU each time
// (client-node 2.0 builds a new connection pool for every call it makes).
describe('connections to the API server', () => {
  const { core, apps, kubeconfigPath } = testCluster();
  let ns: string;
  let own: string;
  let dir: string;
  let proxy: FaultProxy | undefined;
  let rollguard: RollguardProcess | undefined;

  beforeAll(async () => {
    ns = await createNamespace(core, 'conns');
    own = await createNamespace(core, 'conns-rollguard');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-conns-'));
  });
  afterAll(async () => {
    await rollguard?.kill();
    await proxy?.close();
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
      args: [`--namespace=${own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', '--leader-election=false', '--debounce=100ms', '--max-restarts-per-second=1000'],
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
    // a pool opens a socket per call running at once (4 workers, the Event writer, the data
    // check's GET), and keeps them: 3 here on a quiet machine; a connection per call is 63 or more
    expect(opened, `${opened} connections opened for about ${calls} API calls`).toBeLessThanOrEqual(10);
  });

});
