import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { V1ConfigMap, V1MutatingWebhookConfiguration, V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../env/wait.js';
import { printRealClusterLogsOnFailure, realCluster } from './real-cluster.js';

const CHART = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../deploy/helm/rollguard');
const RELEASE = 'rollguard';
const RELEASE_NS = 'rollguard-system';
const APP_NS = 'e2e-restricted';
const SET = 'shop';
const CONFIG = 'shop-config';

interface List<T> {
  items: T[];
}

const shopConfig = (value: string): string =>
  JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: CONFIG, namespace: APP_NS }, data: { value } });

/** An opted-in set that the restricted Pod Security level admits, reading its ConfigMap as a file and as an env var. */
function shopSet(): string {
  return JSON.stringify({
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: SET, namespace: APP_NS, labels: { 'rollguard.io/enabled': 'true' } },
    spec: {
      replicas: 2,
      serviceName: SET,
      selector: { matchLabels: { app: SET } },
      template: {
        metadata: { labels: { app: SET } },
        spec: {
          terminationGracePeriodSeconds: 10,
          securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
          containers: [
            {
              name: 'app',
              image: 'registry.example/app:1',
              env: [{ name: 'VALUE', valueFrom: { configMapKeyRef: { name: CONFIG, key: 'value' } } }],
              volumeMounts: [{ name: 'config', mountPath: '/etc/app', readOnly: true }],
              readinessProbe: { exec: { command: ['cat', '/etc/app/value'] }, periodSeconds: 2 },
              securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
            },
          ],
          volumes: [{ name: 'config', configMap: { name: CONFIG } }],
        },
      },
    },
  });
}

const isReady = (pod: V1Pod): boolean => pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

describe('the chart installed by helm on a real node', () => {
  const cluster = realCluster();
  beforeEach(() => printRealClusterLogsOnFailure());

  beforeAll(async () => {
    const started = Date.now();
    await cluster.helm(['install', RELEASE, CHART, '--namespace', RELEASE_NS, '--create-namespace', '--wait', '--timeout', '5m']);
    console.log(`[e2e] helm install --wait took ${Date.now() - started} ms`);
    await cluster.kubectl(['create', 'namespace', APP_NS]);
    await cluster.kubectl(['label', 'namespace', APP_NS, 'pod-security.kubernetes.io/enforce=restricted']);
  });

  afterAll(async () => {
    await cluster.helm(['uninstall', RELEASE, '--namespace', RELEASE_NS, '--wait']).catch(() => undefined);
    await cluster.kubectl(['delete', 'namespace', APP_NS, '--wait=false', '--ignore-not-found']).catch(() => undefined);
  });

  it('runs both replicas Ready, with no restart', async () => {
    const pods = await cluster.kubectlJson<List<V1Pod>>(['get', 'pods', '-n', RELEASE_NS, '-l', `app.kubernetes.io/instance=${RELEASE}`]);
    expect(pods.items).toHaveLength(2);
    for (const pod of pods.items) {
      expect(isReady(pod), `${pod.metadata?.name} Ready`).toBe(true);
      const status = pod.status?.containerStatuses?.[0];
      expect(status?.restartCount, `${pod.metadata?.name} restarts`).toBe(0);
      const startedAt = status?.state?.running?.startedAt;
      const readyAt = pod.status?.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime;
      if (startedAt && readyAt) {
        console.log(`[e2e] ${pod.metadata?.name}: container start to Ready ${(new Date(readyAt).getTime() - new Date(startedAt).getTime()) / 1000} s (whole seconds)`);
      }
    }
  });

  it('registers the webhook by its Service, with the caBundle rollguard keeps', async () => {
    const config = await cluster.kubectlJson<V1MutatingWebhookConfiguration>(['get', 'mutatingwebhookconfiguration', RELEASE]);
    expect(config.webhooks?.length).toBeGreaterThan(0);
    for (const hook of config.webhooks ?? []) {
      expect(hook.clientConfig.url, hook.name).toBeUndefined();
      expect(hook.clientConfig.service?.namespace, hook.name).toBe(RELEASE_NS);
      expect(Buffer.from(hook.clientConfig.caBundle ?? '', 'base64').toString(), hook.name).toContain('BEGIN CERTIFICATE');
    }
  });

  it('annotates an opted-in StatefulSet of a restricted namespace at admission: generation 1, Ready pods', async () => {
    const configMap = JSON.parse(await cluster.kubectl(['create', '-f', '-', '-o', 'json'], shopConfig('one'))) as V1ConfigMap;
    const set = JSON.parse(await cluster.kubectl(['create', '-f', '-', '-o', 'json'], shopSet())) as V1StatefulSet;
    // the object as stored: the webhook, reached through the Service, wrote it before it was stored
    expect(set.spec?.template.metadata?.annotations?.[`configmap.rollguard.io/${CONFIG}`]).toBe(
      `${configMap.metadata?.uid}/${configMap.metadata?.resourceVersion}`,
    );
    const ready = await waitFor('2 Ready pods of the set', async () => {
      const s = await cluster.kubectlJson<V1StatefulSet>(['get', 'statefulset', SET, '-n', APP_NS]);
      return s.status?.readyReplicas === 2 ? s : undefined;
    }, { timeoutMs: 120_000, intervalMs: 500 });
    expect(ready.metadata?.generation).toBe(1);
  });

  it('replaces the pods one at a time on a data change, and a new pod reads the new value', async () => {
    const before = await cluster.kubectlJson<List<V1Pod>>(['get', 'pods', '-n', APP_NS, '-l', `app=${SET}`]);
    const oldUids = new Set(before.items.map((p) => p.metadata?.uid));
    await cluster.kubectl(['patch', 'configmap', CONFIG, '-n', APP_NS, '--type=merge', '-p', JSON.stringify({ data: { value: 'two' } })]);
    let mostDown = 0;
    await waitFor('both pods replaced and Ready', async () => {
      const pods = await cluster.kubectlJson<List<V1Pod>>(['get', 'pods', '-n', APP_NS, '-l', `app=${SET}`]);
      const up = pods.items.filter((p) => isReady(p) && p.metadata?.deletionTimestamp === undefined);
      mostDown = Math.max(mostDown, 2 - up.length);
      const replaced = up.filter((p) => !oldUids.has(p.metadata?.uid));
      return replaced.length === 2 ? true : undefined;
    }, { timeoutMs: 180_000, intervalMs: 250 });
    expect(mostDown, 'pods down at once during the rollout').toBeLessThanOrEqual(1);
    const set = await cluster.kubectlJson<V1StatefulSet>(['get', 'statefulset', SET, '-n', APP_NS]);
    expect(set.metadata?.generation, 'one rollout for one data change').toBe(2);
    const seen = await cluster.kubectl(['exec', '-n', APP_NS, `${SET}-0`, '--', 'sh', '-c', 'echo "$VALUE $(cat /etc/app/value)"']);
    expect(seen.trim()).toBe('two two');
  });

  it('helm uninstall leaves no webhook, policy or binding, and StatefulSet writes, scale and evictions work', async () => {
    await cluster.helm(['uninstall', RELEASE, '--namespace', RELEASE_NS, '--wait']);
    const left: string[] = [];
    for (const kind of [
      'mutatingwebhookconfigurations',
      'validatingwebhookconfigurations',
      'validatingadmissionpolicies',
      'validatingadmissionpolicybindings',
      'clusterroles',
      'clusterrolebindings',
    ]) {
      const names = await cluster.kubectl(['get', kind, '-o', 'name']);
      left.push(...names.split('\n').filter((n) => n.includes('rollguard')));
    }
    expect(left).toEqual([]);
    await cluster.kubectl(['patch', 'statefulset', SET, '-n', APP_NS, '--type=merge', '-p', JSON.stringify({ metadata: { annotations: { touched: 'after-uninstall' } } })]);
    await cluster.kubectl(['scale', 'statefulset', SET, '-n', APP_NS, '--replicas=1']);
    await waitFor('the set scaled to 1', async () => {
      const s = await cluster.kubectlJson<V1StatefulSet>(['get', 'statefulset', SET, '-n', APP_NS]);
      return s.status?.replicas === 1 ? true : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const eviction = { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: `${SET}-0`, namespace: APP_NS } };
    await cluster.kubectl(['create', '--raw', `/api/v1/namespaces/${APP_NS}/pods/${SET}-0/eviction`, '-f', '-'], JSON.stringify(eviction));
    // what stays: the TLS Secret rollguard made at run time (helm did not create it), so a reinstall keeps its CA
    const secrets = await cluster.kubectl(['get', 'secrets', '-n', RELEASE_NS, '-o', 'name']);
    console.log(`[e2e] left in ${RELEASE_NS} after helm uninstall: ${secrets.split('\n').filter(Boolean).join(', ') || 'nothing'}`);
  });
});
