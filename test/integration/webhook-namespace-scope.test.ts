import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  AdmissionregistrationV1Api,
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  loadYaml,
  type V1MutatingWebhookConfiguration,
  type V1StatefulSet,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { statefulSet } from '../env/cluster.js';
import { startControlPlane, type ControlPlane } from '../../src/dev/control-plane.js';
import { startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';

const REPO = path.resolve(import.meta.dirname, '..', '..');
const WATCHED = 'watched';
const ELSEWHERE = 'elsewhere';
const OWN = 'rollguard-system';
const KEY = annotationKey('ConfigMap', 'cfg');

// The shipped MutatingWebhookConfiguration sends every namespace but rollguard's own to the
// webhook; with --watch-namespaces the caches know only the watched ones. On a control plane of
// its own, so that the webhook sees every namespace there is.
describe('the shipped webhook with --watch-namespaces', () => {
  let cp: ControlPlane | undefined;
  let rollguard: RollguardProcess | undefined;
  let apps: AppsV1Api;

  beforeAll(async () => {
    cp = await startControlPlane({ dir: fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-scope-')) });
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    const core = kc.makeApiClient(CoreV1Api);
    apps = kc.makeApiClient(AppsV1Api);
    for (const name of [WATCHED, ELSEWHERE, OWN]) await core.createNamespace({ body: { metadata: { name } } });
    for (const namespace of [WATCHED, ELSEWHERE]) await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    rollguard = await startRollguardProcess({
      name: 'scope',
      kubeconfigPath: cp.kubeconfigPath,
      args: [`--namespace=${OWN}`, `--watch-namespaces=${WATCHED}`, '--webhook-configuration=rollguard'],
    });
    // the shipped rules and selectors; only the client config points at the process (the test API server reaches no Service)
    const shipped = loadYaml<V1MutatingWebhookConfiguration>(fs.readFileSync(path.join(REPO, 'deploy', 'base', 'mutating-webhook-configuration.yaml'), 'utf8'));
    for (const webhook of shipped.webhooks ?? []) webhook.clientConfig = { url: `https://127.0.0.1:${rollguard.webhookPort}/mutate` };
    await kc.makeApiClient(AdmissionregistrationV1Api).createMutatingWebhookConfiguration({ body: shipped });
    await rollguard.waitReady();
  });

  afterAll(async () => {
    await rollguard?.kill();
    await cp?.stop();
  });

  const create = async (namespace: string): Promise<V1StatefulSet> => {
    const body = statefulSet('db', { replicas: 3, labels: { [ENABLED_LABEL]: 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE } });
    body.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    body.spec!.updateStrategy = { type: 'RollingUpdate', rollingUpdate: { partition: 0 } };
    return apps.createNamespacedStatefulSet({ namespace, body });
  };

  it('annotates and holds sets in the watched namespaces only; elsewhere the write is stored as sent', async () => {
    onTestFailed(() => {
      console.error(cp?.logTail(20));
      console.error(rollguard?.logLines().slice(-20).map((l) => JSON.stringify(l)).join('\n'));
    });
    const watched = await create(WATCHED);
    expect(watched.spec?.template.metadata?.annotations?.[KEY]).toMatch(/^[0-9a-f-]+\/\d+$/);
    expect(watched.spec?.updateStrategy?.rollingUpdate?.partition).toBe(3);

    const elsewhere = await create(ELSEWHERE);
    // no "absent" for an object the caches cannot see, no hold that no controller would ever step
    expect(elsewhere.spec?.template.metadata?.annotations?.[KEY]).toBeUndefined();
    expect(elsewhere.spec?.updateStrategy?.rollingUpdate?.partition).toBe(0);
    await waitUntil('the webhook to have answered both', async () => {
      const metrics = await (await fetch(`${rollguard!.adminUrl}/metrics`)).text();
      const unchanged = /rollguard_admission_reviews_total\{result="out_of_scope"[^}]*\} (\d+)/.exec(metrics);
      return (unchanged !== null && Number(unchanged[1]) >= 1) || 'no out_of_scope review counted';
    });
  });
});
