import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { ConfigWorkloads } from '../env/config-workloads.js';
import { kubeconfigThrough, startFaultProxy, type FaultProxy } from '../env/fault-proxy.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { expectRollouts, rolloutSnapshot } from '../env/rollout-expectations.js';
import { waitFor, waitUntil } from '../env/wait.js';

const WATCH_IDLE_TIMEOUT_MS = 5_000;
/** What the API server's watch cache waits between two bookmarks on a watch (a constant there, no flag changes it). */
const BOOKMARK_INTERVAL_MS = 60_000;
/** Detection within the idle timeout, plus the time to reconnect, list nothing new and patch. */
const CATCH_UP_LIMIT_MS = WATCH_IDLE_TIMEOUT_MS + 10_000;
const KINDS = ['ConfigMap', 'Secret', 'StatefulSet'] as const;

type Status = {
  reconcile: { in_flight: number; queued: number };
  caches: Record<string, { synced: boolean; last_event_age_seconds?: number }>;
};
type LogLine = Record<string, unknown> & { msg?: string; time?: string; resource?: string };

// A watch that silently stops delivering: rollguard reaches the shared API server through a
// fault proxy on loopback, which holds the bytes of its connections without closing them. The
// API server is never stopped here, so the shared control plane serves.
describe('a watch that silently stops delivering', () => {
  const { core, apps, kubeconfigPath } = testCluster();
  let own: string;
  let ns: string;
  let dir: string;
  let proxy: FaultProxy | undefined;
  let rollguard: RollguardProcess | undefined;
  const processes: RollguardProcess[] = [];

  beforeAll(async () => {
    own = await createNamespace(core, 'faults-silent-rg');
    ns = await createNamespace(core, 'faults-silent');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-silent-'));
  });

  afterAll(async () => {
    for (const proc of processes) await proc.kill();
    await proxy?.close();
    for (const name of [ns, own]) if (name) await core.deleteNamespace({ name }).catch(() => undefined);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(processes, 40);
  });

  const status = async (): Promise<Status> => (await rollguard!.status()) as unknown as Status;
  const silentLogs = (since: number, resource: string): LogLine[] =>
    (rollguard!.logLines() as LogLine[]).filter(
      (l) => Date.parse(l.time ?? '') >= since && l.resource === resource && typeof l.msg === 'string' && /^watch of .* was silent for \d+ ms; reconnecting$/.test(l.msg),
    );
  async function idle(): Promise<void> {
    await waitUntil('rollguard idle', async () => {
      const s = await status();
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
  }

  it('is restarted within --watch-idle-timeout once a bookmark has come, and the caches catch up: a change made meanwhile rolls once', async () => {
    const started = Date.now();
    const w = new ConfigWorkloads(core, apps, ns, { changed: 'changed', steady: 'steady' });
    await w.create();
    const server = new URL(testCluster().kc.getCurrentCluster()!.server);
    proxy = await startFaultProxy({ host: server.hostname, port: Number(server.port) });
    rollguard = await startRollguardProcess({
      name: 'silent',
      kubeconfigPath: kubeconfigThrough(proxy, kubeconfigPath, dir),
      args: [
        `--namespace=${own}`,
        `--watch-namespaces=${ns}`,
        '--tls-secret=silent-tls',
        '--debounce=500ms',
        `--watch-idle-timeout=${WATCH_IDLE_TIMEOUT_MS}ms`,
        // one replica: the watches are under test, not a handover (a new term's full pass would hide a missed event)
        '--leader-election=false',
        '--webhook-configuration=',
        '--shutdown-delay=0s',
      ],
    });
    processes.push(rollguard);
    await rollguard.waitReady();
    await w.waitAnnotated();
    await idle();
    const baseline = await rolloutSnapshot(apps, core, ns, w.sets);

    // The idle bound applies once the API server has shown that it sends bookmarks. Nothing
    // changes in the namespace, so a drop of a cache's last-event age is a bookmark: about one
    // BOOKMARK_INTERVAL_MS after the watches started, the slow part of this test. A bookmark
    // carries the newest revision the API server's ConfigMap watch cache has seen, and is sent
    // only when that is past the revision the watch started from: in a cluster where no
    // ConfigMap changed since rollguard listed, none comes. So one changes, outside the
    // watched namespace.
    await core.createNamespacedConfigMap({ namespace: own, body: { metadata: { name: 'elsewhere' }, data: { v: '0' } } });
    const bookmarkWaitStarted = Date.now();
    const oldest: Record<string, number> = {};
    await waitFor('a bookmark on the ConfigMap watch (its last-event age drops)', async () => {
      const age = (await status()).caches.ConfigMap?.last_event_age_seconds;
      if (age === undefined) return undefined;
      const before = oldest.ConfigMap ?? 0;
      oldest.ConfigMap = Math.max(before, age);
      return age + 2 <= before ? true : undefined;
    }, { timeoutMs: 2 * BOOKMARK_INTERVAL_MS + 30_000, intervalMs: 500 });
    const bookmarkWaitMs = Date.now() - bookmarkWaitStarted;

    // Injected (1): every connection open now holds its bytes for good, as a half-open
    // connection would (a NAT or load balancer lost it); new connections pass. A ConfigMap
    // changes at once: only a restarted watch can deliver it.
    const frozenAt = Date.now();
    proxy.freezeOpenConnections();
    const duringHalfOpen = await w.change('changed', '1');
    await w.waitForVersion('changed', duringHalfOpen, CATCH_UP_LIMIT_MS);
    const halfOpenCatchUpMs = Date.now() - frozenAt;
    const configMaps = `configmaps in namespace ${ns}`;
    expect(silentLogs(frozenAt, configMaps).length, 'ConfigMap watch restarts logged after the freeze').toBeGreaterThanOrEqual(1);
    await idle();

    // Injected (2): everything frozen, new connections too (the API server unreachable but the
    // connections never refused); a ConfigMap changes meanwhile. Each reconnect attempt hangs and
    // is given up after the idle timeout; once let through, the watch catches up.
    const frozenAllAt = Date.now();
    proxy.freeze();
    const duringFreeze = await w.change('changed', '2');
    await waitUntil('rollguard to give up the silent ConfigMap watch while all is frozen', () =>
      silentLogs(frozenAllAt, configMaps).length >= 1 || 'not yet',
      { timeoutMs: CATCH_UP_LIMIT_MS },
    );
    const detectedMs = Date.parse(silentLogs(frozenAllAt, configMaps)[0]!.time!) - frozenAllAt;
    expect(await w.annotatedVersion('changed'), 'nothing reached rollguard while frozen').not.toBe(duringFreeze);
    proxy.restore();
    const restoredAt = Date.now();
    await w.waitForVersion('changed', duringFreeze, CATCH_UP_LIMIT_MS);
    const freezeCatchUpMs = Date.now() - restoredAt;
    await idle();

    const final = await rolloutSnapshot(apps, core, ns, w.sets);
    expectRollouts('changed', baseline, final, [duringHalfOpen, duringFreeze]);
    expectRollouts('steady', baseline, final, []);
    const s = await status();
    for (const kind of KINDS) expect(s.caches[kind]?.synced, `${kind} cache synced`).toBe(true);
    console.log(
      `[faults] first bookmark after ${bookmarkWaitMs} ms of waiting; injected (1) half-open connections (held for good, new ones pass): ` +
        `a change made at once rolled ${halfOpenCatchUpMs} ms after the freeze (--watch-idle-timeout=${WATCH_IDLE_TIMEOUT_MS}ms); ` +
        `(2) all connections frozen, new ones too: silence detected ${detectedMs} ms after the freeze, the change made meanwhile rolled ` +
        `${freezeCatchUpMs} ms after restore; rollouts: changed 2/2 changes, steady 0/0; test ${Date.now() - started} ms`,
    );
  }, 4 * BOOKMARK_INTERVAL_MS);
});
