import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import type { CoreV1Event, V1ConfigMap, V1Lease, V1MutatingWebhookConfiguration, V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { waitFor } from '../env/wait.js';
import { parseMetrics, sumOf, type Sample } from './apiserver-metrics.js';
import { NEXT_TAG } from './images.js';
import { createEach, namespaceSettled, printRealClusterLogsOnFailure, realCluster, type RealClusterClient } from './real-cluster.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = path.join(REPO, 'deploy/helm/rollguard');
const CASES_NS = 'e2e-kuttl';
const KUTTL_TIMEOUT_MS = 420_000;
const RELEASE = 'rollguard';
const RELEASE_NS = 'rollguard-system';
const APP_NS = 'e2e-restricted';
const SET = 'shop';
const CONFIG = 'shop-config';
/** where the upgrade check's client creates and changes sets (no Pod Security level: their pods never run, replicas 0) */
const LOAD_NS = 'e2e-load';
/** a second release with a short-lived token, left alone while the other checks replace the first one's pods */
const TOKEN_RELEASE = 'rollguard-token';
const TOKEN_SECONDS = 600;
const TOKEN_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/token';

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


/** A set with no replicas that reads ConfigMap `name` of LOAD_NS: admission and rollouts, and no pod to run. */
function loadObjects(name: string, value: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'List',
    items: [
      { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: LOAD_NS }, data: { value } },
      {
        apiVersion: 'apps/v1',
        kind: 'StatefulSet',
        metadata: { name, namespace: LOAD_NS, labels: { 'rollguard.io/enabled': 'true' } },
        spec: {
          replicas: 0,
          serviceName: name,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: { containers: [{ name: 'app', image: 'registry.example/app:1', envFrom: [{ configMapRef: { name } }] }] },
          },
        },
      },
    ],
  });
}

/** The counters of the API server that say whether rollguard's webhooks and fence let a write through as they should. */
async function admissionCounters(cluster: RealClusterClient): Promise<{ failOpen: number; rejected: number; fenceDenials: number }> {
  const samples: Sample[] = parseMetrics(await cluster.kubectl(['get', '--raw', '/metrics']));
  const ours = (l: Record<string, string>): boolean => (l.name ?? '').endsWith('.rollguard.io');
  return {
    failOpen: sumOf(samples, 'apiserver_admission_webhook_fail_open_count', ours),
    rejected: sumOf(samples, 'apiserver_admission_webhook_rejection_count', ours),
    fenceDenials: sumOf(samples, 'apiserver_validating_admission_policy_check_total', (l) => l.enforcement_action === 'deny' && (l.policy ?? '').includes('rollguard')),
  };
}

async function setGenerations(cluster: RealClusterClient, namespace: string): Promise<Map<string, number>> {
  const sets = await cluster.kubectlJson<List<V1StatefulSet>>(['get', 'statefulsets', '-n', namespace]);
  return new Map(sets.items.map((s) => [s.metadata!.name!, s.metadata!.generation ?? 0]));
}

const leaseOf = (cluster: RealClusterClient, name: string, namespace: string): Promise<V1Lease> =>
  cluster.kubectlJson<V1Lease>(['get', 'lease', name, '-n', namespace]);

/** The pod a leader identity (`<hostname>_<pid>`) names. */
const holderPod = (lease: V1Lease): string => (lease.spec?.holderIdentity ?? '').replace(/_\d+$/, '');

/** A GET of /api with only `token` (no client certificate), as a pod would make it; the HTTP status. */
async function statusWithToken(server: string, ca: string, token: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.get(`${server}/api`, { ca, headers: { Authorization: `Bearer ${token}` }, timeout: 10_000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
  });
}

/** The `exp` of a JWT, in ms since the epoch. */
function expiresAt(token: string): number {
  const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { exp?: number };
  if (typeof payload.exp !== 'number') throw new Error('the token has no exp');
  return payload.exp * 1000;
}

/** The ServiceAccount token the kubelet mounted in `pod` now (the image has no shell: node reads it). */
async function mountedToken(cluster: RealClusterClient, namespace: string, pod: string): Promise<string> {
  const script = `process.stdout.write(require('fs').readFileSync('${TOKEN_FILE}', 'utf8'))`;
  return (await cluster.kubectl(['exec', '-n', namespace, pod, '--', '/nodejs/bin/node', '-e', script])).trim();
}

/** A one-pod set that says its application re-reads its mounted files: its ConfigMap only as a volume. */
function filesSet(name: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'List',
    items: [
      { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: APP_NS }, data: { value: 'one' } },
      {
        apiVersion: 'apps/v1',
        kind: 'StatefulSet',
        metadata: { name, namespace: APP_NS, labels: { 'rollguard.io/enabled': 'true' }, annotations: { 'rollguard.io/reload': 'files' } },
        spec: {
          replicas: 1,
          serviceName: name,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: {
              terminationGracePeriodSeconds: 5,
              securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
              containers: [
                {
                  name: 'app',
                  image: 'registry.example/app:1',
                  volumeMounts: [{ name: 'config', mountPath: '/etc/app', readOnly: true }],
                  securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
                },
              ],
              volumes: [{ name: 'config', configMap: { name } }],
            },
          },
        },
      },
    ],
  });
}

const isReady = (pod: V1Pod): boolean => pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

describe('the chart installed by helm on a real node', () => {
  const cluster = realCluster();
  beforeEach(() => printRealClusterLogsOnFailure());

  let firstToken = '';
  let tokenPod = '';

  beforeAll(async () => {
    await namespaceSettled(cluster, RELEASE_NS);
    // first, so that its token has expired by the time the other checks are done: a release that
    // watches only its own namespace (nothing to reconcile there, no webhook) and whose one pod
    // renews its Lease with a 600 s projected token
    await cluster.helm([
      'install', TOKEN_RELEASE, CHART, '--namespace', TOKEN_RELEASE, '--create-namespace', '--wait', '--timeout', '5m',
      '--set', 'replicaCount=1', '--set', 'webhook.enabled=false', '--set', 'rbac.scope=namespaces',
      '--set', `rbac.namespaces={${TOKEN_RELEASE}}`, '--set', `serviceAccountToken.expirationSeconds=${TOKEN_SECONDS}`,
    ]);
    const tokenPods = await cluster.kubectlJson<List<V1Pod>>(['get', 'pods', '-n', TOKEN_RELEASE, '-l', `app.kubernetes.io/instance=${TOKEN_RELEASE}`]);
    tokenPod = tokenPods.items[0]!.metadata!.name!;
    firstToken = await mountedToken(cluster, TOKEN_RELEASE, tokenPod);
    console.log(`[e2e] ${tokenPod}'s first token expires at ${new Date(expiresAt(firstToken)).toISOString()}`);
    const started = Date.now();
    await cluster.helm(['install', RELEASE, CHART, '--namespace', RELEASE_NS, '--create-namespace', '--wait', '--timeout', '5m']);
    console.log(`[e2e] helm install --wait took ${Date.now() - started} ms`);
    await cluster.kubectl(['create', 'namespace', APP_NS]);
    await cluster.kubectl(['label', 'namespace', APP_NS, 'pod-security.kubernetes.io/enforce=restricted']);
    await cluster.kubectl(['create', 'namespace', LOAD_NS]);
  });

  afterAll(async () => {
    for (const [release, ns] of [[RELEASE, RELEASE_NS], [TOKEN_RELEASE, TOKEN_RELEASE]] as const) {
      await cluster.helm(['uninstall', release, '--namespace', ns, '--wait']).catch(() => undefined);
    }
    for (const ns of [APP_NS, LOAD_NS, CASES_NS, TOKEN_RELEASE]) {
      await cluster.kubectl(['delete', 'namespace', ns, '--wait=false', '--ignore-not-found']).catch(() => undefined);
    }
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


  it('helm upgrade of rollguard (compat=stackable, a new image tag) while a client writes sets: no webhook call fails open or is rejected, no fence denial, no extra rollout', async () => {
    const before = await admissionCounters(cluster);
    const shopBefore = (await setGenerations(cluster, APP_NS)).get(SET);
    const changes = new Map<string, number>();
    let created = 0;
    let missed = 0;
    let upgrading = true;
    const load = (async () => {
      for (let i = 0; upgrading || i < 20; i++) {
        const name = `load-${i}`;
        const made = { items: await createEach<V1StatefulSet | V1ConfigMap>(cluster, loadObjects(name, 'v1')) };
        created++;
        const set = made.items.find((o): o is V1StatefulSet => o.kind === 'StatefulSet');
        if (!set?.spec?.template.metadata?.annotations?.[`configmap.rollguard.io/${name}`]) missed++;
        changes.set(name, 0);
        // an update of the set that changes nothing it runs, and a data change of an older one
        if (i >= 1) await cluster.kubectl(['label', 'statefulset', `load-${i - 1}`, '-n', LOAD_NS, `touched=${i}`, '--overwrite']);
        if (i >= 2 && i % 3 === 2) {
          const older = `load-${i - 2}`;
          await cluster.kubectl(['patch', 'configmap', older, '-n', LOAD_NS, '--type=merge', '-p', JSON.stringify({ data: { value: `v${i}` } })]);
          changes.set(older, (changes.get(older) ?? 0) + 1);
        }
      }
    })();
    const started = Date.now();
    try {
      await cluster.helm([
        'upgrade', RELEASE, CHART, '--namespace', RELEASE_NS, '--reuse-values', '--wait', '--timeout', '5m',
        // the changed value: Stackable's dialect too, which the kuttl cases below need
        '--set', 'compat=stackable', '--set', `image.tag=${NEXT_TAG}`,
      ]);
    } finally {
      upgrading = false;
    }
    console.log(`[e2e] helm upgrade --wait took ${Date.now() - started} ms`);
    await load;
    const pods = await cluster.kubectlJson<List<V1Pod>>(['get', 'pods', '-n', RELEASE_NS, '-l', `app.kubernetes.io/instance=${RELEASE}`]);
    const live = pods.items.filter((p) => !p.metadata?.deletionTimestamp);
    expect(live.map((p) => p.spec?.containers[0]?.image)).toEqual([`rollguard:${NEXT_TAG}`, `rollguard:${NEXT_TAG}`]);

    // every set rolls once per data change of its ConfigMap, and not for the label updates or the upgrade
    const expected = new Map([...changes].map(([name, n]) => [name, 1 + n]));
    await waitFor('each set at 1 + its data changes', async () => {
      const now = await setGenerations(cluster, LOAD_NS);
      return [...expected].every(([name, g]) => now.get(name) === g) ? true : undefined;
    }, { timeoutMs: 120_000, intervalMs: 1_000 });
    // nothing more may come once the debounce (5 s) has passed again: watched for 15 s
    for (const deadline = performance.now() + 15_000; performance.now() < deadline; await new Promise((r) => setTimeout(r, 1_000))) {
      const now = await setGenerations(cluster, LOAD_NS);
      expect(Object.fromEntries([...now].filter(([name]) => expected.has(name)))).toEqual(Object.fromEntries(expected));
    }
    expect((await setGenerations(cluster, APP_NS)).get(SET), 'the shop set, unchanged, does not roll').toBe(shopBefore);

    const after = await admissionCounters(cluster);
    console.log(`[e2e] upgrade under load: ${created} sets created, ${[...changes.values()].reduce((a, b) => a + b, 0)} data changes, counters before ${JSON.stringify(before)} after ${JSON.stringify(after)}`);
    expect(missed, 'sets stored without their annotation (a webhook call that did not answer)').toBe(0);
    expect(after.failOpen - before.failOpen, 'apiserver_admission_webhook_fail_open_count').toBe(0);
    expect(after.rejected - before.rejected, 'apiserver_admission_webhook_rejection_count').toBe(0);
    expect(after.fenceDenials - before.fenceDenials, 'fence denials').toBe(0);
  });

  it('rollguard.io/reload: files — the kubelet updates the mounted file in the running container: no restart, an UpdatedInPlace Event', async () => {
    const name = 'files';
    // one kubectl create of both: the set's admission comes while the ConfigMap may still be on rollguard's watch
    await cluster.kubectl(['create', '-f', '-'], filesSet(name));
    const createdCm = await cluster.kubectlJson<V1ConfigMap>(['get', 'configmap', name, '-n', APP_NS]);
    const createdSet = await cluster.kubectlJson<V1StatefulSet>(['get', 'statefulset', name, '-n', APP_NS]);
    expect(createdSet.spec?.template.metadata?.annotations?.[`configmap.rollguard.io/${name}`], 'the version at admission, not absent').toBe(
      `${createdCm.metadata?.uid}/${createdCm.metadata?.resourceVersion}`,
    );
    // settled first: the set at its last revision, its pod of that revision Ready (a webhook call
    // that failed open would roll it once, with a ReferencesAnnotated Event, before this)
    const generation = await waitFor('the set settled', async () => {
      const s = await cluster.kubectlJson<V1StatefulSet>(['get', 'statefulset', name, '-n', APP_NS]);
      const st = s.status;
      // annotated too: by the webhook at creation, or by the loop when a webhook call failed open
      const annotated = s.spec?.template.metadata?.annotations?.[`configmap.rollguard.io/${name}`] !== undefined;
      return annotated && st?.observedGeneration === s.metadata?.generation && st?.readyReplicas === 1 && st?.updatedReplicas === 1 && st?.currentRevision === st?.updateRevision
        ? s.metadata?.generation
        : undefined;
    }, { timeoutMs: 120_000, intervalMs: 500 });
    const pod = await cluster.kubectlJson<V1Pod>(['get', 'pod', `${name}-0`, '-n', APP_NS]);
    const changed = Date.now();
    await cluster.kubectl(['patch', 'configmap', name, '-n', APP_NS, '--type=merge', '-p', JSON.stringify({ data: { value: 'two' } })]);
    // the kubelet's sync period (1 min) and its cache's propagation: up to about two minutes
    await waitFor('the new value in the running container\'s file', async () => {
      const seen = (await cluster.kubectl(['exec', '-n', APP_NS, `${name}-0`, '--', 'cat', '/etc/app/value'])).trim();
      return seen === 'two' ? true : undefined;
    }, { timeoutMs: 180_000, intervalMs: 2_000 });
    console.log(`[e2e] the mounted file changed ${Math.round((Date.now() - changed) / 1000)} s after the ConfigMap`);
    const after = await cluster.kubectlJson<V1Pod>(['get', 'pod', `${name}-0`, '-n', APP_NS]);
    const told = await cluster.kubectlJson<List<CoreV1Event>>(['get', 'events', '-n', APP_NS, '--field-selector', `involvedObject.name=${name}`]);
    console.log(`[e2e] the files set's Events: ${told.items.map((e) => `${e.reason}: ${e.message}`).join(' | ')}`);
    expect(after.metadata?.uid, 'the same pod').toBe(pod.metadata?.uid);
    expect(after.status?.containerStatuses?.[0]?.restartCount).toBe(0);
    expect((await setGenerations(cluster, APP_NS)).get(name), 'no rollout').toBe(generation);
    console.log(`[e2e] the files set at generation ${generation} (1: the webhook annotated it at creation)`);
    const events = await waitFor('the UpdatedInPlace Event', async () => {
      const list = await cluster.kubectlJson<List<CoreV1Event>>(['get', 'events', '-n', APP_NS, '--field-selector', `involvedObject.name=${name},reason=UpdatedInPlace`]);
      return list.items.length > 0 ? list.items : undefined;
    }, { timeoutMs: 60_000, intervalMs: 1_000 });
    expect(events[0]?.type).toBe('Normal');
    expect(events[0]?.message).toContain(name);
  }, 400_000);

  it('a force-deleted leader: the other replica takes the lease, and a change made meanwhile still rolls its set once with an Event', async () => {
    const lease = await leaseOf(cluster, `${RELEASE}-leader`, RELEASE_NS);
    const leader = holderPod(lease);
    expect(leader).toMatch(new RegExp(`^${RELEASE}-`));
    const target = 'load-1';
    const before = (await setGenerations(cluster, LOAD_NS)).get(target)!;
    await cluster.kubectl(['delete', 'pod', leader, '-n', RELEASE_NS, '--force', '--grace-period=0']);
    await cluster.kubectl(['patch', 'configmap', target, '-n', LOAD_NS, '--type=merge', '-p', JSON.stringify({ data: { value: 'after-kill' } })]);
    const next = await waitFor('another pod holds the lease', async () => {
      const now = await leaseOf(cluster, `${RELEASE}-leader`, RELEASE_NS);
      return holderPod(now) !== leader && holderPod(now) !== '' ? holderPod(now) : undefined;
    }, { timeoutMs: 90_000, intervalMs: 500 });
    console.log(`[e2e] lease moved from ${leader} to ${next}`);
    await waitFor(`${target} rolled once`, async () => ((await setGenerations(cluster, LOAD_NS)).get(target) === before + 1 ? true : undefined), {
      timeoutMs: 120_000,
      intervalMs: 1_000,
    });
    const events = await cluster.kubectlJson<List<CoreV1Event>>(['get', 'events', '-n', LOAD_NS, '--field-selector', `involvedObject.name=${target},reason=ConfigChanged`]);
    expect(events.items.some((e) => e.message?.includes(target))).toBe(true);
  });

  it('test/kuttl, unmodified, passes with kubectl-kuttl against the upgraded release (its pods real containers)', async () => {
    await cluster.kubectl(['create', 'namespace', CASES_NS]);
    const kuttlDir = execFileSync('bash', [path.join(REPO, 'src/dev/build-kuttl.sh')], { encoding: 'utf8' }).trim().split('\n').pop()!;
    // kuttl writes a kubeconfig into its working folder: keep that out of the repo
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-e2e-kuttl-'));
    const child = spawn(
      path.join(kuttlDir, 'kubectl-kuttl'),
      ['test', path.join(REPO, 'test/kuttl'), '--config', path.join(REPO, 'test/kuttl/kuttl-test.yaml'), '--namespace', CASES_NS, '--parallel', '1', '--timeout', '120'],
      { cwd: work, env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, PATH: `${path.dirname(inject('realKubectlPath'))}:${process.env.PATH ?? ''}` } },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), KUTTL_TIMEOUT_MS);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    fs.writeFileSync(path.join(work, 'kuttl.log'), output);
    expect(code, `kubectl-kuttl exited ${code}; full output in ${path.join(work, 'kuttl.log')}\n${output.slice(-4000)}`).toBe(0);
    // every case under test/kuttl passed, by name
    const cases = fs.readdirSync(path.join(REPO, 'test/kuttl'), { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);
    expect(cases.length).toBeGreaterThan(0);
    for (const name of cases) expect(output, name).toMatch(new RegExp(`--- PASS: kuttl/harness/${name} `));
  }, KUTTL_TIMEOUT_MS + 10_000);

  it('re-reads its ServiceAccount token: past the first token\'s expiry the release still renews its Lease, and that first token is refused', async () => {
    const expiry = expiresAt(firstToken);
    // the token's whole life (600 s, the API server's minimum) and the minute of clock skew the
    // API server's JWT check allows past exp (it answered 200 at exp + 15 s)
    await waitFor('the first token expired', async () => (Date.now() > expiry + 75_000 ? true : undefined), {
      timeoutMs: TOKEN_SECONDS * 1000 + 120_000,
      intervalMs: 5_000,
    });
    const ca = Buffer.from(
      (await cluster.kubectlJson<{ data: Record<string, string> }>(['get', 'configmap', 'kube-root-ca.crt', '-n', TOKEN_RELEASE])).data['ca.crt'] ?? '',
    ).toString();
    const server = (await cluster.kubectl(['config', 'view', '--minify', '-o', 'jsonpath={.clusters[0].cluster.server}'])).trim();
    expect(await statusWithToken(server, ca, firstToken), 'the first token, expired').toBe(401);
    const renewed = await waitFor('a Lease renewal after the first token expired', async () => {
      const lease = await leaseOf(cluster, `${TOKEN_RELEASE}-leader`, TOKEN_RELEASE);
      const at = new Date(String(lease.spec?.renewTime ?? 0)).getTime();
      return at > expiry && holderPod(lease) === tokenPod ? at : undefined;
    }, { timeoutMs: 60_000, intervalMs: 1_000 });
    console.log(`[e2e] ${tokenPod} renewed its Lease ${Math.round((renewed - expiry) / 1000)} s after its first token expired`);
    const pod = await cluster.kubectlJson<V1Pod>(['get', 'pod', tokenPod, '-n', TOKEN_RELEASE]);
    expect(isReady(pod)).toBe(true);
    expect(pod.status?.containerStatuses?.[0]?.restartCount).toBe(0);
    const current = await mountedToken(cluster, TOKEN_RELEASE, tokenPod);
    expect(current, 'the kubelet rotated the mounted token').not.toBe(firstToken);
    expect(await statusWithToken(server, ca, current)).toBe(200);
  }, TOKEN_SECONDS * 1000 + 300_000);

  it('helm uninstall leaves no webhook, policy or binding, and StatefulSet writes, scale and evictions work', async () => {
    for (const [release, ns] of [[RELEASE, RELEASE_NS], [TOKEN_RELEASE, TOKEN_RELEASE]] as const) {
      await cluster.helm(['uninstall', release, '--namespace', ns, '--wait']);
    }
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
