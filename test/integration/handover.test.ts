import { AdmissionregistrationV1Api, Watch, type CoreV1Event, type V1StatefulSet } from '@kubernetes/client-node';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeReplicatedApp } from '../../src/dev/fake-replicated-app.js';
import { isReady } from '../../src/handover/decision.js';
import { HANDOVER_REQUEST_ANNOTATION, HANDOVER_STATE_ANNOTATION } from '../../src/handover/state.js';
import {
  HANDOVER_BODY_ANNOTATION,
  HANDOVER_CREDENTIALS_ANNOTATION,
  HANDOVER_FALLBACK_ANNOTATION,
  HANDOVER_HTTP_ANNOTATION,
  HANDOVER_TIMEOUT_ANNOTATION,
  PRIMARY_SELECTOR_ANNOTATION,
} from '../../src/handover/settings.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { freePort } from '../env/ports.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';
import { withCaBundle } from '../env/webhook-registration.js';
import { evictionGuardEntry } from '../../src/dev/webhook-registration.js';
import { HANDOVER_REASONS, handoverSet, rollguardEvents, setAtRest } from '../env/handover-sets.js';

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'dist', 'src', 'cli.js');
const LEASE_ARGS = ['--lease-duration=4s', '--renew-deadline=3s', '--retry-period=500ms'];
const ARGS = ['--rollout-min-step-interval=0s', '--rollout-min-ready=0s', '--debounce=0s', '--shutdown-delay=0s', ...LEASE_ARGS];

// A replicated application (one HTTP server per pod on its own 127.0.0.N, as Patroni's REST
// API would be) and rollguard as a real process against the real control plane. What a user
// checks: which pods were deleted while labelled primary, what the endpoint saw, the Events.
describe('primary handover (rollguard as a process, fake replicated application)', () => {
  const { core, apps, kubeconfigPath } = testCluster();
  let fixture: RollguardFixture;
  const apps_: FakeReplicatedApp[] = [];
  const extra: RollguardProcess[] = [];
  const { kc } = testCluster();

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'handover', webhook: 'registered', args: ARGS, kubelet: { podIps: 'distinct' } });
  });

  afterAll(async () => {
    for (const app of apps_) await app.stop();
    for (const proc of extra) await proc.kill();
    await fixture?.teardown();
  });

  /** A 3-replica gated set with a handover on its own port, its ConfigMap, and the app; at rest with `primary` labelled. */
  async function dbSet(
    name: string,
    annotations: (port: number) => Record<string, string>,
    primary: number,
    appOptions: { authorization?: string; promoteDelayMs?: number } = {},
  ): Promise<{ app: FakeReplicatedApp; port: number }> {
    const port = await freePort();
    const app = await new FakeReplicatedApp(kc, fixture.ns, { setName: name, port, ...appOptions }).start();
    apps_.push(app);
    await core.createNamespacedConfigMap({ namespace: fixture.ns, body: { metadata: { name }, data: { v: '0' } } });
    const body = handoverSet(name, { port, annotations: { [HANDOVER_BODY_ANNOTATION]: '{"leader":"{primary}","candidate":"{candidate}"}', ...annotations(port) } });
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body });
    await atRest(name);
    await app.makePrimary(`${name}-${primary}`);
    await waitUntil(`${name}-${primary} labelled primary in the app's view`, () => app.primary() === `${name}-${primary}` || `${app.primary()}`);
    return { app, port };
  }

  const readSet = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace: fixture.ns });

  const atRest = (name: string, timeoutMs?: number): Promise<void> => setAtRest(apps, fixture.ns, name, timeoutMs);

  /** Changes the set's ConfigMap and waits until rollguard has changed the template: the rollout is on. */
  async function changeConfig(name: string, value: string): Promise<void> {
    const generation = (await readSet(name)).metadata?.generation ?? 0;
    await core.patchNamespacedConfigMap({ name, namespace: fixture.ns, body: [{ op: 'replace', path: '/data/v', value }] });
    await waitUntil(`rollguard to restart ${name}`, async () => {
      const now = (await readSet(name)).metadata?.generation ?? 0;
      return now > generation || `generation ${now}`;
    });
  }

  const events = (name: string): ReturnType<typeof rollguardEvents> => rollguardEvents(core, fixture.ns, name);

  /**
   * The reasons of rollguard's Events on the set in the order they were recorded, repeats
   * included: a repeat bumps the count of the first Event with its message, so only a watch
   * sees its place in the sequence.
   */
  async function recordEvents(name: string): Promise<{ reasons: string[]; stop(): void }> {
    const reasons: string[] = [];
    const counts = new Map<string, number>();
    const controller = await new Watch(kc).watch(
      `/api/v1/namespaces/${fixture.ns}/events`,
      { fieldSelector: `involvedObject.name=${name},involvedObject.kind=StatefulSet` },
      (phase, e: CoreV1Event) => {
        if (e.source?.component !== 'rollguard' || (phase !== 'ADDED' && phase !== 'MODIFIED')) return;
        const count = e.count ?? 1;
        const was = counts.get(e.metadata!.name!) ?? 0;
        for (let i = was; i < count; i++) reasons.push(e.reason ?? '');
        counts.set(e.metadata!.name!, Math.max(was, count));
      },
      () => undefined,
    );
    return { reasons, stop: () => controller.abort() };
  }

  const reasons = async (name: string, keep: readonly string[]): Promise<string[]> => (await events(name)).map((e) => e.reason).filter((r) => keep.includes(r));

  it('rolls a 3-replica set whose primary is pod 0, then 1, then 2: no primary pod deleted while labelled, one handover per updated candidate', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await dbSet('db', () => ({}), 0);
    const recorded = await recordEvents('db');
    const perRun: number[] = [];
    for (const [run, primary] of [0, 1, 2].entries()) {
      if (run > 0) {
        await app.makePrimary(`db-${primary}`);
        await waitUntil(`db-${primary} primary`, () => app.primary() === `db-${primary}` || `${app.primary()}`);
      }
      const before = app.calls.length;
      await changeConfig('db', `v${run + 1}`);
      await atRest('db');
      perRun.push(app.calls.length - before);
      expect(app.primaryDeletions).toEqual([]);
      expect((await readSet('db')).metadata?.annotations?.[HANDOVER_STATE_ANNOTATION]).toBeUndefined();
    }
    // primary on pod 2, the first replaced: no pod runs the update yet, so the role goes to db-0 (rolled last), then once more
    expect(perRun).toEqual([1, 1, 2]);
    expect(app.calls.every((c) => c.method === 'POST' && c.path === '/switchover')).toBe(true);
    expect(JSON.parse(app.calls[0]!.body)).toEqual({ leader: 'db-0', candidate: 'db-1' });
    recorded.stop();
    const seq = recorded.reasons.filter((r) => [...HANDOVER_REASONS, 'PartitionUpdate', 'RolloutComplete'].includes(r));
    // per rollout: steps over 2 and 1, hands over, replaces 0 (run 1); and so on
    expect(seq).toEqual([
      ...['PartitionUpdate', 'PartitionUpdate', 'HandoverStarted', 'HandoverSucceeded', 'PartitionUpdate', 'RolloutComplete'],
      ...['PartitionUpdate', 'HandoverStarted', 'HandoverSucceeded', 'PartitionUpdate', 'PartitionUpdate', 'RolloutComplete'],
      ...['HandoverStarted', 'HandoverSucceeded', 'PartitionUpdate', 'PartitionUpdate', 'HandoverStarted', 'HandoverSucceeded', 'PartitionUpdate', 'RolloutComplete'],
    ]);
    const metrics = await (await fetch(`${fixture.rollguard.adminUrl}/metrics`)).text();
    expect(metrics).toMatch(/rollguard_handovers_total\{result="succeeded"\} 4/);
    expect(metrics).toMatch(/rollguard_handover_duration_seconds_count 4/);
  });

  it('two failed attempts, then success: three calls an interval apart, then the step', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await dbSet('retry', () => ({}), 0);
    app.queueModes('fail', 'fail');
    await changeConfig('retry', 'v1');
    await atRest('retry');
    expect(app.calls.map((c) => c.answered)).toEqual([500, 500, 200]);
    for (let i = 1; i < app.calls.length; i++) expect(app.calls[i]!.at.getTime() - app.calls[i - 1]!.at.getTime()).toBeGreaterThanOrEqual(900);
    expect(app.primaryDeletions).toEqual([]);
    const handover = (await events('retry')).filter((e) => HANDOVER_REASONS.includes(e.reason));
    expect(handover.map((e) => e.reason)).toEqual(['HandoverStarted', 'HandoverFailed', 'HandoverStarted', 'HandoverFailed', 'HandoverStarted', 'HandoverSucceeded']);
    expect(handover[1]!.message).toContain('(attempt 1 of 3): the endpoint answered HTTP 500 "{\\"error\\":\\"switchover failed\\"}" from pod retry-0');
    expect(handover[1]!.message).toContain('retry-0 still matches the primary selector; next attempt in 1s');
  });

  it('always failing with a fallback: the fallback is called once and the rollout goes on', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await dbSet('fallback', (port) => ({ [HANDOVER_FALLBACK_ANNOTATION]: `candidate: POST :${port}/failover` }), 0);
    app.setMode('fail');
    app.setPathMode('/failover', 'ok');
    await changeConfig('fallback', 'v1');
    await atRest('fallback');
    expect(app.calls.map((c) => `${c.path} ${c.answered}`)).toEqual(['/switchover 500', '/switchover 500', '/switchover 500', '/failover 200']);
    // the candidate's own server was called
    expect(app.calls[3]!.pod).toBe('fallback-1');
    expect(app.primaryDeletions).toEqual([]);
    expect(await reasons('fallback', HANDOVER_REASONS)).toEqual([
      ...['HandoverStarted', 'HandoverFailed', 'HandoverStarted', 'HandoverFailed', 'HandoverStarted', 'HandoverFailed'],
      ...['HandoverFallback', 'HandoverSucceeded'],
    ]);
  });

  it('always failing without a fallback: pauses at the primary with a Warning, resumes when the endpoint recovers', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await dbSet('pause', () => ({}), 0);
    app.setMode('200-no-move');
    await changeConfig('pause', 'v1');
    let paused = '';
    await waitUntil('a Warning that the rollout is paused', async () => {
      paused = (await events('pause')).find((e) => e.type === 'Warning' && e.message.includes('the rollout is paused at pod pause-0'))?.message ?? '';
      return paused !== '' || 'not yet';
    }, { timeoutMs: 60_000 });
    expect(paused).toContain('the endpoint answered HTTP 200');
    expect(paused).toContain('pause-0 still matches the primary selector');
    const set = await readSet('pause');
    expect(set.spec?.updateStrategy?.rollingUpdate?.partition).toBe(1);
    const status = (await fixture.rollguard.status()) as { rollouts: { name: string; handover?: { from: string; paused: boolean } }[] };
    expect(status.rollouts.find((r) => r.name === 'pause')?.handover).toMatchObject({ from: 'pause-0', paused: true });
    app.setMode('ok');
    await atRest('pause');
    expect(app.primaryDeletions).toEqual([]);
    expect((await reasons('pause', HANDOVER_REASONS)).at(-1)).toBe('HandoverSucceeded');
  });

  it("a person's annotation on the primary's pod hands the role over, and is removed", async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await dbSet('ask', () => ({}), 2);
    await core.patchNamespacedPod({
      name: 'ask-2',
      namespace: fixture.ns,
      body: [{ op: 'add', path: `/metadata/annotations`, value: { [HANDOVER_REQUEST_ANNOTATION]: 'requested' } }],
    });
    await waitUntil('the request annotation removed', async () => {
      const pod = await core.readNamespacedPod({ name: 'ask-2', namespace: fixture.ns });
      return pod.metadata?.annotations?.[HANDOVER_REQUEST_ANNOTATION] === undefined || 'still there';
    }, { timeoutMs: 30_000 });
    expect(app.calls).toHaveLength(1);
    expect(app.primary()).not.toBe('ask-2');
    const handover = (await events('ask')).filter((e) => HANDOVER_REASONS.includes(e.reason));
    expect(handover.map((e) => e.reason)).toEqual(['HandoverStarted', 'HandoverSucceeded']);
    expect(handover[1]!.message).toMatch(/^Handed the primary role over from ask-2 to ask-0 in [\d.]+s \(attempt 1\); request removed$/);
  });

  it('`rollguard handover <namespace>/<set>` asks for the same handover; a set without a selector is refused, naming why', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await dbSet('cli', () => ({}), 1);
    const cli = (target: string) =>
      spawnSync(process.execPath, [CLI, 'handover', target, `--kubeconfig=${kubeconfigPath}`], { encoding: 'utf8', timeout: 30_000 });
    const done = cli(`${fixture.ns}/cli`);
    expect(done.stdout, done.stderr).toContain(`requested a handover away from pod ${fixture.ns}/cli-1, the primary of StatefulSet cli`);
    expect(done.status).toBe(0);
    await waitUntil('the role to move off cli-1', () => (app.primary() !== undefined && app.primary() !== 'cli-1') || `${app.primary()}`, { timeoutMs: 30_000 });
    expect(app.calls).toHaveLength(1);
    const refused = cli(`${fixture.ns}/nothing-here`);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toContain(`rollguard handover: ${fixture.ns}/nothing-here:`);
    expect(cli('no-slash').status).toBe(2);
  });

  it('calls with basic auth from the Secret that handover-credentials names, and logs no secret', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const password = `pw-${Math.random().toString(36).slice(2)}`;
    await core.createNamespacedSecret({ namespace: fixture.ns, body: { metadata: { name: 'patroni-api' }, stringData: { username: 'patroni', password } } });
    const authorization = `Basic ${Buffer.from(`patroni:${password}`).toString('base64')}`;
    const { app } = await dbSet('auth', () => ({ [HANDOVER_CREDENTIALS_ANNOTATION]: 'patroni-api' }), 1, { authorization });
    await core.patchNamespacedPod({ name: 'auth-1', namespace: fixture.ns, body: [{ op: 'add', path: '/metadata/annotations', value: { [HANDOVER_REQUEST_ANNOTATION]: 'requested' } }] });
    await waitUntil('the role to move off auth-1', () => (app.primary() !== undefined && app.primary() !== 'auth-1') || `${app.primary()}`, { timeoutMs: 30_000 });
    expect(app.calls.map((c) => [c.authorization, c.answered])).toEqual([[authorization, 200]]);
    expect((await reasons('auth', HANDOVER_REASONS)).slice(0, 1)).toEqual(['HandoverStarted']);
    const log = JSON.stringify(fixture.rollguard.logLines());
    expect(log).not.toContain(password);
    expect(log).not.toContain(authorization.slice('Basic '.length));
  });

  it('the primary pod deleted after the application demoted it and before it promoted another: the handover succeeds when the role arrives', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const { app } = await dbSet('gap', () => ({}), 0, { promoteDelayMs: 3_000 });
    await core.patchNamespacedPod({ name: 'gap-0', namespace: fixture.ns, body: [{ op: 'add', path: '/metadata/annotations', value: { [HANDOVER_REQUEST_ANNOTATION]: 'requested' } }] });
    const role = async (pod: string): Promise<string | undefined> => (await core.readNamespacedPod({ name: pod, namespace: fixture.ns })).metadata?.labels?.role;
    await waitUntil('gap-0 demoted by the application', async () => (await role('gap-0')) === 'replica' || `${await role('gap-0')}`, { intervalMs: 100 });
    // a person (or a node going away) deletes it now, while no pod holds the role
    await core.deleteNamespacedPod({ name: 'gap-0', namespace: fixture.ns, gracePeriodSeconds: 0 });
    await waitUntil('the handover ended in Events', async () => {
      const told = (await reasons('gap', HANDOVER_REASONS)).filter((r) => r !== 'HandoverStarted');
      return told.length >= 1 || 'not yet';
    }, { timeoutMs: 40_000 });
    expect(app.primary()).not.toBe('gap-0');
    expect((await reasons('gap', HANDOVER_REASONS)).slice(0, 2)).toEqual(['HandoverStarted', 'HandoverSucceeded']);
  });

  it('eviction guard: the primary is deferred with 429 until the role moved; a replica at once; rollguard unreachable: allowed', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    // the app demotes evict-0 3 s before it promotes another pod, as Patroni's leader key moves: no pod is primary meanwhile
    const { app } = await dbSet('evict', () => ({}), 0, { promoteDelayMs: 3_000 });
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    const caBundle = (await admission.readMutatingWebhookConfiguration({ name: fixture.ns })).webhooks?.[0]?.clientConfig.caBundle;
    expect(caBundle).toBeTruthy();
    const name = `${fixture.ns}-eviction`;
    const hook = (port: number) => withCaBundle(evictionGuardEntry(port, { matchLabels: { 'kubernetes.io/metadata.name': fixture.ns } }), caBundle);
    await admission.createValidatingWebhookConfiguration({ body: { metadata: { name }, webhooks: [hook(fixture.rollguard.webhookPort)] } });
    try {
      const evict = async (pod: string, dryRun = false): Promise<{ code: number; message: string }> => {
        try {
          await core.createNamespacedPodEviction({ name: pod, namespace: fixture.ns, body: { metadata: { name: pod, namespace: fixture.ns } }, ...(dryRun ? { dryRun: 'All' } : {}) });
          return { code: 201, message: '' };
        } catch (err) {
          const e = err as { code?: number; body?: unknown };
          return { code: e.code ?? 0, message: typeof e.body === 'string' ? e.body : JSON.stringify(e.body) };
        }
      };
      // the API server takes up a new webhook configuration through its own watch: a dry run marks nothing
      await waitUntil('the API server to send evictions to the guard', async () => (await evict('evict-0', true)).code === 429 || 'allowed');
      expect((await evict('evict-2')).code).toBe(201);
      const first = await evict('evict-0');
      expect(first.code).toBe(429);
      expect(first.message).toContain('rollguard: pod evict-0 is the primary of StatefulSet evict; eviction triggered a handover of the role, retry');
      // as kubectl drain does: retry the 429s until allowed
      let retries = 0;
      await waitUntil('the eviction of evict-0 allowed once the role has moved', async () => {
        const answer = await evict('evict-0');
        retries++;
        return answer.code === 201 || `${answer.code}`;
      }, { timeoutMs: 60_000, intervalMs: 250 });
      expect(retries).toBeGreaterThan(0);
      // allowed only once another Ready pod holds the role, not while none does
      const pods = (await core.listNamespacedPod({ namespace: fixture.ns, labelSelector: 'role=primary' })).items;
      const holders = pods.filter((p) => p.metadata?.name !== 'evict-0' && p.metadata?.name?.startsWith('evict-') && isReady(p));
      expect(holders.map((p) => p.metadata?.name)).toHaveLength(1);
      expect(app.calls).toHaveLength(1);
      expect(app.primaryDeletions).toEqual([]);
      // the guard lets the eviction through once the label moved; the runner's Event of it may land a moment later
      await waitUntil('the handover told in Events', async () => {
        const told = (await reasons('evict', [...HANDOVER_REASONS, 'EvictionDeferred'])).slice(0, 3);
        return told.length >= 3 || told.join(', ');
      });
      expect((await reasons('evict', [...HANDOVER_REASONS, 'EvictionDeferred'])).slice(0, 3)).toEqual(['EvictionDeferred', 'HandoverStarted', 'HandoverSucceeded']);
      // rollguard unreachable: failurePolicy Ignore lets the eviction through
      await atRest('evict');
      await admission.replaceValidatingWebhookConfiguration({
        name,
        body: { ...(await admission.readValidatingWebhookConfiguration({ name })), webhooks: [hook(await freePort())] },
      });
      const primary = app.primary()!;
      await waitUntil(`the eviction of ${primary} allowed with the webhook unreachable`, async () => (await evict(primary)).code === 201 || 'denied', { timeoutMs: 30_000 });
    } finally {
      await admission.deleteValidatingWebhookConfiguration({ name }).catch(() => undefined);
    }
  });

  it('rollguard killed mid-handover: the next leader resumes it, the endpoint sees one call', async () => {
    printProcessLogsOnFailure([fixture.rollguard, ...extra]);
    const standby = await startRollguardProcess({
      name: 'handover-standby',
      kubeconfigPath,
      args: [`--namespace=${fixture.own}`, `--watch-namespaces=${fixture.ns}`, `--webhook-configuration=${fixture.ns}`, ...ARGS],
    });
    extra.push(standby);
    await standby.waitReady();
    // the label moves 6 s after the 503, well after the leader is gone
    const port = await freePort();
    const app = await new FakeReplicatedApp(kc, fixture.ns, { setName: 'kill', port, moveDelayMs: 6_000 }).start();
    apps_.push(app);
    await core.createNamespacedConfigMap({ namespace: fixture.ns, body: { metadata: { name: 'kill' }, data: { v: '0' } } });
    const body = statefulSet('kill', {
      replicas: 3,
      labels: { [ENABLED_LABEL]: 'true' },
      annotations: {
        [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE,
        [PRIMARY_SELECTOR_ANNOTATION]: 'role=primary',
        [HANDOVER_HTTP_ANNOTATION]: `POST :${port}/switchover`,
        [HANDOVER_TIMEOUT_ANNOTATION]: '30s',
      },
    });
    body.spec!.podManagementPolicy = 'Parallel';
    body.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'kill' } }];
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body });
    await atRest('kill');
    await app.makePrimary('kill-0');
    await waitUntil('kill-0 primary', () => app.primary() === 'kill-0' || `${app.primary()}`);
    app.setMode('503-move');
    await changeConfig('kill', 'v1');
    await waitUntil('the handover call', () => app.calls.length === 1 || `${app.calls.length} calls`, { timeoutMs: 60_000 });
    await fixture.rollguard.kill();
    await atRest('kill');
    expect(app.calls).toHaveLength(1);
    expect(app.primaryDeletions).toEqual([]);
    const handover = (await events('kill')).filter((e) => HANDOVER_REASONS.includes(e.reason));
    expect(handover.map((e) => e.reason)).toEqual(['HandoverStarted', 'HandoverSucceeded']);
    expect(standby.logLines().some((l) => l.msg === 'handover: handover succeeded')).toBe(true);
  });
});
