import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { FakeKubelet } from '../env/fake-kubelet.js';
import { freePort } from '../env/ports.js';
import { startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { registerWebhook, type WebhookRegistration } from '../env/webhook-registration.js';
import { waitFor } from '../env/wait.js';

// failurePolicy: Ignore is the design: a webhook that cannot be reached never blocks anyone,
// and the reconcile loop annotates what the webhook missed.
describe('webhook registered but unreachable (fail-open)', () => {
  const { kc, core, apps } = testCluster();
  let ns: string;
  let own: string;
  let rollguard: RollguardProcess;
  let webhook: WebhookRegistration;
  let kubelet: FakeKubelet;

  beforeAll(async () => {
    ns = await createNamespace(core, 'failopen');
    own = await createNamespace(core, 'failopen-rollguard');
    kubelet = new FakeKubelet(kc, ns).start();
    // nothing listens on this port: every call fails before TLS
    webhook = await registerWebhook(kc, { name: ns, port: await freePort(), namespace: ns, failurePolicy: 'Ignore', timeoutSeconds: 2 });
    rollguard = await startRollguardProcess({
      name: 'fail-open',
      kubeconfigPath: testCluster().kubeconfigPath,
      args: [`--namespace=${own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', '--debounce=0s'],
    });
    await rollguard.waitReady();
  });
  afterAll(async () => {
    await rollguard?.kill();
    await webhook?.delete();
    await kubelet?.stop();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deleteNamespace({ name: own }).catch(() => undefined);
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('lets the create through, and the loop annotates the set within seconds', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    const set = statefulSet('web', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    expect(created.spec!.template.metadata?.annotations?.['configmap.rollguard.io/cfg']).toBeUndefined();
    const cm = await core.readNamespacedConfigMap({ name: 'cfg', namespace: ns });
    const annotated = await waitFor('the loop to annotate web', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace: ns });
      const v = s.spec!.template.metadata?.annotations?.['configmap.rollguard.io/cfg'];
      if (v) return s;
      throw new Error(`annotations ${JSON.stringify(s.spec!.template.metadata?.annotations)}`);
    }, { timeoutMs: 15_000 });
    expect(annotated.spec!.template.metadata!.annotations!['configmap.rollguard.io/cfg']).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    expect(annotated.metadata!.generation).toBe(2);
    const events = await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=web' });
    expect(events.items.map((e) => e.reason)).toContain('ReferencesAnnotated');
  });
});
