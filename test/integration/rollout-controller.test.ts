import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Watch, type CoreV1Event, type V1Pod, type V1StatefulSet } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { Registry } from 'prom-client';
import { beforeEach, describe, it, type ExpectStatic } from 'vitest';
import { EventRecorder } from '../../src/kube/events.js';
import { createMetrics, type Metrics } from '../../src/metrics.js';
import type { Operation } from 'fast-json-patch';
import type { AdmissionRequest } from '../../src/admission/review.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { holdPartitionMutator } from '../../src/rollout/partition-hold-mutator.js';
import { createRolloutController, type RolloutController, type RolloutControllerOptions } from '../../src/rollout/controller.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE, HEALTH_URL_ANNOTATION } from '../../src/rollout/decision.js';
import { LAST_STEP_ANNOTATION } from '../../src/rollout/last-step.js';
import { REVISION_LABEL } from '../../src/rollout/pods.js';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';

// Fast settings so that a rollout takes seconds: the gates are the same, only the clocks are shorter.
const MIN_STEP_INTERVAL_MS = 200;
const DEFAULT_MIN_READY_SECONDS = 0;
/** Long enough that the pod being replaced at each step (missing, Pending) is not reported as a block. */
const BLOCKED_REPORT_AFTER_MS = 1_000;
/** Short, so that a block is looked at several times while a test watches for a second Event. */
const BLOCKED_RECHECK_MS = 300;
/** The issue asks for a blocked partition to be watched for at least this long. */
const HOLD_OBSERVATION_MS = 2_000;
const SAMPLE_INTERVAL_MS = 50;
const ROLLOUT_TIMEOUT_MS = 60_000;
const GOOD_IMAGE = 'registry.example/app:1';
const BAD_IMAGE = 'registry.example/app:does-not-exist';
const TEST_FINALIZER = 'test.rollguard.io/keep-terminating';

const { kc, core, apps } = testCluster();
const logger: Logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'silent' });

/** One namespace, one fake kubelet and one namespace-scoped controller (that can be restarted). */
class Scenario {
  controller: RolloutController | undefined;
  metrics: Metrics = createMetrics(new Registry());
  private abort: AbortController | undefined;
  private readonly samplers: Sampler[] = [];
  private readonly watches: PartitionWatch[] = [];
  private readonly finalized: string[] = [];
  private servers: http.Server[] = [];

  private constructor(
    readonly namespace: string,
    readonly kubelet: FakeKubelet,
  ) {}

  static async create(prefix: string): Promise<Scenario> {
    const namespace = await createNamespace(core, prefix);
    return new Scenario(namespace, new FakeKubelet(kc, namespace).start());
  }

  async startController(overrides: Partial<RolloutControllerOptions> = {}): Promise<RolloutController> {
    if (this.abort) throw new Error('a controller is already running in this scenario');
    this.metrics = createMetrics(new Registry());
    const controller = createRolloutController({
      kubeConfig: kc,
      namespaces: [this.namespace],
      minStepIntervalMs: MIN_STEP_INTERVAL_MS,
      defaultMinReadySeconds: DEFAULT_MIN_READY_SECONDS,
      blockedReportAfterMs: BLOCKED_REPORT_AFTER_MS,
      blockedRecheckMs: BLOCKED_RECHECK_MS,
      logger,
      metrics: this.metrics,
      events: new EventRecorder({ kubeConfig: kc, component: 'rollguard', instance: 'rollout-test', logger }),
      ...overrides,
    });
    this.abort = new AbortController();
    await controller.start(this.abort.signal);
    this.controller = controller;
    return controller;
  }

  async stopController(): Promise<void> {
    this.abort?.abort();
    await this.controller?.stopped();
    this.abort = undefined;
  }

  async createGatedSet(
    name: string,
    opts: { replicas: number; policy?: 'Parallel' | 'OrderedReady'; image?: string; annotations?: Record<string, string> },
  ): Promise<void> {
    const body = statefulSet(name, {
      replicas: opts.replicas,
      image: opts.image ?? GOOD_IMAGE,
      labels: { [ENABLED_LABEL]: 'true' },
      annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE, ...opts.annotations },
    });
    body.spec!.podManagementPolicy = opts.policy ?? 'Parallel';
    await apps.createNamespacedStatefulSet({ namespace: this.namespace, body });
  }

  readSet(name: string): Promise<V1StatefulSet> {
    return apps.readNamespacedStatefulSet({ name, namespace: this.namespace });
  }

  async pods(name: string): Promise<V1Pod[]> {
    return (await core.listNamespacedPod({ namespace: this.namespace, labelSelector: `app=${name}` })).items;
  }

  /** Every pod Ready on one revision and the partition held at replicas: the state before a template change. */
  async waitAtRest(name: string, revisionOtherThan?: string): Promise<V1StatefulSet> {
    return waitFor(
      `${name} at rest with its partition held at replicas`,
      async () => {
        const set = await this.readSet(name);
        const replicas = set.spec?.replicas ?? 1;
        const status = set.status;
        const partition = set.spec?.updateStrategy?.rollingUpdate?.partition;
        const pods = await this.pods(name);
        const allReady = pods.length === replicas && pods.every((pod) => isReady(pod) && revisionOf(pod) === status?.updateRevision);
        const settled =
          status?.observedGeneration === set.metadata?.generation &&
          status?.updateRevision !== undefined &&
          status.updateRevision !== revisionOtherThan &&
          status.currentRevision === status.updateRevision &&
          partition === replicas &&
          allReady;
        if (settled) return set;
        throw new Error(
          `partition ${partition}/${replicas}, revisions ${status?.currentRevision}→${status?.updateRevision}, pods ${describePods(pods)}; kubelet error: ${String(this.kubelet.lastError ?? 'none')}`,
        );
      },
      { timeoutMs: ROLLOUT_TIMEOUT_MS },
    );
  }

  async patchSet(name: string, ops: object[]): Promise<void> {
    await apps.patchNamespacedStatefulSet({ name, namespace: this.namespace, body: ops });
  }

  /** Events about the set, in the order they were created (a list is not ordered; resourceVersions of creates increase). */
  async events(name: string, reasons?: string[]): Promise<CoreV1Event[]> {
    const list = await core.listNamespacedEvent({ namespace: this.namespace, fieldSelector: `involvedObject.name=${name}` });
    return list.items
      .filter((event) => reasons === undefined || reasons.includes(event.reason ?? ''))
      .sort((a, b) => Number(a.metadata?.resourceVersion) - Number(b.metadata?.resourceVersion));
  }

  /**
   * Every partition value the set takes from now on, in order, from a watch of it: exact, where
   * polling could miss a value that lasted 50 ms, and Events fold a repeated message into one.
   */
  async watchPartitions(name: string): Promise<PartitionWatch> {
    const watch = new PartitionWatch();
    watch.abort = await new Watch(kc).watch(
      `/apis/apps/v1/namespaces/${this.namespace}/statefulsets`,
      { fieldSelector: `metadata.name=${name}` },
      (_type, object: V1StatefulSet) => watch.saw(object),
      (err: unknown) => watch.ended(err),
    );
    this.watches.push(watch);
    return watch;
  }

  sample(name: string): Sampler {
    const sampler = new Sampler(this, name);
    this.samplers.push(sampler);
    return sampler;
  }

  async addFinalizer(podName: string): Promise<void> {
    await core.patchNamespacedPod({
      name: podName,
      namespace: this.namespace,
      body: [{ op: 'add', path: '/metadata/finalizers', value: [TEST_FINALIZER] }],
    });
    this.finalized.push(podName);
  }

  async removeFinalizer(podName: string): Promise<void> {
    try {
      await core.patchNamespacedPod({ name: podName, namespace: this.namespace, body: [{ op: 'remove', path: '/metadata/finalizers' }] });
    } catch (err) {
      // gone already, or no finalizers left: nothing holds the pod
      const code = (err as { code?: number }).code;
      if (code !== 404 && code !== 422) throw err;
    }
  }

  /** A health endpoint on loopback whose status the test sets. */
  async healthServer(): Promise<{ url: string; setStatus(status: number): void; requests(): number }> {
    let status = 200;
    let requests = 0;
    const server = http.createServer((_req, res) => {
      requests++;
      res.writeHead(status).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    this.servers.push(server);
    const { port } = server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}/healthz`, setStatus: (s) => (status = s), requests: () => requests };
  }

  async close(): Promise<void> {
    for (const sampler of this.samplers) await sampler.stop();
    for (const watch of this.watches) watch.stop();
    await this.stopController();
    for (const pod of this.finalized) await this.removeFinalizer(pod);
    await this.kubelet.stop();
    for (const server of this.servers) await new Promise((resolve) => server.close(resolve));
    await core.deleteNamespace({ name: this.namespace });
  }
}

class PartitionWatch {
  readonly values: (number | undefined)[] = [];
  abort: AbortController | undefined;
  private error: unknown;
  private stopped = false;

  saw(set: V1StatefulSet): void {
    const partition = set.spec?.updateStrategy?.rollingUpdate?.partition;
    // status writes repeat the partition; each value counts once per run
    if (this.values.length === 0 || this.values[this.values.length - 1] !== partition) this.values.push(partition);
  }

  ended(err: unknown): void {
    if (!this.stopped) this.error = err ?? new Error('the watch ended early');
  }

  /** The values seen; throws if the watch ended on its own, since values could then be missing. */
  history(): (number | undefined)[] {
    if (this.error) throw new Error(`the partition watch ended before the test did: ${String(this.error)}`);
    return [...this.values];
  }

  stop(): void {
    this.stopped = true;
    this.abort?.abort();
  }
}

interface PodSample {
  uid: string;
  revision?: string;
  ready: boolean;
  terminating: boolean;
}

interface Sample {
  at: number;
  partition: number | undefined;
  updateRevision: string | undefined;
  lastStepAt: string | undefined;
  /** The controller's /status listed the set as a rollout in progress. */
  listedInStatus: boolean;
  /** by ordinal */
  pods: Map<number, PodSample>;
}

/**
 * Reads the set, then its pods, every SAMPLE_INTERVAL_MS: a history that invariants are checked
 * against. Reading the set first matters: a pod can only have moved on since the set was read.
 */
class Sampler {
  readonly samples: Sample[] = [];
  private stopped = false;
  private readonly loop: Promise<void>;
  lastError: unknown;

  constructor(
    private readonly scenario: Scenario,
    private readonly name: string,
  ) {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        const set = await this.scenario.readSet(this.name);
        const pods = await this.scenario.pods(this.name);
        this.samples.push({
          at: Date.now(),
          partition: set.spec?.updateStrategy?.rollingUpdate?.partition,
          updateRevision: set.status?.updateRevision,
          lastStepAt: set.metadata?.annotations?.[LAST_STEP_ANNOTATION],
          listedInStatus: this.scenario.controller?.status().rollouts.some((rollout) => rollout.name === this.name) ?? false,
          pods: new Map(
            pods.map((pod) => [
              ordinalOf(pod),
              { uid: pod.metadata!.uid!, revision: revisionOf(pod), ready: isReady(pod), terminating: pod.metadata?.deletionTimestamp != null },
            ]),
          ),
        });
      } catch (err) {
        this.lastError = err;
      }
      await new Promise((resolve) => setTimeout(resolve, SAMPLE_INTERVAL_MS));
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }

  /**
   * Every sample where the partition had stepped below replicas: each pod above the partition
   * (all stepped before the last step) runs the update revision and is Ready. That is "each
   * step only after the pod before it is Ready", checked at every moment seen.
   */
  assertStepsFollowReadiness(expect: ExpectStatic, replicas: number, newRevision: string, fromSample = 0): void {
    expect(fromSample).toBeGreaterThanOrEqual(0);
    for (const sample of this.samples.slice(fromSample)) {
      if (sample.partition === undefined || sample.partition >= replicas || sample.updateRevision !== newRevision) continue;
      for (let ordinal = sample.partition + 1; ordinal < replicas; ordinal++) {
        const pod = sample.pods.get(ordinal);
        expect(pod, `at partition ${sample.partition}, pod ${ordinal}`).toMatchObject({ revision: newRevision, ready: true, terminating: false });
      }
    }
  }
}

/** From the first sample to the last, in ms. */
function timeSpanned(samples: Sample[]): number {
  return samples.length < 2 ? 0 : samples[samples.length - 1]!.at - samples[0]!.at;
}

function isReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
}

function revisionOf(pod: V1Pod): string | undefined {
  return pod.metadata?.labels?.[REVISION_LABEL];
}

function ordinalOf(pod: V1Pod): number {
  const name = pod.metadata!.name!;
  return Number(name.slice(name.lastIndexOf('-') + 1));
}

function describePods(pods: V1Pod[]): string {
  return pods
    .map((pod) => `${pod.metadata?.name}@${revisionOf(pod)}${isReady(pod) ? '' : '(not ready)'}${pod.metadata?.deletionTimestamp ? '(terminating)' : ''}`)
    .join(' ');
}

/** The pods that each PartitionUpdate replaced, from its message ("… pod web-2 ready …"), in order. */
function steppedPods(events: CoreV1Event[]): string[] {
  return events.map((event) => /: pods? (\S+)/.exec(event.message ?? '')?.[1] ?? `unreadable: ${event.message}`);
}

function fromTo(events: CoreV1Event[]): string[] {
  return events.map((event) => /from (\d+) to (\d+)/.exec(event.message ?? '')?.slice(1, 3).join('→') ?? `unreadable: ${event.message}`);
}

/**
 * The ops the admission webhook adds to an UPDATE of the set that changes its image: the
 * real mutator, given the stored set as oldObject and the changed one as object.
 */
async function webhookHoldOps(scenario: Scenario, name: string, image: string): Promise<Operation[]> {
  const stored = await scenario.readSet(name);
  const oldObject = JSON.parse(JSON.stringify(stored)) as Record<string, unknown>;
  const object = JSON.parse(JSON.stringify(stored)) as V1StatefulSet;
  object.spec!.template.spec!.containers[0]!.image = image;
  const request: AdmissionRequest = {
    uid: 'test',
    kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
    resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
    operation: 'UPDATE',
    namespace: scenario.namespace,
    name,
    object,
    oldObject,
  };
  return holdPartitionMutator(request, object as unknown as Record<string, unknown>);
}

/** Waits for the rollout to the revision after `oldRevision` to finish: every pod on it, Ready, partition back at replicas. */
async function waitRolledOut(scenario: Scenario, name: string, oldRevision: string): Promise<V1StatefulSet> {
  const set = await scenario.waitAtRest(name, oldRevision);
  await waitFor(`the RolloutComplete Event of ${name}`, async () =>
    (await scenario.events(name, ['RolloutComplete'])).length > 0 ? true : undefined,
  );
  return set;
}

/** Watches for at least HOLD_OBSERVATION_MS and until `condition` holds (within the deadline). */
async function observeFor(what: string, condition: () => Promise<boolean | string>): Promise<void> {
  const since = Date.now();
  await waitUntil(
    what,
    async () => {
      const met = await condition();
      if (met !== true) return met;
      const watched = Date.now() - since;
      return watched >= HOLD_OBSERVATION_MS ? true : `watched only ${watched} ms`;
    },
    { timeoutMs: ROLLOUT_TIMEOUT_MS },
  );
}

describe.concurrent('health-gated rollouts (rollout controller against a real control plane)', () => {
  // every test makes its own namespace and closes it in `finally`, so they can run side by side
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('steps a template change 3→2→1→0 one Ready pod at a time, then holds at 3 again', async ({ expect }) => {
    const s = await Scenario.create('rollout-steps');
    try {
      const controller = await s.startController();
      await s.createGatedSet('web', { replicas: 3 });
      const before = await s.waitAtRest('web');
      const oldRevision = before.status!.updateRevision!;
      const partitions = await s.watchPartitions('web');
      const sampler = s.sample('web');
      await s.patchSet('web', [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }]);
      const after = await waitRolledOut(s, 'web', oldRevision);
      await sampler.stop();
      const newRevision = after.status!.updateRevision!;

      expect(partitions.history()).toEqual([3, 2, 1, 0, 3]);
      sampler.assertStepsFollowReadiness(expect, 3, newRevision);
      const events = await s.events('web', ['PartitionUpdate', 'RolloutComplete']);
      expect(events.map((e) => e.reason)).toEqual(['PartitionUpdate', 'PartitionUpdate', 'PartitionUpdate', 'RolloutComplete']);
      expect(events[0]!.message).toBe('Updated partition from 3 to 2: pod web-2 ready, web-0 and web-1 healthy');
      expect(fromTo(events)).toEqual(['3→2', '2→1', '1→0', '0→3']);
      expect(steppedPods(events.slice(0, 3))).toEqual(['web-2', 'web-1', 'web-0']);
      expect(await s.metrics.rolloutSteps.get()).toMatchObject({ values: [{ value: 3 }] });
      expect((await s.metrics.rolloutLastStep.get()).values[0]!.value).toBeGreaterThan(0);
      // /status listed the rollout while it ran, and lists nothing once it is done
      expect(sampler.samples.some((sample) => sample.listedInStatus)).toBe(true);
      expect(controller.status().rollouts).toEqual([]);
    } finally {
      await s.close();
    }
  });

  it('keeps the partition at 3 while pod 0 crash-loops, with one RolloutBlocked Event for it, and goes on once it recovers', async ({ expect }) => {
    const s = await Scenario.create('rollout-crashloop');
    try {
      const controller = await s.startController();
      await s.createGatedSet('web', { replicas: 3 });
      const before = await s.waitAtRest('web');
      const oldRevision = before.status!.updateRevision!;
      s.kubelet.setBehaviour('web-0', 'crashloop');
      await waitUntil('web-0 to crash-loop', async () => {
        const pod = await core.readNamespacedPod({ name: 'web-0', namespace: s.namespace });
        const reason = pod.status?.containerStatuses?.[0]?.state?.waiting?.reason;
        return reason === 'CrashLoopBackOff' ? true : `waiting reason ${reason}`;
      });

      const partitions = await s.watchPartitions('web');
      const sampler = s.sample('web');
      await s.patchSet('web', [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }]);
      const blockedOnWeb0 = async (): Promise<CoreV1Event[]> =>
        (await s.events('web', ['RolloutBlocked'])).filter((e) => e.message?.includes('pod web-0 is not ready (CrashLoopBackOff)'));
      // past the first Event, several rechecks (BLOCKED_RECHECK_MS) pass: none may record it again
      await observeFor('a RolloutBlocked Event naming web-0, the partition sampled over 2 s', async () => {
        if ((await blockedOnWeb0()).length === 0) return 'no RolloutBlocked Event for web-0 yet';
        const sampled = timeSpanned(sampler.samples);
        return sampled >= HOLD_OBSERVATION_MS ? true : `partition sampled over ${sampled} ms`;
      });
      const blocked = await blockedOnWeb0();
      expect(blocked).toHaveLength(1);
      expect(blocked[0]).toMatchObject({ type: 'Warning', count: 1 });
      expect(blocked[0]!.message).toBe('Rollout blocked at partition 3: pod web-0 is not ready (CrashLoopBackOff)');
      expect(timeSpanned(sampler.samples)).toBeGreaterThanOrEqual(HOLD_OBSERVATION_MS);
      expect(new Set(sampler.samples.map((sample) => sample.partition))).toEqual(new Set([3]));
      const status = controller.status().rollouts;
      expect(status).toHaveLength(1);
      expect(status[0]).toMatchObject({ name: 'web', partition: 3, replicas: 3 });
      expect(status[0]!.blockedOn).toBe(blocked[0]!.message);
      expect((await s.metrics.rolloutBlockedSeconds.get()).values[0]!.value).toBeGreaterThan(0);

      s.kubelet.setBehaviour('web-0', 'ready');
      await waitRolledOut(s, 'web', oldRevision);
      await sampler.stop();
      expect(partitions.history()).toEqual([3, 2, 1, 0, 3]);
      expect(await blockedOnWeb0()).toHaveLength(1);
    } finally {
      await s.close();
    }
  });

  // "webhook": the hold comes in the same write as the template, as the admission webhook makes it
  // (computed by the real mutator); "loop": only the controller holds, after the fact. With the
  // loop alone under Parallel, the StatefulSet controller may replace db-2 itself before the
  // hold lands (nothing stops it at partition 2), so rollguard's delete is not always needed there.
  const badImageCases = [
    { policy: 'Parallel', hold: 'webhook', rollbackByRollguard: true },
    { policy: 'OrderedReady', hold: 'webhook', rollbackByRollguard: true },
    { policy: 'Parallel', hold: 'loop', rollbackByRollguard: false },
    { policy: 'OrderedReady', hold: 'loop', rollbackByRollguard: true },
  ] as const;
  for (const { policy, hold, rollbackByRollguard } of badImageCases) {
    it(`stops at partition 2 on a bad image and lets the good template back through (${policy}, hold by ${hold})`, async ({ expect }) => {
      const s = await Scenario.create(`rollout-badimage-${policy.toLowerCase()}-${hold}`);
      try {
        await s.startController();
        s.kubelet.setImageBehaviour(BAD_IMAGE, 'imagepullbackoff');
        await s.createGatedSet('db', { replicas: 3, policy });
        const before = await s.waitAtRest('db');
        const goodRevision = before.status!.updateRevision!;
        const uids = new Map((await s.pods('db')).map((pod) => [pod.metadata!.name!, pod.metadata!.uid!]));
        const setImage = async (image: string): Promise<void> => {
          const ops: object[] = [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: image }];
          if (hold === 'webhook') ops.push(...(await webhookHoldOps(s, 'db', image)));
          await s.patchSet('db', ops);
        };

        const partitions = await s.watchPartitions('db');

        const sampler = s.sample('db');
        await setImage(BAD_IMAGE);
        const badPod = await waitFor('db-2 in ImagePullBackOff on the bad revision', async () => {
          const pod = await core.readNamespacedPod({ name: 'db-2', namespace: s.namespace });
          const reason = pod.status?.containerStatuses?.[0]?.state?.waiting?.reason;
          return revisionOf(pod) !== goodRevision && reason === 'ImagePullBackOff' ? pod : undefined;
        });
        await observeFor('the partition to stay at 2 for 2 s', async () => {
          const partitions = sampler.samples.filter((sample) => sample.at > Date.now() - HOLD_OBSERVATION_MS).map((sample) => sample.partition);
          return partitions.every((p) => p === 2) ? true : `partitions seen lately ${partitions.join(',')}`;
        });
        expect(partitions.history()).toEqual([3, 2]);

        // re-applying the good template; nobody deletes a pod by hand
        await setImage(GOOD_IMAGE);
        const after = await s.waitAtRest('db');
        await sampler.stop();
        expect(after.status!.updateRevision).toBe(goodRevision);
        const pods = await s.pods('db');
        const db2 = pods.find((pod) => pod.metadata!.name === 'db-2')!;
        expect(db2.metadata!.uid).not.toBe(badPod.metadata!.uid);
        expect(revisionOf(db2)).toBe(goodRevision);
        // the healthy pods were never touched
        for (const name of ['db-0', 'db-1']) expect(pods.find((pod) => pod.metadata!.name === name)!.metadata!.uid).toBe(uids.get(name));
        if (rollbackByRollguard) {
          // at partition 3 (or under OrderedReady, at any partition) the StatefulSet controller waits for db-2 to become Ready: only rollguard's delete unsticks it
          const rollbacks = await s.events('db', ['ForcedRollback']);
          expect(rollbacks).toHaveLength(1);
          expect(rollbacks[0]!.message).toMatch(/^Deleted pod db-2: stuck not ready \(ImagePullBackOff\) on revision \S+, which the template no longer has/);
        }
        // the good template went back to being held, never stepped again
        expect(await s.events('db', ['PartitionUpdate'])).toHaveLength(1);
      } finally {
        await s.close();
      }
    });
  }

  it('holds a second template change that comes mid-rollout, and rolls the newest one from the top', async ({ expect }) => {
    const s = await Scenario.create('rollout-midway');
    try {
      await s.startController({ minStepIntervalMs: 1_000 });
      await s.createGatedSet('web', { replicas: 3 });
      const before = await s.waitAtRest('web');
      const partitions = await s.watchPartitions('web');
      const sampler = s.sample('web');
      await s.patchSet('web', [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }]);
      const second = await waitFor('two steps (partition 1) of the first change', async () => {
        const set = await s.readSet('web');
        return set.spec?.updateStrategy?.rollingUpdate?.partition === 1 ? set : undefined;
      }, { timeoutMs: ROLLOUT_TIMEOUT_MS });
      // no webhook: at partition 1 the StatefulSet controller would replace web-2 and web-1 at once, ungated
      await s.patchSet('web', [{ op: 'replace', path: '/spec/template/metadata/annotations/example.com~1config', value: 'v3' }]);
      const after = await waitRolledOut(s, 'web', before.status!.updateRevision!);
      await sampler.stop();
      const newest = after.status!.updateRevision!;
      expect(newest).not.toBe(second.status!.updateRevision);

      const holds = await s.events('web', ['Hold']);
      expect(holds.map((e) => e.message)).toContain(
        'Updated partition from 1 to 3: the spec changed; held at replicas so that a template change rolls nothing until rollguard steps it',
      );
      // from the hold on, the newest template is stepped like any other: one Ready pod at a time
      // until the hold lands the newest template sits at partition 1, where the StatefulSet controller is free to act
      const held = sampler.samples.findIndex((sample) => sample.updateRevision === newest && sample.partition !== 1);
      // in that window (no webhook) the StatefulSet controller may already have replaced web-2, or web-2
      // and web-1, with the newest revision; rollguard then steps only over the pods left: after the hold,
      // the partition only goes down, to 0, and back to rest
      const history = partitions.history();
      expect(history.slice(0, 4)).toEqual([3, 2, 1, 3]);
      const steps = history.slice(4, -1);
      expect(history.at(-1)).toBe(3);
      expect(steps.at(-1)).toBe(0);
      expect(steps).toEqual([...new Set(steps)].sort((x, y) => (y ?? 0) - (x ?? 0)));
      expect(steps.every((partition) => partition !== undefined && partition >= 0 && partition <= 2)).toBe(true);
      sampler.assertStepsFollowReadiness(expect, 3, newest, held);
    } finally {
      await s.close();
    }
  });

  it('paces a kubectl rollout restart the same way and never steps while a higher pod is Terminating', async ({ expect }) => {
    const s = await Scenario.create('rollout-restart');
    try {
      await s.startController();
      await s.createGatedSet('web', { replicas: 3 });
      const before = await s.waitAtRest('web');
      const oldRevision = before.status!.updateRevision!;
      // without a kubelet a pod is deleted at once; a finalizer keeps web-2 Terminating for as long as the test likes
      await s.addFinalizer('web-2');
      const partitions = await s.watchPartitions('web');
      const sampler = s.sample('web');
      await s.patchSet('web', [
        { op: 'add', path: '/spec/template/metadata/annotations', value: { 'kubectl.kubernetes.io/restartedAt': new Date().toISOString() } },
      ]);
      await waitUntil('web-2 Terminating after the first step', async () => {
        const pod = await core.readNamespacedPod({ name: 'web-2', namespace: s.namespace });
        return pod.metadata?.deletionTimestamp ? true : 'web-2 not terminating yet';
      });
      const terminatingSamples = (): Sample[] => sampler.samples.filter((sample) => sample.pods.get(2)?.terminating);
      await observeFor('a RolloutBlocked Event for the Terminating web-2, sampled over 2 s', async () => {
        const events = await s.events('web', ['RolloutBlocked']);
        if (!events.some((e) => e.message === 'Rollout blocked at partition 2: pod web-2 is terminating')) return 'no RolloutBlocked Event for web-2';
        const sampled = timeSpanned(terminatingSamples());
        return sampled >= HOLD_OBSERVATION_MS ? true : `web-2 sampled Terminating over ${sampled} ms`;
      });
      await s.removeFinalizer('web-2');
      const after = await waitRolledOut(s, 'web', oldRevision);
      await sampler.stop();

      expect(partitions.history()).toEqual([3, 2, 1, 0, 3]);
      sampler.assertStepsFollowReadiness(expect, 3, after.status!.updateRevision!);
      const terminating = terminatingSamples();
      expect(timeSpanned(terminating)).toBeGreaterThanOrEqual(HOLD_OBSERVATION_MS);
      // pods are read after the set, so a sample may pair partition 3 (just before the step) with web-2 already
      // Terminating (deleted just after it); what may never be seen is a step past 2 while web-2 terminates
      for (const sample of terminating) expect(sample.partition).toBeGreaterThanOrEqual(2);
      const steps = await s.events('web', ['PartitionUpdate']);
      expect(steppedPods(steps)).toEqual(['web-2', 'web-1', 'web-0']);
    } finally {
      await s.close();
    }
  });

  it('steps pods 11 and 10 before pod 9 (ordinals compare as numbers)', async ({ expect }) => {
    const s = await Scenario.create('rollout-twelve');
    try {
      await s.startController();
      await s.createGatedSet('web', { replicas: 12 });
      const before = await s.waitAtRest('web');
      const partitions = await s.watchPartitions('web');
      const sampler = s.sample('web');
      await s.patchSet('web', [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }]);
      const after = await waitRolledOut(s, 'web', before.status!.updateRevision!);
      await sampler.stop();
      const steps = await s.events('web', ['PartitionUpdate']);
      expect(steppedPods(steps)).toEqual(Array.from({ length: 12 }, (_, i) => `web-${11 - i}`));
      expect(partitions.history()).toEqual([12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 12]);
      sampler.assertStepsFollowReadiness(expect, 12, after.status!.updateRevision!);
    } finally {
      await s.close();
    }
  });

  it('resumes after a restart mid-rollout: one step per pod, and the rate limit holds across the restart', async ({ expect }) => {
    const s = await Scenario.create('rollout-resume');
    // long enough that readiness is never what paces the steps: only the rate limit is
    const minStepIntervalMs = 1_500;
    try {
      await s.startController({ minStepIntervalMs });
      await s.createGatedSet('web', { replicas: 4 });
      const before = await s.waitAtRest('web');
      const partitions = await s.watchPartitions('web');
      const sampler = s.sample('web');
      await s.patchSet('web', [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }]);
      await waitUntil('two steps (partition 2)', async () => {
        const partition = (await s.readSet('web')).spec?.updateStrategy?.rollingUpdate?.partition;
        return partition === 2 ? true : `partition ${partition}`;
      }, { timeoutMs: ROLLOUT_TIMEOUT_MS });
      await s.stopController();
      // a new controller: nothing in memory, only what the cluster holds
      await s.startController({ minStepIntervalMs });
      const after = await waitRolledOut(s, 'web', before.status!.updateRevision!);
      await sampler.stop();

      const steps = await s.events('web', ['PartitionUpdate']);
      expect(steps).toHaveLength(4);
      expect(steppedPods(steps)).toEqual(['web-3', 'web-2', 'web-1', 'web-0']);
      expect(partitions.history()).toEqual([4, 3, 2, 1, 0, 4]);
      sampler.assertStepsFollowReadiness(expect, 4, after.status!.updateRevision!);
      // the annotation's times, one per step: consecutive steps (across the restart too) are an interval apart
      const stepTimes = [...new Set(sampler.samples.map((sample) => sample.lastStepAt).filter((t) => t !== undefined))].map((t) => Date.parse(t));
      expect(stepTimes).toHaveLength(4);
      for (let i = 1; i < stepTimes.length; i++) expect(stepTimes[i]! - stepTimes[i - 1]!).toBeGreaterThanOrEqual(minStepIntervalMs);
    } finally {
      await s.close();
    }
  });

  it('brings a pod below the partition, deleted mid-rollout, back on the old revision', async ({ expect }) => {
    const s = await Scenario.create('rollout-below');
    const minStepIntervalMs = 1_500;
    try {
      await s.startController({ minStepIntervalMs });
      await s.createGatedSet('web', { replicas: 3 });
      const before = await s.waitAtRest('web');
      const oldRevision = before.status!.updateRevision!;
      await s.patchSet('web', [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }]);
      await waitUntil('the first step (partition 2)', async () => {
        const partition = (await s.readSet('web')).spec?.updateStrategy?.rollingUpdate?.partition;
        return partition === 2 ? true : `partition ${partition}`;
      });
      const web0 = await core.readNamespacedPod({ name: 'web-0', namespace: s.namespace });
      await core.deleteNamespacedPod({ name: 'web-0', namespace: s.namespace });
      const { pod, partition } = await waitFor('web-0 to be recreated', async () => {
        const set = await s.readSet('web');
        const recreated = (await s.pods('web')).find((p) => p.metadata!.name === 'web-0' && p.metadata!.uid !== web0.metadata!.uid);
        return recreated ? { pod: recreated, partition: set.spec?.updateStrategy?.rollingUpdate?.partition } : undefined;
      });
      expect(partition).toBeGreaterThan(0);
      expect(revisionOf(pod)).toBe(oldRevision);
      await waitRolledOut(s, 'web', oldRevision);
      expect(steppedPods(await s.events('web', ['PartitionUpdate']))).toEqual(['web-2', 'web-1', 'web-0']);
    } finally {
      await s.close();
    }
  });

  it('steps only while the health URL answers 2xx', async ({ expect }) => {
    const s = await Scenario.create('rollout-health');
    try {
      const health = await s.healthServer();
      health.setStatus(503);
      await s.startController();
      await s.createGatedSet('web', { replicas: 2, annotations: { [HEALTH_URL_ANNOTATION]: health.url } });
      const before = await s.waitAtRest('web');
      const partitions = await s.watchPartitions('web');
      const sampler = s.sample('web');
      await s.patchSet('web', [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }]);
      await observeFor('a RolloutBlocked Event for the failing health URL, watched over 2 s', async () =>
        (await s.events('web', ['RolloutBlocked'])).some((e) => e.message?.includes(`health check ${health.url} failed (HTTP 503`))
          ? true
          : 'no RolloutBlocked Event for the health URL',
      );
      expect(new Set(sampler.samples.map((sample) => sample.partition))).toEqual(new Set([2]));
      const asked = health.requests();
      expect(asked).toBeGreaterThan(0);
      health.setStatus(200);
      await waitRolledOut(s, 'web', before.status!.updateRevision!);
      await sampler.stop();
      expect(partitions.history()).toEqual([2, 1, 0, 2]);
      const steps = await s.events('web', ['PartitionUpdate']);
      expect(steps[0]!.message).toMatch(/health check passed \(HTTP 200/);
    } finally {
      await s.close();
    }
  });

  it('keeps the partition equal to replicas across a scale-up at rest, replacing no pod', async ({ expect }) => {
    const s = await Scenario.create('rollout-scale');
    try {
      await s.startController();
      await s.createGatedSet('web', { replicas: 2 });
      const before = await s.waitAtRest('web');
      const uids = (await s.pods('web')).map((pod) => pod.metadata!.uid).sort();
      await s.patchSet('web', [{ op: 'replace', path: '/spec/replicas', value: 4 }]);
      const after = await s.waitAtRest('web');
      expect(after.spec!.updateStrategy!.rollingUpdate!.partition).toBe(4);
      expect(after.status!.updateRevision).toBe(before.status!.updateRevision);
      const kept = (await s.pods('web')).filter((pod) => ordinalOf(pod) < 2).map((pod) => pod.metadata!.uid).sort();
      expect(kept).toEqual(uids);
      expect(await s.events('web', ['PartitionUpdate', 'RolloutComplete'])).toEqual([]);
    } finally {
      await s.close();
    }
  });
});
