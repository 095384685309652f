import { CoordinationV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardProcess, printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { eventsAdded, rollguardEvents, rolloutCounts } from '../env/rollouts.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { endsWithVersion } from '../env/event-text.js';

const LEASE_DURATION_MS = 4_000;
/**
 * The burst is planned to fit in one debounce window: its first change opens every window, the
 * leader is killed before any closes, so each changed set rolls once, to its last version. The
 * heir's first pass does not wait for a window, so a long one keeps the plan safe on a loaded machine.
 */
const DEBOUNCE_MS = 10_000;
const ARGS = [
  '--shutdown-delay=0s',
  `--lease-duration=${LEASE_DURATION_MS}ms`,
  '--renew-deadline=3s',
  '--retry-period=500ms',
  `--debounce=${DEBOUNCE_MS}ms`,
  // the loop alone writes here: every rollout is one the leader decided
  '--webhook-configuration=',
];
const LEASE = 'faults-leader-kill';
const SETS = Array.from({ length: 20 }, (_, i) => `set-${String(i).padStart(2, '0')}`);
const configOf = (set: string): string => `config-${set.slice(4)}`;
/** Changed before the SIGKILL only (rounds 1, 2), before and after it (1, 2, 3), after it only (3, while no one leads). */
const BEFORE_KILL = SETS.slice(0, 4);
const ACROSS_KILL = SETS.slice(4, 7);
const AFTER_KILL = SETS.slice(7, 10);
const CHANGED = [...BEFORE_KILL, ...ACROSS_KILL, ...AFTER_KILL];
const UNCHANGED = SETS.slice(10);

type Status = {
  identity: string;
  leader: { leader: boolean; holder?: string };
  reconcile: { in_flight: number; queued: number };
};

const logTime = (line: Record<string, unknown>): number => (typeof line.time === 'string' ? Date.parse(line.time) : Number(line.time));

// Injected: SIGKILL of the leading replica (no lease release, no drain) in the middle of a burst
// of ConfigMap changes across 20 sets, 10 of them changed; the follower must wait out the lease.
describe('SIGKILL of the leader during a burst of changes', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  const coordination = kc.makeApiClient(CoordinationV1Api);
  let rollguardNamespace: string;
  let workloads: string;
  const everyProcess: RollguardProcess[] = [];

  async function start(name: string): Promise<RollguardProcess> {
    const proc = await startRollguardProcess({
      name,
      kubeconfigPath,
      args: [`--namespace=${rollguardNamespace}`, `--watch-namespaces=${workloads}`, '--tls-secret=kill-tls', `--lease-name=${LEASE}`, ...ARGS],
    });
    everyProcess.push(proc);
    return proc;
  }
  const status = async (proc: RollguardProcess): Promise<Status> => (await proc.status()) as unknown as Status;
  const patchLogs = (proc: RollguardProcess, set?: string): Record<string, unknown>[] =>
    proc.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith(`StatefulSet ${workloads}/${set ?? ''}`) && l.msg.includes(' restarts: '));

  async function idle(proc: RollguardProcess): Promise<void> {
    await waitUntil(`${proc.name} idle after its first pass`, async () => {
      const passed = proc.logLines().some((l) => l.msg === 'caches synced; reconciling every labelled StatefulSet, Deployment and DaemonSet');
      const s = await status(proc);
      return (passed && s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || `first pass: ${passed}, ${JSON.stringify(s.reconcile)}`;
      // a set's own patch wakes it again at the end of a debounce window
    }, { timeoutMs: DEBOUNCE_MS + 30_000 });
  }

  async function changeConfig(set: string, round: number): Promise<string> {
    const cm = await core.patchNamespacedConfigMap({ name: configOf(set), namespace: workloads, body: [{ op: 'replace', path: '/data/v', value: String(round) }] });
    return cm.metadata!.resourceVersion!;
  }

  beforeAll(async () => {
    rollguardNamespace = await createNamespace(core, 'faults-kill-rg');
    workloads = await createNamespace(core, 'faults-kill-wl');
    for (const name of SETS) {
      await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: configOf(name) }, data: { v: '0' } } });
      const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: configOf(name) } }];
      await apps.createNamespacedStatefulSet({ namespace: workloads, body: set });
    }
  });

  afterAll(async () => {
    for (const proc of everyProcess) await proc.kill();
    for (const ns of [workloads, rollguardNamespace]) if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(everyProcess);
  });

  it('rolls each changed set exactly once after the follower takes over, and no unchanged set', { timeout: 180_000 }, async () => {
    const replicas = await Promise.all(['first', 'second'].map((n) => start(n)));
    await Promise.all(replicas.map((p) => p.waitReady()));
    const { leader, heir } = await waitFor('one leader named by the Lease', async () => {
      const statuses = await Promise.all(replicas.map((p) => status(p)));
      const leading = replicas.filter((_, i) => statuses[i]!.leader.leader);
      if (leading.length !== 1) throw new Error(`${leading.length} replicas lead`);
      const lease = await coordination.readNamespacedLease({ name: LEASE, namespace: rollguardNamespace });
      if (lease.spec?.holderIdentity !== statuses[replicas.indexOf(leading[0]!)]!.identity) throw new Error(`the Lease names ${lease.spec?.holderIdentity}`);
      return { leader: leading[0]!, heir: replicas.find((p) => p !== leading[0])! };
    });

    // the leader's first pass annotates every set (one ReferencesAnnotated each): that is the baseline
    await idle(leader);
    await waitUntil('every set annotated', async () => {
      const sets = (await apps.listNamespacedStatefulSet({ namespace: workloads })).items;
      const bare = sets.filter((s) => !s.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', configOf(s.metadata!.name!))]);
      return bare.length === 0 || `not annotated: ${bare.map((s) => s.metadata?.name).join(', ')}`;
    });
    const countsBefore = await rolloutCounts(apps, workloads, SETS);
    const eventsBefore = await rollguardEvents(core, workloads);
    const patchesBefore = patchLogs(leader).length;
    const leaderIdentity = (await status(leader)).identity;

    // the burst: two rounds, the SIGKILL, a third round while no one leads
    const last = new Map<string, string>();
    const burstStart = Date.now();
    for (const round of [1, 2]) {
      for (const set of [...BEFORE_KILL, ...ACROSS_KILL]) last.set(set, await changeConfig(set, round));
    }
    const killedAt = Date.now();
    leader.child.kill('SIGKILL');
    expect(await leader.exited).toEqual({ code: null, signal: 'SIGKILL' });
    const killedIdentity = (await coordination.readNamespacedLease({ name: LEASE, namespace: rollguardNamespace })).spec?.holderIdentity;
    for (const set of [...ACROSS_KILL, ...AFTER_KILL]) last.set(set, await changeConfig(set, 3));
    const burstEnd = Date.now();
    console.log(`[faults-kill] injected: SIGKILL of ${leader.name} ${killedAt - burstStart} ms into a burst of ${2 * 7 + 6} ConfigMap changes over ${CHANGED.length} of ${SETS.length} sets; burst took ${burstEnd - burstStart} ms`);
    // the design of the counts: the killed leader closed no debounce window, so it rolled nothing of the burst
    expect(patchLogs(leader).length, `patches by ${leader.name} during the burst`).toBe(patchesBefore);

    // the heir takes the lease once it has run out, and rolls each changed set to its last version
    await waitUntil(`${heir.name} to lead`, async () => (await status(heir)).leader.leader, { timeoutMs: LEASE_DURATION_MS * 4, intervalMs: 50 });
    await waitUntil('every changed set on its ConfigMap\'s last version', async () => {
      const sets = (await apps.listNamespacedStatefulSet({ namespace: workloads })).items;
      const behind = CHANGED.filter((name) => {
        const s = sets.find((x) => x.metadata?.name === name);
        return !s?.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', configOf(name))]?.endsWith(`/${last.get(name)}`);
      });
      return behind.length === 0 || `behind: ${behind.join(', ')}`;
    });
    await idle(heir);

    const elected = heir.logLines().find((l) => l.msg === 'leader election: became leader');
    const firstPatch = patchLogs(heir)[0];
    expect(elected && firstPatch, 'the heir logged its election and a patch').toBeTruthy();
    const takeoverMs = logTime(firstPatch!) - killedAt;
    const electedMs = logTime(elected!) - killedAt;
    console.log(`[faults-kill] takeover: lease taken ${electedMs} ms after SIGKILL, first patch by the new leader ${takeoverMs} ms after SIGKILL (lease duration ${LEASE_DURATION_MS} ms)`);
    // the third round came before the heir led, so its first pass saw every last version
    expect(burstEnd, 'the burst ended before the heir led').toBeLessThan(logTime(elected!));
    // no lease release: the Lease still named the killed leader, and the heir waited for it to run out
    expect(killedIdentity).toBe(leaderIdentity);
    expect(electedMs).toBeGreaterThan(LEASE_DURATION_MS / 4);

    const countsAfter = await rolloutCounts(apps, workloads, SETS);
    const added = eventsAdded(eventsBefore, await rollguardEvents(core, workloads));
    const rollouts = (set: string): { generations: number; revisions: number } => ({
      generations: countsAfter.get(set)!.generation - countsBefore.get(set)!.generation,
      revisions: countsAfter.get(set)!.revisions - countsBefore.get(set)!.revisions,
    });
    const summary = SETS.map((s) => `${s}:${rollouts(s).generations}/${rollouts(s).revisions}/${added.filter((e) => e.set === s).reduce((n, e) => n + e.count, 0)}`);
    console.log(`[faults-kill] rollouts vs changes: ${CHANGED.length} sets changed, ${SETS.reduce((n, s) => n + rollouts(s).generations, 0)} rollouts (generations), ${SETS.reduce((n, s) => n + rollouts(s).revisions, 0)} ControllerRevisions, ${added.filter((e) => e.reason === 'ConfigChanged').reduce((n, e) => n + e.count, 0)} ConfigChanged Events; set:generations/revisions/events ${summary.join(' ')}`);

    for (const set of CHANGED) {
      expect(rollouts(set), `rollouts of changed ${set}`).toEqual({ generations: 1, revisions: 1 });
      const events = added.filter((e) => e.set === set);
      expect(events.map((e) => [e.reason, e.count]), `Events about ${set}`).toEqual([['ConfigChanged', 1]]);
      // "ConfigMap x changed (…)" for a version change, "ConfigMap x: data changed (keys …), …" for a data change
      expect(events[0]!.message).toMatch(new RegExp(`^ConfigMap ${configOf(set)}(:| changed)`));
      expect(endsWithVersion(events[0]!.message, last.get(set)!), `${events[0]!.message} names → ${last.get(set)}`).toBe(true);
    }
    for (const set of UNCHANGED) {
      expect(rollouts(set), `rollouts of unchanged ${set}`).toEqual({ generations: 0, revisions: 0 });
      expect(added.filter((e) => e.set === set), `Events about unchanged ${set}`).toEqual([]);
    }
    expect(patchLogs(heir).length).toBe(CHANGED.length);
  });
});
