import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import type { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import type { RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const CM_KEY = 'configmap.rollguard.io/app-config';
const SECRET_KEY = 'secret.rollguard.io/app-secret';

/** A labelled set that reads app-config as a volume and app-secret through envFrom. */
function webSet(name: string, replicas = 3): V1StatefulSet {
  const set = statefulSet(name, { replicas, labels: { [ENABLED_LABEL]: 'true' } });
  const pod = set.spec!.template.spec!;
  pod.containers[0]!.envFrom = [{ secretRef: { name: 'app-secret' } }];
  pod.containers[0]!.volumeMounts = [{ name: 'config', mountPath: '/etc/app' }];
  pod.volumes = [{ name: 'config', configMap: { name: 'app-config' } }];
  return set;
}

// The restarter with its webhook deployed: rollguard as a real process, registered by URL.
describe('restarter with the webhook', () => {
  const { core, apps } = testCluster();
  let fixture: RollguardFixture;
  let ns: string;
  let rollguard: RollguardProcess;
  let kubelet: FakeKubelet;
  /** every pod uid the API ever reported deleted, per set */
  const deletedPods = new Map<string, Set<string>>();
  let podWatch: NodeJS.Timeout | undefined;
  let watching = true;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'rw', webhook: 'registered', args: ['--debounce=1s'] });
    ({ ns, rollguard, kubelet } = fixture);
    // remember pod uids so a test can tell whether any pod was ever replaced
    const seen = new Map<string, string>();
    const poll = async (): Promise<void> => {
      const pods = (await core.listNamespacedPod({ namespace: ns })).items;
      const now = new Set(pods.map((p) => p.metadata!.uid!));
      for (const [uid, set] of seen) {
        if (!now.has(uid)) {
          if (!deletedPods.has(set)) deletedPods.set(set, new Set());
          deletedPods.get(set)!.add(uid);
          seen.delete(uid);
        }
      }
      for (const p of pods) seen.set(p.metadata!.uid!, ownerName(p));
      if (watching) podWatch = setTimeout(() => void poll().catch(() => undefined), 100);
    };
    await poll();
  });

  afterAll(async () => {
    watching = false;
    clearTimeout(podWatch);
    await fixture?.teardown();
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  async function readySet(name: string, generation?: number): Promise<V1StatefulSet> {
    return waitFor(`${name} Ready on one revision${generation ? ` at generation ${generation}` : ''}`, async () => {
      const s = await apps.readNamespacedStatefulSet({ name, namespace: ns });
      const st = s.status;
      const done =
        st?.observedGeneration === s.metadata?.generation &&
        st?.readyReplicas === s.spec?.replicas &&
        st?.updatedReplicas === s.spec?.replicas &&
        st?.currentRevision === st?.updateRevision &&
        (generation === undefined || s.metadata?.generation === generation);
      if (done) return s;
      throw new Error(`generation ${s.metadata?.generation}, status ${JSON.stringify(st)}`);
    }, { timeoutMs: 60_000 });
  }

  it('stores a new set already annotated: generation stays 1 and no pod is ever replaced', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1' } } });
    await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'app-secret' }, stringData: { p: 'x' } } });
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: webSet('first') });
    // the object the API server stored (the response of the create) already carries them
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns });
    const annotations = created.spec!.template.metadata!.annotations!;
    expect(annotations[CM_KEY]).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    expect(annotations[SECRET_KEY]).toMatch(/^[0-9a-f-]{36}\/\d+$/);
    const set = await readySet('first');
    expect(set.metadata!.generation).toBe(1);
    // the loop has looked at it as well (its first pass, and every event since) and left it alone
    await waitUntil('the loop idle', async () => {
      const st = await rollguard.status();
      const r = st.reconcile as { queued: number; in_flight: number };
      return (r.queued === 0 && r.in_flight === 0) || JSON.stringify(r);
    });
    expect((await apps.readNamespacedStatefulSet({ name: 'first', namespace: ns })).metadata!.generation).toBe(1);
    expect(deletedPods.get('first')?.size ?? 0).toBe(0);
  });

  it('keeps the annotations when the owner re-applies a manifest without them: no rollout', async () => {
    const before = await readySet('first');
    // a PUT of the original manifest, as `kubectl replace` or a controller would send it
    const manifest = webSet('first');
    manifest.metadata!.resourceVersion = before.metadata!.resourceVersion;
    const replaced = await apps.replaceNamespacedStatefulSet({ name: 'first', namespace: ns, body: manifest });
    expect(replaced.spec!.template.metadata!.annotations![CM_KEY]).toBe(before.spec!.template.metadata!.annotations![CM_KEY]);
    expect(replaced.metadata!.generation).toBe(before.metadata!.generation);
  });

  it('rolls a set once when its ConfigMap and then the set itself change in one go (helm upgrade order)', async () => {
    const before = await readySet('first');
    await core.replaceNamespacedConfigMap({
      name: 'app-config',
      namespace: ns,
      body: { metadata: { name: 'app-config' }, data: { a: '2' } },
    });
    const manifest = webSet('first');
    manifest.spec!.template.spec!.containers[0]!.image = 'registry.example/app:2';
    manifest.metadata!.resourceVersion = (await apps.readNamespacedStatefulSet({ name: 'first', namespace: ns })).metadata!.resourceVersion;
    await apps.replaceNamespacedStatefulSet({ name: 'first', namespace: ns, body: manifest });
    const after = await readySet('first', before.metadata!.generation! + 1);
    // past the debounce window, the loop found nothing left to do
    await waitUntil('the loop idle after the debounce', async () => {
      const st = await rollguard.status();
      const r = st.reconcile as { queued: number; in_flight: number };
      return (r.queued === 0 && r.in_flight === 0) || JSON.stringify(r);
    });
    const latest = await apps.readNamespacedStatefulSet({ name: 'first', namespace: ns });
    expect(latest.metadata!.generation).toBe(before.metadata!.generation! + 1);
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns });
    expect(after.spec!.template.metadata!.annotations![CM_KEY]).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
  });

  it('gives a 253-character ConfigMap name a key the API server accepts, and rolls the set when it changes', async () => {
    const name = longName(253);
    expect(name).toHaveLength(253);
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name }, data: { a: '1' } } });
    const set = statefulSet('long', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.volumes = [{ name: 'config', configMap: { name } }];
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    const key = annotationKey('ConfigMap', name);
    expect(key.length).toBeLessThanOrEqual('configmap.rollguard.io/'.length + 63);
    const cm = await core.readNamespacedConfigMap({ name, namespace: ns });
    expect(created.spec!.template.metadata!.annotations![key]).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    await readySet('long', 1);
    await core.replaceNamespacedConfigMap({ name, namespace: ns, body: { metadata: { name }, data: { a: '2' } } });
    const rolled = await readySet('long', 2);
    const changed = await core.readNamespacedConfigMap({ name, namespace: ns });
    expect(rolled.spec!.template.metadata!.annotations![key]).toBe(`${changed.metadata!.uid}/${changed.metadata!.resourceVersion}`);
  });

  it('annotates a set created before its ConfigMap with "absent", and rolls it when the ConfigMap appears', async () => {
    const set = statefulSet('early', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.env = [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'late', key: 'x' } } }];
    // without the ConfigMap a real kubelet could not start these pods: they wait
    kubelet.setBehaviour('early-0', 'pending');
    kubelet.setBehaviour('early-1', 'pending');
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    expect(created.spec!.template.metadata!.annotations!['configmap.rollguard.io/late']).toBe('absent');
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'late' }, data: { x: '1' } } });
    kubelet.setBehaviour('early-0', 'ready');
    kubelet.setBehaviour('early-1', 'ready');
    const rolled = await readySet('early', 2);
    const cm = await core.readNamespacedConfigMap({ name: 'late', namespace: ns });
    expect(rolled.spec!.template.metadata!.annotations!['configmap.rollguard.io/late']).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    // the Event is written after the patch it explains
    await waitUntil('an Event saying the ConfigMap appeared', async () => {
      const events = await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=early' });
      const messages = events.items.map((e) => e.message).join(' | ');
      return /ConfigMap late appeared/.test(messages) || `messages: ${messages}`;
    });
  });
});

function longName(length: number): string {
  // a valid DNS subdomain of exactly `length` characters: labels of 62 joined by dots
  let name = '';
  while (name.length < length) name += (name ? '.' : '') + 'l'.repeat(Math.min(62, length - name.length - (name ? 1 : 0)));
  return name.slice(0, length).replace(/\.$/, 'x');
}

function ownerName(pod: V1Pod): string {
  return pod.metadata?.ownerReferences?.find((o) => o.kind === 'StatefulSet')?.name ?? '';
}
