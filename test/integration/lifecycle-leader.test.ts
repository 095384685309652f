import { CoordinationV1Api, type CoreV1Event } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardProcess, printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { endsWithVersion } from '../env/event-text.js';

const LEASE_DURATION_MS = 4_000;
const LIFECYCLE_ARGS = [
  '--shutdown-delay=2s',
  '--shutdown-timeout=15s',
  `--lease-duration=${LEASE_DURATION_MS}ms`,
  '--renew-deadline=3s',
  '--retry-period=500ms',
  '--debounce=0s',
  // the reconcile loop alone writes here: no webhook configuration to wait for
  '--webhook-configuration=',
];
const LEASE = 'lifecycle-leader';
const CONFIG_MAP = 'shared';
const SETS = ['alpha', 'beta', 'gamma'];
const EXIT_DEADLINE_MS = 20_000;
/** A released lease is taken at the next retry (500 ms); one that ran out would take the whole lease duration. */
const TAKEOVER_LIMIT_MS = LEASE_DURATION_MS / 2;

type Status = {
  identity: string;
  ready: boolean;
  leader: { enabled: boolean; leader: boolean; holder?: string };
  reconcile: { in_flight: number; queued: number };
};

type Exit = { code: number | null; signal: NodeJS.Signals | null };

async function exitOf(proc: RollguardProcess): Promise<Exit> {
  let exit: Exit | undefined;
  void proc.exited.then((e) => (exit = e));
  return waitFor(`${proc.name} to exit`, () => exit, { timeoutMs: EXIT_DEADLINE_MS, intervalMs: 20 });
}

describe('two replicas and one leader', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  const coordination = kc.makeApiClient(CoordinationV1Api);
  let rollguardNamespace: string;
  let workloads: string;
  const everyProcess: RollguardProcess[] = [];
  const replicas: RollguardProcess[] = [];

  async function start(name: string): Promise<RollguardProcess> {
    const proc = await startRollguardProcess({
      name,
      kubeconfigPath,
      args: [
        `--namespace=${rollguardNamespace}`,
        `--watch-namespaces=${workloads}`,
        '--tls-secret=leader-tls',
        `--lease-name=${LEASE}`,
        ...LIFECYCLE_ARGS,
      ],
    });
    everyProcess.push(proc);
    return proc;
  }

  const status = async (proc: RollguardProcess): Promise<Status> => (await proc.status()) as unknown as Status;
  const holder = async (): Promise<string | undefined> =>
    (await coordination.readNamespacedLease({ name: LEASE, namespace: rollguardNamespace })).spec?.holderIdentity || undefined;

  /** The one replica whose /status says leader, once the Lease names it too. */
  async function theLeader(candidates: RollguardProcess[]): Promise<{ leader: RollguardProcess; followers: RollguardProcess[] }> {
    return waitFor('exactly one leader, named by the Lease', async () => {
      const statuses = await Promise.all(candidates.map((p) => status(p)));
      const leading = candidates.filter((_, i) => statuses[i]!.leader.leader);
      if (leading.length !== 1) throw new Error(`${leading.length} replicas say they lead`);
      const identity = statuses[candidates.indexOf(leading[0]!)]!.identity;
      const named = await holder();
      if (named !== identity) throw new Error(`the Lease names ${named}, the leader is ${identity}`);
      return { leader: leading[0]!, followers: candidates.filter((p) => p !== leading[0]) };
    });
  }

  const versionOf = async (set: string): Promise<string | undefined> =>
    (await apps.readNamespacedStatefulSet({ name: set, namespace: workloads })).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', CONFIG_MAP)];

  async function everySetOn(resourceVersion: string): Promise<void> {
    await waitUntil(`every set on resourceVersion ${resourceVersion}`, async () => {
      const versions = await Promise.all(SETS.map(versionOf));
      return versions.every((v) => v?.endsWith(`/${resourceVersion}`)) || JSON.stringify(versions);
    });
  }

  /** rollguard's Events about each set, counting repeats: reason → set → count. */
  async function eventsBySet(): Promise<Map<string, Map<string, number>>> {
    const out = new Map<string, Map<string, number>>();
    for (const e of (await core.listNamespacedEvent({ namespace: workloads })).items as CoreV1Event[]) {
      if (e.source?.component !== 'rollguard') continue;
      const reason = e.reason ?? '';
      const bySet = out.get(reason) ?? new Map<string, number>();
      bySet.set(e.involvedObject.name ?? '', (bySet.get(e.involvedObject.name ?? '') ?? 0) + (e.count ?? 1));
      out.set(reason, bySet);
    }
    return out;
  }

  /** How many ConfigChanged Events name `resourceVersion` as the new version, per set. */
  async function configChangesTo(resourceVersion: string): Promise<Record<string, number>> {
    const counts: Record<string, number> = Object.fromEntries(SETS.map((s) => [s, 0]));
    for (const e of (await core.listNamespacedEvent({ namespace: workloads, fieldSelector: 'reason=ConfigChanged' })).items) {
      const set = e.involvedObject.name ?? '';
      if (set in counts && endsWithVersion(e.message, resourceVersion)) counts[set]! += e.count ?? 1;
    }
    return counts;
  }
  const oncePerSet = Object.fromEntries(SETS.map((s) => [s, 1]));

  async function changeConfig(value: string): Promise<string> {
    const cm = await core.patchNamespacedConfigMap({ name: CONFIG_MAP, namespace: workloads, body: [{ op: 'replace', path: '/data/v', value }] });
    return cm.metadata!.resourceVersion!;
  }

  const patchLogs = (proc: RollguardProcess): Record<string, unknown>[] =>
    proc.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith(`StatefulSet ${workloads}/`) && l.msg.includes(' restarts: '));

  async function idleAfterFirstPass(proc: RollguardProcess): Promise<void> {
    await waitUntil(`${proc.name} through its first pass over every set`, async () => {
      const passed = proc.logLines().some((l) => l.msg === 'caches synced; reconciling every labelled StatefulSet, Deployment and DaemonSet');
      const s = await status(proc);
      return (passed && s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || `first pass logged: ${passed}, ${JSON.stringify(s.reconcile)}`;
    });
  }

  beforeAll(async () => {
    rollguardNamespace = await createNamespace(core, 'lifecycle-leader-rg');
    workloads = await createNamespace(core, 'lifecycle-leader-wl');
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: CONFIG_MAP }, data: { v: '0' } } });
    for (const name of SETS) {
      const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: CONFIG_MAP } }];
      await apps.createNamespacedStatefulSet({ namespace: workloads, body: set });
    }
    replicas.push(...(await Promise.all(['one', 'two'].map((n) => start(n)))));
    await Promise.all(replicas.map((p) => p.waitReady()));
  });

  afterAll(async () => {
    for (const proc of everyProcess) await proc.kill();
    for (const ns of [workloads, rollguardNamespace]) if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(everyProcess);
  });

  it('lets exactly one replica reconcile: the one the Lease names', async () => {
    const { leader, followers } = await theLeader(replicas);
    const follower = followers[0]!;
    const leaderStatus = await status(leader);
    // a candidate learns the holder at its next look at the Lease
    await waitUntil(`${follower.name} to see who leads`, async () => (await status(follower)).leader.holder === leaderStatus.identity);
    expect(await status(follower)).toMatchObject({ ready: true, leader: { enabled: true, leader: false, holder: leaderStatus.identity } });

    // the first pass of the leader annotates the sets; then a change rolls each once
    await idleAfterFirstPass(leader);
    const changed = await changeConfig('1');
    await everySetOn(changed);
    await waitUntil('one ConfigChanged Event per set', async () => {
      const counts = await configChangesTo(changed);
      return JSON.stringify(counts) === JSON.stringify(oncePerSet) || JSON.stringify(counts);
    });

    expect(patchLogs(leader).length).toBeGreaterThanOrEqual(SETS.length);
    expect(patchLogs(follower)).toEqual([]);
    expect(follower.logLines().some((l) => l.msg === 'leader election: became leader')).toBe(false);
    expect(follower.logLines().some((l) => l.msg === 'caches synced; reconciling every labelled StatefulSet, Deployment and DaemonSet')).toBe(false);
  });

  it('hands over at once when the leader stops, missing no change and patching none twice', async () => {
    const { leader: old, followers } = await theLeader(replicas);
    const heir = followers[0]!;
    const before = await eventsBySet();

    // a change, and the leader told to stop right after it
    const changedDuringStop = await changeConfig('2');
    const signalledAt = Date.now();
    old.child.kill('SIGTERM');
    const exit = await exitOf(old);
    const exitedAt = Date.now();
    expect(exit).toEqual({ code: 0, signal: null });
    expect(old.logLines().some((l) => l.msg === 'leader election: released the lease')).toBe(true);

    const heirStatus = await waitFor(`${heir.name} to lead`, async () => {
      const s = await status(heir);
      return s.leader.leader ? s : undefined;
    }, { timeoutMs: LEASE_DURATION_MS * 2, intervalMs: 50 });
    const takeoverMs = Date.now() - exitedAt;
    expect(takeoverMs, `takeover ${takeoverMs} ms after the old leader exited (${exitedAt - signalledAt} ms after SIGTERM)`).toBeLessThan(TAKEOVER_LIMIT_MS);
    expect(await holder()).toBe(heirStatus.identity);

    await everySetOn(changedDuringStop);
    await idleAfterFirstPass(heir);
    expect(await configChangesTo(changedDuringStop)).toEqual(oncePerSet);

    // the heir rolls the next change, once per set
    const changedAfter = await changeConfig('3');
    await everySetOn(changedAfter);
    await waitUntil('one ConfigChanged Event per set for the change after the handover', async () => {
      const counts = await configChangesTo(changedAfter);
      return JSON.stringify(counts) === JSON.stringify(oncePerSet) || JSON.stringify(counts);
    });
    await waitUntil(`${heir.name} idle`, async () => {
      const s = await status(heir);
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });

    // the handover itself patched nothing: two changes, one ConfigChanged each per set, nothing else
    const after = await eventsBySet();
    for (const [reason, bySet] of after) {
      for (const set of SETS) {
        const added = (bySet.get(set) ?? 0) - (before.get(reason)?.get(set) ?? 0);
        expect(added, `${reason} Events added for ${set}`).toBe(reason === 'ConfigChanged' ? 2 : 0);
      }
    }

    // the old replica back, as a follower: it patches nothing
    const back = await start('one-again');
    await back.waitReady();
    await waitUntil(`${back.name} to see the heir's lease`, async () => (await status(back)).leader.holder === heirStatus.identity);
    expect((await status(back)).leader.leader).toBe(false);
    await waitUntil(`${heir.name} idle`, async () => {
      const s = await status(heir);
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
    expect(patchLogs(back)).toEqual([]);
    back.child.kill('SIGTERM');
    heir.child.kill('SIGTERM');
    expect(await Promise.all([exitOf(back), exitOf(heir)])).toEqual([
      { code: 0, signal: null },
      { code: 0, signal: null },
    ]);
  });
});
