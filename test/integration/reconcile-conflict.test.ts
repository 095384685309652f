import { Registry } from 'prom-client';
import pino from 'pino';
import type { V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitUntil } from '../env/wait.js';
import { Manager } from '../../src/manager.js';
import { createMetrics } from '../../src/metrics.js';
import { ENABLED_LABEL, annotationKey, type ObjectVersion } from '../../src/restarter/annotations.js';
import { createRestarterController } from '../../src/restarter/controller.js';
import { ConflictError } from '../../src/kube/api-status.js';
import { RestarterReconciler } from '../../src/restarter/reconciler.js';
import { EventRecorder, type EventSpec, type EventSubject } from '../../src/kube/events.js';

// A write by the set's owner between rollguard's read and its patch must never be lost.
describe('restarter and a concurrent owner write', () => {
  const { kc, core, apps } = testCluster();
  const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'warn' });
  let namespace: string;
  let kubelet: FakeKubelet;

  beforeAll(async () => {
    namespace = await createNamespace(core, 'reconcile-conflict');
    kubelet = new FakeKubelet(kc, namespace).start();
  });
  afterAll(async () => {
    await kubelet?.stop();
    await core.deleteNamespace({ name: namespace });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  const labels = { [ENABLED_LABEL]: 'true' };
  const read = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace });

  it('refuses a patch made from a stale read, then applies it on top of the owner\'s write', async () => {
    const set = statefulSet('stale', { replicas: 1, labels });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    await apps.createNamespacedStatefulSet({ namespace, body: set });
    const cm = await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    const version: ObjectVersion = { uid: cm.metadata!.uid!, resourceVersion: cm.metadata!.resourceVersion!, ignored: false };

    let cached = await read('stale');
    // The owner writes after rollguard's cache saw the set.
    await apps.patchNamespacedStatefulSet({
      name: 'stale',
      namespace,
      body: [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'registry.example/app:2' }],
    });

    const recorded: { subject: EventSubject; spec: EventSpec }[] = [];
    const reconciler = new RestarterReconciler({
      workload: () => cached,
      lookup: (kind, _ns, name) => (kind === 'ConfigMap' && name === 'cfg' ? version : undefined),
      cachesSynced: () => true,
      cacheProgress: () => '',
      readFresh: async () => ({ version, revision: '' }),
      minRestartIntervalMs: 0,
      patchWorkload: (_kind, ns, name, ops) => apps.patchNamespacedStatefulSet({ name, namespace: ns, body: ops }),
      events: { record: async (subject, spec) => void recorded.push({ subject, spec }) },
      restartLimiter: { take: async () => {} },
      logger,
      metrics: createMetrics(new Registry()),
    });
    const signal = new AbortController().signal;

    const err = await reconciler.reconcile(`StatefulSet/${namespace}/stale`, signal).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).message).toContain(`StatefulSet ${namespace}/stale changed since resourceVersion ${cached.metadata!.resourceVersion}`);
    expect((await read('stale')).spec!.template.metadata?.annotations?.[annotationKey('ConfigMap', 'cfg')]).toBeUndefined();
    expect(recorded).toEqual([]);

    // The retry reads what the watch brought in the meantime, as the controller's requeue does; the
    // StatefulSet controller's own status writes can make a retry conflict again, so it retries too.
    let result: unknown;
    for (let attempt = 0; attempt < 10 && result === undefined; attempt++) {
      cached = await read('stale');
      result = await reconciler.reconcile(`StatefulSet/${namespace}/stale`, signal).catch((e: unknown) => {
        if (e instanceof ConflictError) return undefined;
        throw e;
      });
    }
    expect(result).toEqual({ patched: 'ReferencesAnnotated', pacedMs: expect.any(Number) });
    const after = await read('stale');
    expect(after.spec!.template.spec!.containers[0]!.image).toBe('registry.example/app:2');
    expect(after.spec!.template.metadata!.annotations![annotationKey('ConfigMap', 'cfg')]).toBe(`${version.uid}/${version.resourceVersion}`);
    expect(recorded.map((r) => r.spec.reason)).toEqual(['ReferencesAnnotated']);
  });

  it('keeps both the owner\'s template change and the new annotation when they race', async () => {
    const metrics = createMetrics(new Registry());
    const controller = createRestarterController({ events: new EventRecorder({ kubeConfig: kc, component: 'rollguard', logger }), kubeConfig: kc, namespaces: [namespace], logger, metrics, debounceMs: 0, minRestartIntervalMs: 0 });
    const manager = new Manager(controller.runnables, logger);
    try {
      await manager.start();
      const set = statefulSet('race', { replicas: 1, labels });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'race-cfg' } }];
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'race-cfg' }, data: { a: '0' } } });
      await apps.createNamespacedStatefulSet({ namespace, body: set });
      const key = annotationKey('ConfigMap', 'race-cfg');
      await waitUntil('race annotated', async () => (await read('race')).spec?.template.metadata?.annotations?.[key] !== undefined || 'not yet');

      // Each round: the ConfigMap changes and, at once, the owner edits the template.
      let version = '';
      for (let round = 1; round <= 5; round++) {
        const [cm] = await Promise.all([
          core.patchNamespacedConfigMap({ name: 'race-cfg', namespace, body: [{ op: 'replace', path: '/data/a', value: String(round) }] }),
          apps.patchNamespacedStatefulSet({
            name: 'race',
            namespace,
            body: [{ op: 'replace', path: '/spec/template/spec/containers/0/env', value: [{ name: 'ROUND', value: String(round) }] }],
          }),
        ]);
        version = `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
      }
      await waitUntil('the last version annotated', async () => (await read('race')).spec?.template.metadata?.annotations?.[key] === version || 'not yet');
      const after = await read('race');
      expect(after.spec!.template.spec!.containers[0]!.env).toEqual([{ name: 'ROUND', value: '5' }]);
      expect(after.spec!.template.metadata!.annotations![key]).toBe(version);
    } finally {
      await manager.stop();
    }
  });
});
