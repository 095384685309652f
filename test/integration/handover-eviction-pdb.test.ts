import { spawn } from 'node:child_process';
import path from 'node:path';
import { AdmissionregistrationV1Api, PolicyV1Api, Watch, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { FakeReplicatedApp } from '../../src/dev/fake-replicated-app.js';
import { HANDOVER_BODY_ANNOTATION } from '../../src/handover/settings.js';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { handoverSet, HANDOVER_REASONS, rollguardEvents, setAtRest } from '../env/handover-sets.js';
import { freePort } from '../env/ports.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';
import { withCaBundle } from '../env/webhook-registration.js';
import { evictionGuardEntry } from '../../src/dev/webhook-registration.js';

const ARGS = ['--rollout-min-step-interval=0s', '--rollout-min-ready=0s', '--debounce=0s', '--shutdown-delay=0s'];
const SET = 'db';
const PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget.";
const CANDIDATE_PATH = 'rollguard.io~1handover-candidate';
const guardMessage = (pod: string): string => `rollguard: pod ${pod} is the primary of StatefulSet ${SET}; eviction triggered a handover of the role, retry`;

// The eviction guard beside a real PodDisruptionBudget (maxUnavailable 1), both answering the
// API server's eviction subresource: the guard defers the primary, the PDB bounds the rest.
// Every pod is bound to a node of this file's own, so `kubectl drain` of it is a real drain.
describe('eviction guard and a PodDisruptionBudget together (rollguard as a process)', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  const policy = kc.makeApiClient(PolicyV1Api);
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const node = `drain-${Math.random().toString(36).slice(2, 8)}`;
  let fixture: RollguardFixture;
  let app: FakeReplicatedApp;
  let hookName = '';
  /** the most ordinals that had no Ready, non-terminating pod at one moment, from a watch */
  let mostUnavailable = 0;
  let stopWatch: (() => void) | undefined;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'handover-pdb', webhook: 'registered', args: ARGS, kubelet: { podIps: 'distinct', nodeName: node, bind: 'all' } });
    hookName = `${fixture.ns}-eviction`;
    const caBundle = (await admission.readMutatingWebhookConfiguration({ name: fixture.ns })).webhooks?.[0]?.clientConfig.caBundle;
    await admission.createValidatingWebhookConfiguration({
      body: {
        metadata: { name: hookName },
        webhooks: [withCaBundle(evictionGuardEntry(fixture.rollguard.webhookPort, { matchLabels: { 'kubernetes.io/metadata.name': fixture.ns } }), caBundle)],
      },
    });
    const port = await freePort();
    app = await new FakeReplicatedApp(kc, fixture.ns, { setName: SET, port }).start();
    await core.createNamespacedConfigMap({ namespace: fixture.ns, body: { metadata: { name: SET }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({
      namespace: fixture.ns,
      body: handoverSet(SET, { port, annotations: { [HANDOVER_BODY_ANNOTATION]: '{"candidate":"{candidate}"}' } }),
    });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: fixture.ns,
      body: { metadata: { name: SET }, spec: { maxUnavailable: 1, selector: { matchLabels: { app: SET } } } },
    });
    stopWatch = await watchUnavailable();
  });

  afterAll(async () => {
    stopWatch?.();
    await app?.stop();
    await admission.deleteValidatingWebhookConfiguration({ name: hookName }).catch(() => undefined);
    if (fixture) {
      // bound pods terminate through the fake kubelet: gone before it stops, or the namespace never finishes deleting
      await apps.deleteNamespacedStatefulSet({ name: SET, namespace: fixture.ns }).catch(() => undefined);
      await waitUntil('the pods of the set gone', async () => {
        const left = (await core.listNamespacedPod({ namespace: fixture.ns })).items.length;
        return left === 0 || `${left} left`;
      }, { timeoutMs: 30_000 }).catch(() => undefined);
    }
    await fixture?.teardown();
    await core.deleteNode({ name: node }).catch(() => undefined);
  });

  async function watchUnavailable(): Promise<() => void> {
    const pods = new Map<string, V1Pod>();
    let whole = false;
    const controller = await new Watch(kc).watch(
      `/api/v1/namespaces/${fixture.ns}/pods`,
      { labelSelector: `app=${SET}` },
      (phase, pod: V1Pod) => {
        if (phase === 'DELETED') pods.delete(pod.metadata!.name!);
        else pods.set(pod.metadata!.name!, pod);
        const serving = [...pods.values()].filter((p) => !p.metadata?.deletionTimestamp && p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
        if (serving.length === 3) whole = true;
        // counted once the set was whole: before, its pods were still starting
        if (whole) mostUnavailable = Math.max(mostUnavailable, 3 - serving.length);
      },
      () => undefined,
    );
    return () => controller.abort();
  }

  /** The set at rest and the PDB's status caught up with three healthy pods: one disruption allowed. */
  async function settled(): Promise<void> {
    await setAtRest(apps, fixture.ns, SET);
    await waitUntil('the PDB to allow one disruption of three healthy pods', async () => {
      const pdb = await policy.readNamespacedPodDisruptionBudget({ name: SET, namespace: fixture.ns });
      const s = pdb.status;
      return (s?.observedGeneration === pdb.metadata?.generation && s?.currentHealthy === 3 && s?.disruptionsAllowed === 1) || `healthy ${s?.currentHealthy}, allowed ${s?.disruptionsAllowed}`;
    }, { timeoutMs: 60_000 });
  }

  /** The set's other pods, lowest ordinal first. */
  function replicas(primary: string): string[] {
    return [0, 1, 2].map((i) => `${SET}-${i}`).filter((p) => p !== primary);
  }

  async function evict(pod: string): Promise<{ code: number; message: string }> {
    try {
      await core.createNamespacedPodEviction({ name: pod, namespace: fixture.ns, body: { metadata: { name: pod, namespace: fixture.ns } } });
      return { code: 201, message: '' };
    } catch (err) {
      const e = err as { code?: number; body?: unknown };
      let message = typeof e.body === 'string' ? e.body : JSON.stringify(e.body);
      try {
        message = (JSON.parse(message) as { message?: string }).message ?? message;
      } catch {
        // not a Status: the text as it came
      }
      return { code: e.code ?? 0, message };
    }
  }

  it('through the eviction subresource: a replica at once, a second one refused by the PDB, the primary deferred by the guard (before the PDB) until the role moved', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    await settled();
    await app.makePrimary(`${SET}-0`);
    await waitUntil('db-0 primary', () => app.primary() === `${SET}-0` || `${app.primary()}`);

    // a replica: allowed by both at once; a second one while the first is gone: the PDB's own 429
    const replica = await evict(`${SET}-2`);
    const second = await evict(`${SET}-1`);
    expect(replica).toEqual({ code: 201, message: '' });
    expect(second.code).toBe(429);
    expect(second.message).toContain(PDB_MESSAGE);
    expect(second.message).not.toContain('rollguard');

    // the primary, while the budget is spent: the guard answers first (the API server asks the
    // webhook before the PDB), and keeps answering 429 until the label has moved; then the PDB
    // has its say until the budget is back, and the eviction goes through
    const answers: { code: number; message: string }[] = [];
    await waitUntil('the eviction of db-0 allowed once the role has moved and the budget is back', async () => {
      const answer = await evict(`${SET}-0`);
      answers.push(answer);
      return answer.code === 201 || `${answer.code} ${answer.message}`;
    }, { timeoutMs: 60_000, intervalMs: 1_000 });
    const guard = `admission webhook "evictions.rollguard.io" denied the request: ${guardMessage(`${SET}-0`)}`;
    expect(answers[0]).toEqual({ code: 429, message: guard });
    const denied = answers.slice(0, -1);
    expect(denied.every((a) => a.code === 429 && (a.message === guard || a.message.startsWith(PDB_MESSAGE))), JSON.stringify(denied)).toBe(true);
    // never the guard's again once the PDB has answered: the role had moved
    const firstPdb = denied.findIndex((a) => a.message.startsWith(PDB_MESSAGE));
    if (firstPdb >= 0) expect(denied.slice(firstPdb).every((a) => a.message.startsWith(PDB_MESSAGE))).toBe(true);
    expect(app.calls).toHaveLength(1);
    expect(app.primaryDeletions).toEqual([]);
    const reasons = (await rollguardEvents(core, fixture.ns, SET)).map((e) => e.reason).filter((r) => [...HANDOVER_REASONS, 'EvictionDeferred'].includes(r));
    expect(reasons).toEqual(['EvictionDeferred', 'HandoverStarted', 'HandoverSucceeded']);
    await settled();
    expect(mostUnavailable).toBe(1);
  });

  it('a pod claimed as the candidate of a handover attempt: its eviction deferred until the deadline, nothing requested', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    await settled();
    const primary = app.primary()!;
    const replica = replicas(primary)[0]!;
    const until = new Date(Date.now() + 30_000).toISOString();
    // as the leader writes it on the candidate just before its call
    await core.patchNamespacedPod({ name: replica, namespace: fixture.ns, body: [{ op: 'add', path: `/metadata/annotations/${CANDIDATE_PATH}`, value: until }] });
    const callsBefore = app.calls.length;
    expect(await evict(replica)).toEqual({
      code: 429,
      message: `admission webhook "evictions.rollguard.io" denied the request: rollguard: pod ${replica} is the candidate of a handover of the primary role of StatefulSet ${SET} in progress, retry`,
    });
    const read = await core.readNamespacedPod({ name: replica, namespace: fixture.ns });
    expect(read.metadata?.annotations?.['rollguard.io/handover']).toBeUndefined();
    expect(read.metadata?.deletionTimestamp).toBeUndefined();
    await core.patchNamespacedPod({ name: replica, namespace: fixture.ns, body: [{ op: 'remove', path: `/metadata/annotations/${CANDIDATE_PATH}` }] });
    expect((await core.readNamespacedPod({ name: replica, namespace: fixture.ns })).metadata?.annotations?.['rollguard.io/handover-candidate']).toBeUndefined();
    expect(app.calls.length).toBe(callsBefore);
  });

  it('a replica whose eviction the guard allowed (and the PDB refused) is not chosen as the candidate: the handover waits for a pod that stays', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    await settled();
    const primary = app.primary()!;
    // the lowest ordinal is the candidate rollguard would choose: evict the other one first,
    // so that the PDB refuses the lowest and it stays, marked by the guard's allowing it
    const [lowest, other] = replicas(primary);
    expect(await evict(other!)).toEqual({ code: 201, message: '' });
    const refused = await evict(lowest!);
    expect(refused.code).toBe(429);
    expect(refused.message).toContain(PDB_MESSAGE);

    const callsBefore = app.calls.length;
    await core.patchNamespacedPod({ name: primary, namespace: fixture.ns, body: [{ op: 'add', path: '/metadata/annotations/rollguard.io~1handover', value: 'requested' }] });
    await waitUntil(`the role moved from ${primary}`, () => (app.primary() !== undefined && app.primary() !== primary) || `${app.primary()}`, { timeoutMs: 60_000 });
    expect(app.primary()).toBe(other);
    const calls = app.calls.slice(callsBefore);
    expect(calls.map((c) => JSON.parse(c.body) as unknown)).toEqual([{ candidate: other }]);
    const started = (await rollguardEvents(core, fixture.ns, SET)).filter((e) => e.reason === 'HandoverStarted').map((e) => e.message);
    expect(started.at(-1)).toContain(`from ${primary} to ${other} `);
    // what told the leader: the guard's mark, set before it allowed the eviction
    const marked = await core.readNamespacedPod({ name: lowest!, namespace: fixture.ns });
    expect(Date.now() - Date.parse(marked.metadata?.annotations?.['rollguard.io/eviction-allowed'] ?? '')).toBeLessThan(60_000);
    expect(app.primaryDeletions).toEqual([]);
    await settled();
  });

  it('`kubectl drain` of the node: every pod evicted, the primary only after a handover, never more than one pod down', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    await settled();
    const primary = app.primary()!;
    const callsBefore = app.calls.length;
    const before = await core.listNamespacedPod({ namespace: fixture.ns, labelSelector: `app=${SET}` });
    expect(before.items.every((p) => p.spec?.nodeName === node)).toBe(true);
    const uids = before.items.map((p) => p.metadata!.uid!);

    const kubectl = path.join(controlPlaneBinaries(), 'kubectl');
    const drain = spawn(kubectl, ['drain', node, `--kubeconfig=${kubeconfigPath}`, `--pod-selector=app=${SET}`, '--ignore-daemonsets', '--timeout=150s'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    drain.stdout.on('data', (c: Buffer) => (output += c.toString()));
    drain.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => drain.on('exit', resolve));
    expect(code, output).toBe(0);
    expect(output).toContain(`node/${node} drained`);
    expect(output).toContain(`(will retry after 5s): admission webhook "evictions.rollguard.io" denied the request: ${guardMessage(primary)}`);
    // whether the drain also meets the PDB's own 429 depends on how fast the evicted pods come
    // back (a fresh-clone run saw none): the first test asserts that refusal through the eviction
    // subresource; here the bound is that never more than one pod was down (below)

    const after = await core.listNamespacedPod({ namespace: fixture.ns, labelSelector: `app=${SET}` });
    expect(after.items.map((p) => p.metadata!.uid!).filter((uid) => uids.includes(uid))).toEqual([]);
    expect(app.calls.length).toBeGreaterThan(callsBefore);
    expect(app.primaryDeletions).toEqual([]);
    await settled();
    expect(mostUnavailable).toBe(1);
  });
});
