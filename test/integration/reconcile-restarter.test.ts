import { Registry } from 'prom-client';
import pino from 'pino';
import type { CoreV1Event, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { Manager } from '../../src/manager.js';
import { createMetrics } from '../../src/metrics.js';
import { ABSENT, ENABLED_LABEL, IGNORE_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { EventRecorder } from '../../src/kube/events.js';
import { createRestarterController, type RestarterController } from '../../src/restarter/controller.js';

// The reconcile loop on its own (no webhook), against a real API server and StatefulSet controller.
describe('restarter reconcile loop', () => {
  const { kc, core, apps } = testCluster();
  const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'warn' });
  let namespace: string;
  let kubelet: FakeKubelet;
  let controller: RestarterController;
  let manager: Manager;
  let metrics: ReturnType<typeof createMetrics>;

  beforeAll(async () => {
    namespace = await createNamespace(core, 'reconcile');
    kubelet = new FakeKubelet(kc, namespace).start();
    metrics = createMetrics(new Registry());
    // The default 5 s window, so that the burst test below is the real thing.
    controller = createRestarterController({ events: new EventRecorder({ kubeConfig: kc, component: 'rollguard', logger }), minRestartIntervalMs: 0, kubeConfig: kc, namespaces: [namespace], logger, metrics, maxRestartsPerSecond: 50 });
    manager = new Manager(controller.runnables, logger);
    await manager.start();
    await waitUntil('caches synced', () => controller.cachesSynced());
  });
  afterAll(async () => {
    await manager?.stop();
    await kubelet?.stop();
    await core.deleteNamespace({ name: namespace });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  const labels = { [ENABLED_LABEL]: 'true' };

  function withRefs(set: V1StatefulSet, refs: { configMaps?: string[]; secrets?: string[]; initSecrets?: string[] }): V1StatefulSet {
    const spec = set.spec!.template.spec!;
    const app = spec.containers[0]!;
    app.envFrom = (refs.configMaps ?? []).map((name) => ({ configMapRef: { name } }));
    spec.volumes = (refs.secrets ?? []).map((name) => ({ name: `s-${name}`, secret: { secretName: name } }));
    app.volumeMounts = (refs.secrets ?? []).map((name) => ({ name: `s-${name}`, mountPath: `/etc/${name}` }));
    if (refs.initSecrets) {
      spec.initContainers = [
        {
          name: 'init',
          image: 'registry.example/init:1',
          env: refs.initSecrets.map((name, i) => ({ name: `S${i}`, valueFrom: { secretKeyRef: { name, key: 'k' } } })),
        },
      ];
    }
    return set;
  }

  const read = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace });
  const templateAnnotations = async (name: string): Promise<Record<string, string>> =>
    (await read(name)).spec?.template.metadata?.annotations ?? {};

  async function configMap(name: string, data: Record<string, string>, extraLabels: Record<string, string> = {}): Promise<string> {
    const cm = await core.createNamespacedConfigMap({ namespace, body: { metadata: { name, labels: extraLabels }, data } });
    return `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
  }
  async function updateConfigMap(name: string, data: Record<string, string>): Promise<string> {
    const cm = await core.patchNamespacedConfigMap({ name, namespace, body: [{ op: 'replace', path: '/data', value: data }] });
    return `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
  }
  async function secret(name: string, value: string): Promise<string> {
    const s = await core.createNamespacedSecret({ namespace, body: { metadata: { name }, stringData: { k: value } } });
    return `${s.metadata!.uid}/${s.metadata!.resourceVersion}`;
  }
  async function updateSecret(name: string, value: string): Promise<string> {
    const s = await core.patchNamespacedSecret({
      name,
      namespace,
      body: [{ op: 'replace', path: '/data', value: { k: Buffer.from(value).toString('base64') } }],
    });
    return `${s.metadata!.uid}/${s.metadata!.resourceVersion}`;
  }

  async function converged(name: string, replicas: number): Promise<V1StatefulSet> {
    return waitFor(`${name} to converge`, async () => {
      const s = await read(name);
      const st = s.status;
      const done =
        st?.observedGeneration === s.metadata?.generation &&
        st?.readyReplicas === replicas &&
        st?.updatedReplicas === replicas &&
        st?.currentRevision === st?.updateRevision;
      if (done) return s;
      throw new Error(`generation ${s.metadata?.generation}, status ${JSON.stringify(st)}; kubelet: ${String(kubelet.lastError)}`);
    }, { timeoutMs: 60_000 });
  }

  async function eventsFor(name: string): Promise<CoreV1Event[]> {
    const list = await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name},involvedObject.kind=StatefulSet` });
    return list.items.filter((e) => e.source?.component === 'rollguard');
  }

  /** The loop has seen `version` of the object and has nothing left to do. */
  async function settled(kind: 'ConfigMap' | 'Secret', name: string, version: string): Promise<void> {
    await waitUntil(`the loop to see ${kind} ${name} at ${version} and go idle`, () => {
      const v = controller.lookup(kind, namespace, name);
      const seen = v ? `${v.uid}/${v.resourceVersion}` : ABSENT;
      const { queued, inFlight } = controller.status();
      return (seen === version && queued === 0 && inFlight === 0) || `saw ${seen}, queued ${queued}, in flight ${inFlight}`;
    }, { timeoutMs: 30_000 });
  }

  it('annotates a new set, which then converges on one revision, and says why in an Event', async () => {
    const cmVersion = await configMap('app-config', { a: '1' });
    const secretVersion = await secret('app-secret', 'one');
    await apps.createNamespacedStatefulSet({
      namespace,
      body: withRefs(statefulSet('web', { replicas: 3, labels }), { configMaps: ['app-config'], secrets: ['app-secret'] }),
    });
    await waitUntil('web annotated', async () => {
      const a = await templateAnnotations('web');
      return (a[annotationKey('ConfigMap', 'app-config')] === cmVersion && a[annotationKey('Secret', 'app-secret')] === secretVersion) || JSON.stringify(a);
    });
    const set = await converged('web', 3);
    expect(set.metadata?.generation).toBe(2);
    const pods = (await core.listNamespacedPod({ namespace, labelSelector: 'app=web' })).items;
    expect(pods.map((p) => p.metadata?.labels?.['controller-revision-hash'])).toEqual(Array(3).fill(set.status?.updateRevision));
    const events = await waitFor('an event on web', async () => ((await eventsFor('web')).length > 0 ? eventsFor('web') : undefined));
    expect(events.map((e) => e.reason)).toEqual(['ReferencesAnnotated']);
    expect(events[0]?.type).toBe('Normal');
    expect(events[0]?.message).toContain('ConfigMap app-config');
    expect(events[0]?.message).toContain('Secret app-secret');
  });

  it('writes "absent" for a ConfigMap that does not exist yet, then its version once it appears', async () => {
    await apps.createNamespacedStatefulSet({ namespace, body: withRefs(statefulSet('early', { replicas: 1, labels }), { configMaps: ['late-config'] }) });
    const key = annotationKey('ConfigMap', 'late-config');
    await waitUntil('early annotated absent', async () => (await templateAnnotations('early'))[key] === ABSENT || 'not yet');
    const version = await configMap('late-config', { x: 'y' });
    await waitUntil('early annotated with the new version', async () => (await templateAnnotations('early'))[key] === version || 'not yet');
    const events = await waitFor('appeared event', async () => {
      const found = (await eventsFor('early')).find((e) => e.reason === 'ConfigChanged');
      return found ?? undefined;
    });
    const rv = version.split('/')[1];
    expect(events.message).toBe(`ConfigMap late-config appeared (resourceVersion absent → ${rv})`);
    await converged('early', 1);
  });

  it('rolls on a referenced ConfigMap change, and only then', async () => {
    const before = await converged('web', 3);
    const generation = before.metadata!.generation!;
    const oldRv = before.spec!.template.metadata!.annotations![annotationKey('ConfigMap', 'app-config')]!.split('/')[1];

    // Neither an object that no set references, nor one labelled ignore, moves the set.
    await configMap('unreferenced', { a: '1' });
    const ignoredVersion = await configMap('ignored-config', { a: '1' }, { [IGNORE_LABEL]: 'true' });
    await apps.patchNamespacedStatefulSet({
      name: 'web',
      namespace,
      body: [{ op: 'add', path: '/spec/template/spec/containers/0/envFrom/-', value: { configMapRef: { name: 'ignored-config' } } }],
    });
    const afterRef = await converged('web', 3);
    expect(afterRef.spec!.template.metadata!.annotations![annotationKey('ConfigMap', 'ignored-config')]).toBeUndefined();
    const base = afterRef.metadata!.generation!;
    expect(base).toBe(generation + 1); // the owner's own edit
    const unreferencedVersion = await updateConfigMap('unreferenced', { a: '2' });
    await settled('ConfigMap', 'unreferenced', unreferencedVersion);
    const ignoredChanged = await updateConfigMap('ignored-config', { a: '2' });
    expect(ignoredChanged).not.toBe(ignoredVersion);
    await settled('ConfigMap', 'ignored-config', ignoredChanged);
    expect((await read('web')).metadata!.generation).toBe(base);

    const newVersion = await updateConfigMap('app-config', { a: '2' });
    await waitUntil('web rolled', async () => (await templateAnnotations('web'))[annotationKey('ConfigMap', 'app-config')] === newVersion || 'not yet');
    await settled('ConfigMap', 'app-config', newVersion);
    const after = await converged('web', 3);
    expect(after.metadata!.generation).toBe(base + 1);
    const changed = (await eventsFor('web')).filter((e) => e.reason === 'ConfigChanged');
    expect(changed.map((e) => e.message)).toEqual([`ConfigMap app-config changed (resourceVersion ${oldRv} → ${newVersion.split('/')[1]})`]);
  });

  it('rolls a set whose Secret is referenced only from an init container', async () => {
    await secret('init-secret', 'one');
    await apps.createNamespacedStatefulSet({ namespace, body: withRefs(statefulSet('init', { replicas: 2, labels }), { initSecrets: ['init-secret'] }) });
    const key = annotationKey('Secret', 'init-secret');
    await waitUntil('init annotated', async () => (await templateAnnotations('init'))[key] !== undefined || 'not yet');
    const generation = (await converged('init', 2)).metadata!.generation!;
    const version = await updateSecret('init-secret', 'two');
    await waitUntil('init rolled', async () => (await templateAnnotations('init'))[key] === version || 'not yet');
    await settled('Secret', 'init-secret', version);
    expect((await converged('init', 2)).metadata!.generation).toBe(generation + 1);
  });

  it('folds a burst of 20 changes to one Secret within the debounce window into one rollout', async () => {
    const before = await converged('web', 3);
    const generation = before.metadata!.generation!;
    const patchesBefore = await patchCount(metrics);
    const started = Date.now();
    // all twenty in flight at once: one after another they took 8.7 s on a loaded machine, longer
    // than the window, where two rollouts are right
    const versions = await Promise.all(Array.from({ length: 20 }, (_, i) => updateSecret('app-secret', `burst-${i}`)));
    const last = versions.reduce((newest, v) => (Number(v.split('/')[1]) > Number(newest.split('/')[1]) ? v : newest));
    // The window is 5 s; the burst takes a fraction of it.
    expect(Date.now() - started).toBeLessThan(4_000);
    await waitUntil('web rolled to the last version', async () => (await templateAnnotations('web'))[annotationKey('Secret', 'app-secret')] === last || 'not yet');
    await settled('Secret', 'app-secret', last);
    expect((await converged('web', 3)).metadata!.generation).toBe(generation + 1);
    expect((await patchCount(metrics)) - patchesBefore).toBe(1);
  });
});

async function patchCount(metrics: ReturnType<typeof createMetrics>): Promise<number> {
  return (await metrics.patches.get()).values.reduce((sum, v) => sum + v.value, 0);
}
