import { AdmissionregistrationV1Api, type V1Pod, type V1StatefulSet } from '@kubernetes/client-node';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { FakeReplicatedApp } from '../../src/dev/fake-replicated-app.js';
import { WANTED_REPLICAS_ANNOTATION } from '../../src/rollout/scale-down-hold.js';
import {
  HANDOVER_HTTP_ANNOTATION,
  HANDOVER_INTERVAL_ANNOTATION,
  HANDOVER_ON_FAILURE_ANNOTATION,
  HANDOVER_RETRIES_ANNOTATION,
  HANDOVER_TIMEOUT_ANNOTATION,
  PRIMARY_SELECTOR_ANNOTATION,
} from '../../src/handover/settings.js';
import { HANDOVER_STATE_ANNOTATION } from '../../src/handover/state.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { freePort } from '../env/ports.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';

const ARGS = ['--rollout-min-step-interval=0s', '--rollout-min-ready=0s', '--debounce=0s', '--shutdown-delay=0s'];
const SCALE_REASONS = ['ScaleDownHeld', 'ScaledDown', 'ScaleDownDropped', 'HandoverStarted', 'HandoverSucceeded', 'HandoverFailed', 'HandoverSkipped', 'PrimaryScaledDown'];

// Scale-down of a handover-enabled set: the StatefulSet controller deletes scaled-down pods
// directly (no eviction), so the webhook holds the old replicas and records the wanted count,
// and rollguard (a real process) hands the role over to a pod that stays before it applies it.
// What a user checks: which pods were deleted while labelled primary, replicas, the Events.
describe('scale-down of a handover-enabled StatefulSet (rollguard as a process, fake replicated application)', () => {
  const { core, apps, kc, kubeconfigPath } = testCluster();
  let fixture: RollguardFixture;
  const apps_: FakeReplicatedApp[] = [];

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'scaledown', webhook: 'registered', args: ARGS, kubelet: { podIps: 'distinct' } });
  });

  afterAll(async () => {
    for (const app of apps_) await app.stop();
    await fixture?.teardown();
  });

  const readSet = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace: fixture.ns });

  /** A gated set of `replicas` with a handover on its own port and the app; at rest with `primary` labelled. */
  async function dbSet(name: string, primary: number, annotations: Record<string, string> = {}, replicas = 3): Promise<FakeReplicatedApp> {
    const port = await freePort();
    const app = await new FakeReplicatedApp(kc, fixture.ns, { setName: name, port }).start();
    apps_.push(app);
    const body = statefulSet(name, {
      replicas,
      labels: { [ENABLED_LABEL]: 'true' },
      annotations: {
        [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE,
        [PRIMARY_SELECTOR_ANNOTATION]: 'role=primary',
        [HANDOVER_HTTP_ANNOTATION]: `POST :${port}/switchover`,
        [HANDOVER_INTERVAL_ANNOTATION]: '1s',
        [HANDOVER_TIMEOUT_ANNOTATION]: '5s',
        ...annotations,
      },
    });
    body.spec!.podManagementPolicy = 'Parallel';
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body });
    await settled(name, replicas);
    await app.makePrimary(`${name}-${primary}`);
    await waitUntil(`${name}-${primary} labelled primary in the app's view`, () => app.primary() === `${name}-${primary}` || `${app.primary()}`);
    return app;
  }

  /** The set at `replicas`, its pods that many and Ready, the partition held there, no record left. */
  async function settled(name: string, replicas: number, timeoutMs = 60_000): Promise<void> {
    await waitUntil(
      `${name} settled at ${replicas} replicas`,
      async () => {
        const set = await readSet(name);
        const s = set.status;
        const partition = set.spec?.updateStrategy?.rollingUpdate?.partition;
        const pods = await setPods(name);
        const ok =
          set.spec?.replicas === replicas &&
          s?.observedGeneration === set.metadata?.generation &&
          s?.readyReplicas === replicas &&
          s?.replicas === replicas &&
          pods.length === replicas &&
          partition === replicas &&
          set.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION] === undefined;
        return ok || `replicas ${set.spec?.replicas} (wanted ${set.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION]}), partition ${partition}, ready ${s?.readyReplicas}, pods ${pods.map((p) => p.metadata?.name).join(',')}`;
      },
      { timeoutMs, intervalMs: 200 },
    );
  }

  async function setPods(name: string): Promise<V1Pod[]> {
    const list = await core.listNamespacedPod({ namespace: fixture.ns });
    return list.items.filter((p) => p.metadata?.name?.startsWith(`${name}-`) && !p.metadata.deletionTimestamp);
  }

  /** The pods labelled primary, read from the API (the app's own record is app.primary()). */
  async function labelledPrimaries(name: string): Promise<string[]> {
    return (await setPods(name)).filter((p) => p.metadata?.labels?.role === 'primary').map((p) => p.metadata!.name!);
  }

  /** rollguard's Events on the set, oldest first, of the reasons a scale-down makes. */
  async function events(name: string): Promise<{ reason: string; message: string; type: string }[]> {
    const list = await core.listNamespacedEvent({ namespace: fixture.ns, fieldSelector: `involvedObject.name=${name},involvedObject.kind=StatefulSet` });
    return list.items
      .filter((e) => e.source?.component === 'rollguard' && SCALE_REASONS.includes(e.reason ?? ''))
      .sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : 1))
      .map((e) => ({ reason: e.reason ?? '', message: e.message ?? '', type: e.type ?? '' }));
  }

  const scaleBySpec = async (name: string, replicas: number): Promise<V1StatefulSet> =>
    apps.patchNamespacedStatefulSet({ name, namespace: fixture.ns, body: [{ op: 'replace', path: '/spec/replicas', value: replicas }] });

  it('a spec update from 3 to 2 with the primary on ordinal 2: held in the same write, the role moves to a pod that stays, then 2 replicas', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const app = await dbSet('db', 2);
    const stored = await scaleBySpec('db', 2);
    // the write itself stopped nothing: the old replicas, the wanted count recorded
    expect([stored.spec?.replicas, stored.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION]]).toEqual([3, '2']);
    await settled('db', 2);
    expect(app.primaryDeletions).toEqual([]);
    expect(app.calls).toHaveLength(1);
    expect(['db-0', 'db-1']).toContain(app.primary());
    expect(await labelledPrimaries('db')).toEqual([app.primary()]);
    const seen = await events('db');
    expect(seen.map((e) => e.reason)).toEqual(['ScaleDownHeld', 'HandoverStarted', 'HandoverSucceeded', 'ScaledDown']);
    expect(seen[0]!.message).toBe('Scale-down from 3 to 2 replicas held at 3 until no pod it removes (db-2) is the primary: a scale-down deletes pods without an eviction');
    expect(seen[1]!.message).toContain('Handing the primary role over from db-2 to db-0');
    expect(seen[1]!.message).toContain('before a scale-down removes pod db-2');
    expect(seen[3]!.message).toBe('Scaled down from 3 to 2 replicas (rollguard.io/wanted-replicas): no pod it removes (db-2) is the primary');
    expect((await readSet('db')).metadata?.annotations?.[HANDOVER_STATE_ANNOTATION]).toBeUndefined();
  });

  it('a scale-down that removes no primary is applied without a handover', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const app = await dbSet('keep', 0);
    await scaleBySpec('keep', 2);
    await settled('keep', 2);
    expect(app.calls).toEqual([]);
    expect(app.primary()).toBe('keep-0');
    expect((await events('keep')).map((e) => e.reason)).toEqual(['ScaleDownHeld', 'ScaledDown']);
  });

  it('a failing handover keeps the scale-down held with a Warning and /status says so; raising replicas again drops it', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const app = await dbSet('stuck', 2, { [HANDOVER_RETRIES_ANNOTATION]: '2' });
    app.setMode('fail');
    await scaleBySpec('stuck', 2);
    let warning = '';
    await waitUntil('a Warning that the scale-down stays held', async () => {
      warning = (await events('stuck')).find((e) => e.type === 'Warning' && e.message.includes('the scale-down stays held'))?.message ?? '';
      return warning !== '' || 'not yet';
    }, { timeoutMs: 60_000 });
    expect(warning).toContain('every attempt failed: the scale-down stays held, pod stuck-2 stays primary and is not removed');
    const set = await readSet('stuck');
    expect([set.spec?.replicas, set.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION]]).toEqual([3, '2']);
    expect((await setPods('stuck')).map((p) => p.metadata?.name).sort()).toEqual(['stuck-0', 'stuck-1', 'stuck-2']);
    const status = (await fixture.rollguard.status()) as { rollouts: { name: string; wanted_replicas?: number; handover?: { from: string; paused: boolean } }[] };
    expect(status.rollouts.find((r) => r.name === 'stuck')).toMatchObject({ wanted_replicas: 2, handover: { from: 'stuck-2', paused: true } });
    expect(app.primaryDeletions).toEqual([]);
    // the user changes their mind: back at 3 (and the webhook drops the record), the paused handover ends
    const raised = await scaleBySpec('stuck', 4);
    expect([raised.spec?.replicas, raised.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION]]).toEqual([4, undefined]);
    await settled('stuck', 4);
    await waitUntil('the handover state removed', async () => (await readSet('stuck')).metadata?.annotations?.[HANDOVER_STATE_ANNOTATION] === undefined || 'still there', { timeoutMs: 30_000 });
    expect(app.primary()).toBe('stuck-2');
    expect((await events('stuck')).map((e) => e.reason).at(-1)).toBe('HandoverSkipped');
  });

  it('handover-on-failure: proceed: every attempt failed, the scale-down goes on with a Warning, no PrimaryScaledDown besides', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const app = await dbSet('onward', 2, { [HANDOVER_RETRIES_ANNOTATION]: '1', [HANDOVER_ON_FAILURE_ANNOTATION]: 'proceed' });
    app.setMode('fail');
    await scaleBySpec('onward', 2);
    await settled('onward', 2);
    const seen = await events('onward');
    // a HandoverSkipped came after ScaledDown when rollguard saw the set before the pod was gone
    expect(seen.map((e) => e.reason), JSON.stringify(seen.map((e) => `${e.reason}: ${e.message}`))).toEqual(['ScaleDownHeld', 'HandoverStarted', 'HandoverFailed', 'ScaledDown']);
    expect(seen[2]!.message).toContain('every attempt failed: scaling down, removing onward-2 anyway (handover-on-failure: proceed)');
    expect(app.calls.map((c) => c.answered)).toEqual([500]);
  });

  it('`kubectl scale` from 3 to 2 with the primary on ordinal 2: held at the scale subresource, handed over, then 2 replicas; a server dry run records nothing', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const app = await dbSet('scaled', 2);
    const kubectl = (...args: string[]): string =>
      execFileSync(path.join(controlPlaneBinaries(), 'kubectl'), [`--kubeconfig=${kubeconfigPath}`, '-n', fixture.ns, ...args], { encoding: 'utf8' });
    kubectl('scale', 'statefulset/scaled', '--replicas=1', '--dry-run=server');
    expect((await readSet('scaled')).metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION], 'a dry run has no side effects').toBeUndefined();
    kubectl('scale', 'statefulset/scaled', '--replicas=2');
    const held = await readSet('scaled');
    expect([held.spec?.replicas, held.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION]]).toEqual([3, '2']);
    await settled('scaled', 2);
    expect(app.primaryDeletions).toEqual([]);
    expect(['scaled-0', 'scaled-1']).toContain(app.primary());
    expect(await labelledPrimaries('scaled')).toEqual([app.primary()]);
    expect((await events('scaled')).map((e) => e.reason)).toEqual(['ScaleDownHeld', 'HandoverStarted', 'HandoverSucceeded', 'ScaledDown']);
  });

  it("an autoscaler's repeated PUTs of the Scale (with its resourceVersion) converge: held, handed over, then 2 replicas", async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const app = await dbSet('hpa', 2);
    const answers: number[] = [];
    // as the HPA controller does each sync: read the Scale, write the desired count when it differs
    await waitUntil('the autoscaler to see 2 replicas', async () => {
      const current = await apps.readNamespacedStatefulSetScale({ name: 'hpa', namespace: fixture.ns });
      if (current.spec?.replicas === 2) return true;
      try {
        await apps.replaceNamespacedStatefulSetScale({ name: 'hpa', namespace: fixture.ns, body: { ...current, spec: { replicas: 2 } } });
        answers.push(200);
      } catch (err) {
        answers.push((err as { code?: number }).code ?? 0);
      }
      return `scale at ${current.spec?.replicas}, answers ${answers.join(',')}`;
    }, { timeoutMs: 60_000, intervalMs: 300 });
    await settled('hpa', 2);
    expect(app.primaryDeletions).toEqual([]);
    expect(['hpa-0', 'hpa-1']).toContain(app.primary());
    // a write that changed the set's record under the PUT's resourceVersion is a 409 the next sync repeats
    expect(answers.every((code) => code === 200 || code === 409), answers.join(',')).toBe(true);
    expect((await events('hpa')).map((e) => e.reason)).toEqual(['ScaleDownHeld', 'HandoverStarted', 'HandoverSucceeded', 'ScaledDown']);
  });

  it('the webhook missed the scale-down (unreachable, failurePolicy Ignore): the primary goes without a handover, recorded as a Warning', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    const app = await dbSet('missed', 2);
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    const registered = await admission.readMutatingWebhookConfiguration({ name: fixture.ns });
    const dead = await freePort();
    const away = (url: string | undefined): string => (url ?? '').replace(/127\.0\.0\.1:\d+/, `127.0.0.1:${dead}`);
    await admission.replaceMutatingWebhookConfiguration({
      name: fixture.ns,
      body: { ...registered, webhooks: registered.webhooks!.map((w) => ({ ...w, clientConfig: { ...w.clientConfig, url: away(w.clientConfig.url) } })) },
    });
    try {
      await waitUntil('the scale-down stored unheld', async () => {
        const stored = await scaleBySpec('missed', 2).catch(() => undefined);
        return stored?.spec?.replicas === 2 || `replicas ${stored?.spec?.replicas}`;
      });
    } finally {
      const now = await admission.readMutatingWebhookConfiguration({ name: fixture.ns });
      await admission.replaceMutatingWebhookConfiguration({ name: fixture.ns, body: { ...now, webhooks: now.webhooks!.map((w, i) => ({ ...w, clientConfig: { ...w.clientConfig, url: registered.webhooks![i]!.clientConfig.url } })) } });
    }
    let warning = '';
    await waitUntil('a PrimaryScaledDown Warning', async () => {
      warning = (await events('missed')).find((e) => e.reason === 'PrimaryScaledDown')?.message ?? '';
      return warning !== '' || 'none yet';
    }, { timeoutMs: 30_000 });
    expect(warning).toContain('Scaled down to 2 replicas: pod missed-2, the primary, is removed by the StatefulSet controller without a handover');
    expect(app.calls).toEqual([]);
  });

  it('the webhook registered for statefulsets/scale with the objectSelector of the set does not see kubectl scale; without one it does', async () => {
    printProcessLogsOnFailure([fixture.rollguard]);
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body: statefulSet('probe', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } }) });
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    const name = `${fixture.ns}-scale-probe`;
    const caBundle = (await admission.readMutatingWebhookConfiguration({ name: fixture.ns })).webhooks?.[0]?.clientConfig.caBundle;
    const hook = (selected: boolean) => ({
      name: 'scale-probe.rollguard.io',
      clientConfig: { url: `https://127.0.0.1:${fixture.rollguard.webhookPort}/mutate`, caBundle },
      rules: [{ operations: ['UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: ['statefulsets/scale'] }],
      ...(selected ? { objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } } } : {}),
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': fixture.ns } },
      failurePolicy: 'Ignore',
      sideEffects: 'None',
      admissionReviewVersions: ['v1'],
      timeoutSeconds: 5,
    });
    const scaleReviews = async (): Promise<number> => {
      const text = await (await fetch(`${fixture.rollguard.adminUrl}/metrics`)).text();
      return Number(/rollguard_admission_reviews_total\{result="unchanged",kind="other"\} (\d+)/.exec(text)?.[1] ?? 0);
    };
    const kubectlScale = (replicas: number): void => {
      execFileSync(path.join(controlPlaneBinaries(), 'kubectl'), [`--kubeconfig=${kubeconfigPath}`, '-n', fixture.ns, 'scale', 'statefulset/probe', `--replicas=${replicas}`], { encoding: 'utf8' });
    };
    await admission.createMutatingWebhookConfiguration({ body: { metadata: { name }, webhooks: [hook(true)] } });
    try {
      const before = await scaleReviews();
      kubectlScale(2);
      await waitUntil('probe scaled to 2', async () => (await readSet('probe')).spec?.replicas === 2 || 'not yet');
      expect(await scaleReviews(), 'a Scale carries no labels: the objectSelector never matches it').toBe(before);
      await admission.replaceMutatingWebhookConfiguration({ name, body: { ...(await admission.readMutatingWebhookConfiguration({ name })), webhooks: [hook(false)] } });
      await waitUntil('a kubectl scale reviewed by rollguard once the entry has no objectSelector', async () => {
        kubectlScale((await readSet('probe')).spec?.replicas === 1 ? 2 : 1);
        return (await scaleReviews()) > before || 'no review yet';
      }, { timeoutMs: 20_000, intervalMs: 1_000 });
    } finally {
      await admission.deleteMutatingWebhookConfiguration({ name }).catch(() => undefined);
    }
  });
});
