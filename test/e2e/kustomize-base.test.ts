import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { V1ConfigMap, V1Deployment, V1MutatingWebhookConfiguration, V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../env/wait.js';
import { parseMetrics, sumOf } from './apiserver-metrics.js';
import { createEach, namespaceSettled, printRealClusterLogsOnFailure, realCluster, type RealClusterClient } from './real-cluster.js';

const BASE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../deploy/base');
const RELEASE_NS = 'rollguard-system';
const APP_NS = 'e2e-kustomize';
const APP = 'web';
const CONFIG = 'web-config';

/** An opted-in Deployment that the restricted level admits, reading its ConfigMap by env. */
function webObjects(value: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'List',
    items: [
      { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: CONFIG, namespace: APP_NS }, data: { value } },
      {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: APP, namespace: APP_NS, labels: { 'rollguard.io/enabled': 'true' } },
        spec: {
          replicas: 2,
          selector: { matchLabels: { app: APP } },
          template: {
            metadata: { labels: { app: APP } },
            spec: {
              terminationGracePeriodSeconds: 5,
              securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
              containers: [
                {
                  name: 'app',
                  image: 'registry.example/app:1',
                  envFrom: [{ configMapRef: { name: CONFIG } }],
                  securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
                },
              ],
            },
          },
        },
      },
    ],
  });
}

const failedOpen = async (cluster: RealClusterClient): Promise<number> =>
  sumOf(parseMetrics(await cluster.kubectl(['get', '--raw', '/metrics'])), 'apiserver_admission_webhook_fail_open_count', (l) => (l.name ?? '').endsWith('.rollguard.io'));

/**
 * Until a server-side dry run of the opted-in Deployment comes back annotated: the webhook
 * answers through its Service, as a user would check after an install. Pods Ready is not yet
 * that: the Service's endpoints, the node's proxy rules and the API server's connections to the
 * webhook follow a moment later.
 */
async function webhookAnswering(cluster: RealClusterClient): Promise<void> {
  const started = Date.now();
  const before = await failedOpen(cluster);
  let tries = 0;
  const deploy = (JSON.parse(webObjects('probe')) as { items: { kind: string }[] }).items.find((o) => o.kind === 'Deployment');
  await waitFor('a dry-run create annotated by the webhook', async () => {
    tries++;
    const d = JSON.parse(await cluster.kubectl(['create', '--dry-run=server', '-f', '-', '-o', 'json'], JSON.stringify(deploy))) as V1Deployment;
    return d.spec?.template.metadata?.annotations?.[`configmap.rollguard.io/${CONFIG}`] !== undefined ? true : undefined;
  }, { timeoutMs: 90_000, intervalMs: 1_000 });
  console.log(`[e2e] kustomize base: the webhook answered a dry run ${Date.now() - started} ms after rollout status, after ${tries} tries; webhook calls failed open meanwhile: ${(await failedOpen(cluster)) - before}`);
}

// deploy/base as `kubectl apply -k` installs it: the same image, its Service and webhook, on the real node.
describe('the kustomize base applied with kubectl on a real node', () => {
  const cluster = realCluster();
  beforeEach(() => printRealClusterLogsOnFailure());

  beforeAll(async () => {
    await namespaceSettled(cluster, RELEASE_NS);
    await cluster.kubectl(['apply', '-k', BASE]);
    await cluster.kubectl(['rollout', 'status', 'deployment/rollguard', '-n', RELEASE_NS, '--timeout=300s']);
    await namespaceSettled(cluster, APP_NS);
    await cluster.kubectl(['create', 'namespace', APP_NS]);
    await cluster.kubectl(['label', 'namespace', APP_NS, 'pod-security.kubernetes.io/enforce=restricted']);
    await webhookAnswering(cluster);
  });

  afterAll(async () => {
    await cluster.kubectl(['delete', '-k', BASE, '--ignore-not-found', '--wait=false']).catch(() => undefined);
    await cluster.kubectl(['delete', 'namespace', APP_NS, '--ignore-not-found', '--wait=false']).catch(() => undefined);
  });

  it('runs both replicas Ready and keeps the webhook\'s caBundle', async () => {
    const deploy = await cluster.kubectlJson<V1Deployment>(['get', 'deployment', 'rollguard', '-n', RELEASE_NS]);
    expect(deploy.status?.readyReplicas).toBe(2);
    const config = await waitFor('the caBundle in every webhook', async () => {
      const c = await cluster.kubectlJson<V1MutatingWebhookConfiguration>(['get', 'mutatingwebhookconfiguration', 'rollguard']);
      return (c.webhooks ?? []).every((h) => (h.clientConfig.caBundle ?? '') !== '') ? c : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    for (const hook of config.webhooks ?? []) expect(hook.clientConfig.service?.namespace, hook.name).toBe(RELEASE_NS);
  });

  it('annotates an opted-in Deployment at admission and rolls it once on a data change', async () => {
    const made = { items: await createEach<V1ConfigMap | V1Deployment>(cluster, webObjects('one')) };
    const configMap = made.items.find((o): o is V1ConfigMap => o.kind === 'ConfigMap')!;
    const deploy = made.items.find((o): o is V1Deployment => o.kind === 'Deployment')!;
    expect(deploy.spec?.template.metadata?.annotations?.[`configmap.rollguard.io/${CONFIG}`]).toBe(`${configMap.metadata?.uid}/${configMap.metadata?.resourceVersion}`);
    await cluster.kubectl(['rollout', 'status', `deployment/${APP}`, '-n', APP_NS, '--timeout=120s']);
    await cluster.kubectl(['patch', 'configmap', CONFIG, '-n', APP_NS, '--type=merge', '-p', JSON.stringify({ data: { value: 'two' } })]);
    await waitFor('the Deployment rolled', async () => {
      const d = await cluster.kubectlJson<V1Deployment>(['get', 'deployment', APP, '-n', APP_NS]);
      return d.metadata?.generation === 2 ? true : undefined;
    }, { timeoutMs: 120_000, intervalMs: 1_000 });
    await cluster.kubectl(['rollout', 'status', `deployment/${APP}`, '-n', APP_NS, '--timeout=120s']);
    // a pod of the new template, not one of the old ReplicaSet's still terminating
    const rolled = await cluster.kubectlJson<V1Deployment>(['get', 'deployment', APP, '-n', APP_NS]);
    const version = rolled.spec?.template.metadata?.annotations?.[`configmap.rollguard.io/${CONFIG}`];
    const pod = await waitFor('a running pod of the new template', async () => {
      const pods = await cluster.kubectlJson<{ items: V1Pod[] }>(['get', 'pods', '-n', APP_NS, '-l', `app=${APP}`]);
      const found = pods.items.find((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp && p.metadata?.annotations?.[`configmap.rollguard.io/${CONFIG}`] === version);
      return found?.metadata?.name;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect((await cluster.kubectl(['exec', '-n', APP_NS, pod, '--', 'sh', '-c', 'echo $value'])).trim()).toBe('two');
  });

  it('kubectl delete -k leaves no webhook, policy or binding, and Deployment writes work after', async () => {
    await cluster.kubectl(['delete', '-k', BASE, '--wait=true', '--timeout=180s']);
    const left: string[] = [];
    for (const kind of ['mutatingwebhookconfigurations', 'validatingwebhookconfigurations', 'validatingadmissionpolicies', 'validatingadmissionpolicybindings', 'clusterroles', 'clusterrolebindings']) {
      left.push(...(await cluster.kubectl(['get', kind, '-o', 'name'])).split('\n').filter((n) => n.includes('rollguard')));
    }
    expect(left).toEqual([]);
    // the namespace went with the base, and the Secrets rollguard made in it
    expect((await cluster.kubectl(['get', 'namespace', RELEASE_NS, '--ignore-not-found', '-o', 'name'])).trim()).toBe('');
    await cluster.kubectl(['scale', 'deployment', APP, '-n', APP_NS, '--replicas=1']);
    await cluster.kubectl(['patch', 'deployment', APP, '-n', APP_NS, '--type=merge', '-p', JSON.stringify({ metadata: { annotations: { touched: 'after-delete' } } })]);
  });
});
