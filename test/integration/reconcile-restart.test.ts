import { Registry } from 'prom-client';
import pino from 'pino';
import type { V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { Manager } from '../../src/manager.js';
import { createMetrics } from '../../src/metrics.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { EventRecorder } from '../../src/kube/events.js';
import { createRestarterController, type RestarterController } from '../../src/restarter/controller.js';

const DEBOUNCE_MS = 300;
const SETS = ['alpha', 'beta', 'gamma'];

// What happens across a restart of rollguard: nothing rolls that did not change, nothing that did is missed.
describe('restarter across a restart of rollguard', () => {
  const { kc, core, apps } = testCluster();
  const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'warn' });
  let namespace: string;
  let kubelet: FakeKubelet;
  let running: { controller: RestarterController; manager: Manager; metrics: ReturnType<typeof createMetrics> } | undefined;

  async function startRollguard(): Promise<NonNullable<typeof running>> {
    const metrics = createMetrics(new Registry());
    const controller = createRestarterController({ events: new EventRecorder({ kubeConfig: kc, component: 'rollguard', logger }), minRestartIntervalMs: 0, kubeConfig: kc, namespaces: [namespace], logger, metrics, debounceMs: DEBOUNCE_MS });
    const manager = new Manager(controller.runnables, logger);
    running = { controller, manager, metrics };
    await manager.start();
    // The first pass is over once every set was reconciled and nothing is left to do.
    await waitUntil('the first pass over every set', async () => {
      const reconciles = (await metrics.reconcileDuration.get()).values.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;
      const { queued, inFlight } = controller.status();
      return (controller.cachesSynced() && reconciles >= SETS.length && queued === 0 && inFlight === 0) || `reconciles ${reconciles}, queued ${queued}, in flight ${inFlight}`;
    });
    return running;
  }

  async function stopRollguard(): Promise<void> {
    await running?.manager.stop();
    running = undefined;
  }

  beforeAll(async () => {
    namespace = await createNamespace(core, 'reconcile-restart');
    kubelet = new FakeKubelet(kc, namespace).start();
  });
  afterAll(async () => {
    await stopRollguard();
    await kubelet?.stop();
    await core.deleteNamespace({ name: namespace });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  const read = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace });
  const patches = async (): Promise<number> => (await running!.metrics.patches.get()).values.reduce((sum, v) => sum + v.value, 0);
  const generations = async (): Promise<number[]> => Promise.all(SETS.map(async (name) => (await read(name)).metadata!.generation!));

  async function converged(name: string): Promise<V1StatefulSet> {
    return waitFor(`${name} to converge`, async () => {
      const s = await read(name);
      const st = s.status;
      if (st?.observedGeneration === s.metadata?.generation && st?.readyReplicas === 1 && st?.currentRevision === st?.updateRevision) return s;
      throw new Error(`status ${JSON.stringify(st)}`);
    }, { timeoutMs: 60_000 });
  }

  it('patches nothing after a restart when nothing changed, and rolls once for a change made while it was down', async () => {
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'shared' }, data: { v: '1' } } });
    for (const name of SETS) {
      const set = statefulSet(name, { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'shared' } }];
      // gamma also references a Secret, for a reason to differ from the others.
      if (name === 'gamma') set.spec!.template.spec!.containers[0]!.envFrom.push({ secretRef: { name: 'gamma-secret', optional: true } });
      await apps.createNamespacedStatefulSet({ namespace, body: set });
    }

    await startRollguard();
    await waitUntil('every set annotated', async () => {
      const values = await Promise.all(SETS.map(async (n) => (await read(n)).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'shared')]));
      return values.every((v) => v !== undefined && v !== 'absent') || JSON.stringify(values);
    });
    for (const name of SETS) await converged(name);
    expect(await generations()).toEqual([2, 2, 2]);
    await stopRollguard();

    // A restart with nothing changed.
    await startRollguard();
    expect(await patches()).toBe(0);
    expect(await generations()).toEqual([2, 2, 2]);
    await stopRollguard();

    // A change while rollguard is down is caught by the first pass, exactly once.
    const cm = await core.patchNamespacedConfigMap({ name: 'shared', namespace, body: [{ op: 'replace', path: '/data/v', value: '2' }] });
    const version = `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
    const { controller } = await startRollguard();
    await waitUntil('every set on the new version', async () => {
      const values = await Promise.all(SETS.map(async (n) => (await read(n)).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'shared')]));
      return values.every((v) => v === version) || JSON.stringify(values);
    });
    for (const name of SETS) await converged(name);
    await waitUntil('idle', () => controller.status().queued === 0 && controller.status().inFlight === 0);
    expect(await patches()).toBe(SETS.length);
    expect(await generations()).toEqual([3, 3, 3]);
    // left running, it would race the next test's controller for the same sets
    await stopRollguard();
  });

  it('keeps the caches running while the workers stop and start again, as on a change of leader', async () => {
    const metrics = createMetrics(new Registry());
    const controller = createRestarterController({ events: new EventRecorder({ kubeConfig: kc, component: 'rollguard', logger }), minRestartIntervalMs: 0, kubeConfig: kc, namespaces: [namespace], logger, metrics, debounceMs: DEBOUNCE_MS });
    const patchCount = async (): Promise<number> => (await metrics.patches.get()).values.reduce((sum, v) => sum + v.value, 0);
    const caches = new AbortController();
    const firstTerm = new AbortController();
    const secondTerm = new AbortController();
    // The two parts started by hand, the way leader election drives them.
    await controller.caches.start(caches.signal);
    try {
      await controller.workers.start(firstTerm.signal);
      await waitUntil('the first term has looked at every set', async () => {
        const reconciles = (await metrics.reconcileDuration.get()).values.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;
        return (reconciles >= SETS.length && controller.status().queued === 0 && controller.status().inFlight === 0) || `reconciles ${reconciles}`;
      });
      expect(await patchCount()).toBe(0);
      firstTerm.abort();
      await controller.workers.stopped();

      const cm = await core.patchNamespacedConfigMap({ name: 'shared', namespace, body: [{ op: 'replace', path: '/data/v', value: '3' }] });
      const version = `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
      await waitUntil('the cache sees the change with no worker running', () => {
        const v = controller.lookup('ConfigMap', namespace, 'shared');
        return `${v?.uid}/${v?.resourceVersion}` === version || `${v?.uid}/${v?.resourceVersion}`;
      });
      // Not the leader: nothing queued, nothing patched.
      expect(controller.status()).toMatchObject({ queued: 0, inFlight: 0 });
      expect(await patchCount()).toBe(0);

      // Leader again: the first pass of the new term catches the change, once per set.
      await controller.workers.start(secondTerm.signal);
      await waitUntil('every set on the new version', async () => {
        const values = await Promise.all(SETS.map(async (n) => (await read(n)).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'shared')]));
        return values.every((v) => v === version) || JSON.stringify(values);
      });
      await waitUntil('idle', () => controller.status().queued === 0 && controller.status().inFlight === 0);
      expect(await patchCount()).toBe(SETS.length);
      expect(await generations()).toEqual([4, 4, 4]);
    } finally {
      secondTerm.abort();
      await controller.workers.stopped();
      caches.abort();
      await controller.caches.stopped();
    }
  });
});
