import type { V1StatefulSet } from '@kubernetes/client-node';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeReplicatedApp } from '../../src/dev/fake-replicated-app.js';
import { HANDOVER_STATE_ANNOTATION } from '../../src/handover/state.js';
import { HANDOVER_RETRIES_ANNOTATION } from '../../src/handover/settings.js';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { HANDOVER_REASONS, handoverSet, rollguardEvents, setAtRest } from '../env/handover-sets.js';
import { freePort } from '../env/ports.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';

const ARGS = ['--rollout-min-step-interval=0s', '--rollout-min-ready=0s', '--debounce=0s', '--shutdown-delay=0s'];
// written out, not imported: the test of record ran against a build that had neither
const PAUSE_TIMEOUT = 'rollguard.io/handover-pause-timeout';
const CANCEL = 'rollguard.io/handover=cancel';

// A handover paused on failure holds its rollout at the primary. Its ways out, each with the
// real client operation a person would use: kubectl rollout undo, kubectl annotate (the cancel),
// and the pause timeout. rollguard is a real process, the replicated application a fake one
// that always fails the switchover.
describe('a paused handover: rollback, cancel and pause timeout', () => {
  const { core, apps, kc, kubeconfigPath } = testCluster();
  let fixture: RollguardFixture;
  const fakes: FakeReplicatedApp[] = [];

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'way-out', webhook: 'registered', args: ARGS, kubelet: { podIps: 'distinct' } });
  });

  afterAll(async () => {
    for (const app of fakes) await app.stop();
    await fixture?.teardown();
  });

  const kubectl = (...args: string[]): string =>
    execFileSync(path.join(controlPlaneBinaries(), 'kubectl'), [`--kubeconfig=${kubeconfigPath}`, '-n', fixture.ns, ...args], { encoding: 'utf8', timeout: 30_000 });
  const readSet = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace: fixture.ns });
  const events = (name: string): ReturnType<typeof rollguardEvents> => rollguardEvents(core, fixture.ns, name);
  const metrics = async (): Promise<string> => (await fetch(`${fixture.rollguard.adminUrl}/metrics`)).text();

  /** A 3-replica gated set at rest, primary db-0, one attempt per handover and an endpoint that always fails. */
  async function pausedSet(name: string, annotations: Record<string, string> = {}): Promise<{ app: FakeReplicatedApp; revision: string }> {
    const port = await freePort();
    const app = await new FakeReplicatedApp(kc, fixture.ns, { setName: name, port }).start();
    fakes.push(app);
    await core.createNamespacedConfigMap({ namespace: fixture.ns, body: { metadata: { name }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body: handoverSet(name, { port, annotations: { [HANDOVER_RETRIES_ANNOTATION]: '1', ...annotations } }) });
    await setAtRest(apps, fixture.ns, name);
    const revision = (await readSet(name)).status?.currentRevision ?? '';
    await app.makePrimary(`${name}-0`);
    await waitUntil(`${name}-0 primary`, () => app.primary() === `${name}-0` || `${app.primary()}`);
    app.setMode('fail');
    // a person's template change: pods 2 and 1 are replaced, then the handover before pod 0 fails
    kubectl('patch', 'statefulset', name, '-p', JSON.stringify({ spec: { template: { metadata: { labels: { release: '2' } } } } }));
    await waitUntil(`the rollout of ${name} paused at ${name}-0`, async () => {
      const paused = (await events(name)).some((e) => e.type === 'Warning' && e.message.includes(`the rollout is paused at pod ${name}-0`));
      return paused || (await events(name)).map((e) => e.reason).join(', ');
    }, { timeoutMs: 90_000 });
    expect((await readSet(name)).spec?.updateStrategy?.rollingUpdate?.partition).toBe(1);
    return { app, revision };
  }

  it('kubectl rollout undo while paused: the handover ends, pods 2 and 1 go back, the primary is never replaced', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app, revision } = await pausedSet('undo');
    kubectl('rollout', 'undo', 'statefulset/undo');
    await setAtRest(apps, fixture.ns, 'undo');
    const set = await readSet('undo');
    expect(set.status?.currentRevision).toBe(revision);
    expect(set.metadata?.annotations?.[HANDOVER_STATE_ANNOTATION]).toBeUndefined();
    expect(app.primaryDeletions).toEqual([]);
    expect(app.primary()).toBe('undo-0');
    const skipped = (await events('undo')).find((e) => e.reason === 'HandoverSkipped');
    expect(skipped?.message).toContain(`the rollout no longer replaces undo-0, which runs the update revision ${revision}`);
    expect(await metrics()).toMatch(/rollguard_handovers_total\{result="abandoned"\} [1-9]/);
  });

  it('the cancel annotation on the primary pod: the rollout replaces it without a handover, with a Warning', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await pausedSet('cancel');
    const calls = app.calls.length;
    kubectl('annotate', 'pod', 'cancel-0', CANCEL, '--overwrite');
    await setAtRest(apps, fixture.ns, 'cancel');
    expect(app.calls).toHaveLength(calls);
    // the person chose the failover: the primary's pod was replaced while labelled
    expect(app.primaryDeletions.map((d) => d.split(' ')[0])).toEqual(['cancel-0']);
    expect((await readSet('cancel')).metadata?.annotations?.[HANDOVER_STATE_ANNOTATION]).toBeUndefined();
    const told = (await events('cancel')).filter((e) => HANDOVER_REASONS.includes(e.reason) || e.reason === 'HandoverCancelled');
    expect(told.at(-1)).toMatchObject({ type: 'Warning', reason: 'HandoverCancelled' });
    expect(told.at(-1)?.message).toContain('the rollout replaces cancel-0 without a handover, the application fails over; cancel removed');
    expect(await metrics()).toMatch(/rollguard_handovers_total\{result="cancelled"\} 1/);
  });

  it('paused past handover-pause-timeout: gives up with a Warning, makes no more calls, and stays held until cancelled', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await pausedSet('timeout', { [PAUSE_TIMEOUT]: '3s' });
    let gaveUp = '';
    await waitUntil('a Warning that the handover gave up', async () => {
      gaveUp = (await events('timeout')).find((e) => e.type === 'Warning' && e.message.includes('gave up after 3s paused'))?.message ?? '';
      return gaveUp !== '' || 'not yet';
    }, { timeoutMs: 60_000 });
    expect(gaveUp).toContain('the rollout stays paused at pod timeout-0, timeout-0 stays primary');
    expect(gaveUp).toContain('kubectl annotate pod timeout-0 rollguard.io/handover=cancel');
    const calls = app.calls.length;
    const state = JSON.parse((await readSet('timeout')).metadata?.annotations?.[HANDOVER_STATE_ANNOTATION] ?? '{}') as { outcome?: string };
    expect(state.outcome).toBe('gave-up');
    await waitUntil('/status and the metrics to show the hold', async () => {
      const status = (await fixture.rollguard.status()) as { rollouts: { name: string; handover?: { gave_up?: boolean } }[] };
      const held = (await metrics()).includes('rollguard_rollouts_held{reason="handover_gave_up"} 1');
      return (held && status.rollouts.find((r) => r.name === 'timeout')?.handover?.gave_up === true) || 'not yet';
    });
    expect(await metrics()).toMatch(/rollguard_handovers_total\{result="gave_up"\} 1/);
    kubectl('annotate', 'pod', 'timeout-0', CANCEL, '--overwrite');
    await setAtRest(apps, fixture.ns, 'timeout');
    // no call after it gave up
    expect(app.calls).toHaveLength(calls);
    expect(fixture.rollguard.logLines().filter((l) => l.msg === 'handover: paused handover gave up')).toHaveLength(1);
  });
});
