import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import { AdmissionregistrationV1Api, type V1Secret } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startBalancer, type Balancer } from '../env/tcp-balancer.js';
import { freePort } from '../env/ports.js';
import { startRollguardProcess, printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { apiServerWebhookMetric } from '../env/rollouts.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { bundleHolds, observedWebhookConfiguration } from '../../src/tls/ca-bundle.js';

const REPLICAS = ['a', 'b'] as const;
const ARGS = ['--shutdown-delay=0s', '--lease-duration=4s', '--renew-deadline=3s', '--retry-period=500ms', '--debounce=0s'];
const TLS_SECRET = 'deleted-tls';
/** Deletions of the Secret, one after the other, each once the one before came back. */
const DELETIONS = 3;
const WRITERS = 3;
/** Writes admitted before the first deletion and after the last restore: the load really flows around the window. */
const WRITES_AROUND = 20;
const WEBHOOK_TIMEOUT_SECONDS = 5;

function errorText(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  const message = err instanceof Error ? err.message : String(err);
  return typeof body === 'string' && !message.includes(body) ? `${message}: ${body}` : message;
}

const pemOf = (secret: V1Secret, key: string): string => Buffer.from(secret.data?.[key] ?? '', 'base64').toString('utf8');

/** The leaf certificate a replica's webhook port presents now, in PEM. */
function servedCertificate(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      const raw = socket.getPeerCertificate().raw;
      socket.end();
      resolve(new X509Certificate(raw).toString());
    });
    socket.on('error', reject);
  });
}

// Injected: the TLS Secret that holds the CA and serving certificate, deleted (three times) while
// two replicas behind a balancer admit a steady load of writes with failurePolicy Fail.
describe('TLS Secret deleted while the webhook serves under load', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  const admissionApi = kc.makeApiClient(AdmissionregistrationV1Api);
  const suffix = Math.random().toString(36).slice(2, 8);
  const configuration = `faults-tls-${suffix}`;
  const webhookName = `tls-${suffix}.rollguard.io`;
  let rollguardNamespace: string;
  let workloads: string;
  let balancer: Balancer | undefined;
  const replicas: RollguardProcess[] = [];

  beforeAll(async () => {
    rollguardNamespace = await createNamespace(core, 'faults-tls-rg');
    workloads = await createNamespace(core, 'faults-tls-wl');
    const ports = await Promise.all(REPLICAS.map(async (name) => ({ name, port: await freePort(), checkPort: await freePort() })));
    balancer = await startBalancer(ports);
    await admissionApi.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: configuration },
        webhooks: [
          {
            name: webhookName,
            clientConfig: { url: `https://127.0.0.1:${balancer.port}/mutate` },
            failurePolicy: 'Fail',
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': workloads } },
            objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } },
            rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['statefulsets'] }],
            sideEffects: 'None',
            admissionReviewVersions: ['v1'],
            timeoutSeconds: WEBHOOK_TIMEOUT_SECONDS,
          },
        ],
      },
    });
    for (const { name, port, checkPort } of ports) {
      replicas.push(
        await startRollguardProcess({
          name,
          kubeconfigPath,
          webhookPort: port,
          adminPort: checkPort,
          args: [
            `--namespace=${rollguardNamespace}`,
            `--watch-namespaces=${workloads}`,
            `--webhook-configuration=${configuration}`,
            `--tls-secret=${TLS_SECRET}`,
            '--lease-name=faults-tls',
            ...ARGS,
          ],
        }),
      );
    }
    await Promise.all(replicas.map((p) => p.waitReady()));
    await waitUntil('the balancer to route to both replicas', async () => {
      const states = await balancer!.serverStates();
      return REPLICAS.every((n) => states[n] === 'UP') || JSON.stringify(states);
    });
  });

  afterAll(async () => {
    for (const proc of replicas) await proc.kill();
    await balancer?.stop();
    await admissionApi.deleteMutatingWebhookConfiguration({ name: configuration }).catch(() => undefined);
    for (const ns of [workloads, rollguardNamespace]) if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(replicas);
  });

  it('puts the same certificates back, keeps the caBundle right, and fails no write', { timeout: 180_000 }, async () => {
    const original = await core.readNamespacedSecret({ name: TLS_SECRET, namespace: rollguardNamespace });
    const caPem = pemOf(original, 'ca.crt');
    const certPem = pemOf(original, 'tls.crt');
    const names = Array.from({ length: WRITERS }, (_, i) => `load-${i}`);
    for (const name of names) await apps.createNamespacedStatefulSet({ namespace: workloads, body: statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } }) });

    const rejectedBefore = await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_rejection_count', webhookName);
    const failOpenBefore = await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_fail_open_count', webhookName);
    const requestsBefore = await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_request_total', webhookName);
    const admittedAt: number[] = [];
    const failures: string[] = [];
    const stopLoad = new AbortController();
    // each writer updates its own set over and over: every write is one review through the balancer
    const writers = names.map(async (name) => {
      for (let i = 0; !stopLoad.signal.aborted; i++) {
        try {
          await apps.patchNamespacedStatefulSet({ name, namespace: workloads, body: [{ op: 'add', path: '/metadata/labels/write', value: String(i) }] });
          admittedAt.push(Date.now());
        } catch (err) {
          failures.push(`${new Date().toISOString()} ${name} write ${i}: ${errorText(err)}`);
        }
      }
    });

    const windows: { from: number; to: number; uid: string }[] = [];
    try {
      await waitUntil('the load to flow', () => admittedAt.length >= WRITES_AROUND || `${admittedAt.length} writes; ${failures.join('; ')}`);
      let uid = original.metadata!.uid!;
      for (let n = 1; n <= DELETIONS; n++) {
        const from = Date.now();
        await core.deleteNamespacedSecret({ name: TLS_SECRET, namespace: rollguardNamespace });
        const back = await waitFor(`the Secret back after deletion ${n}`, async () => {
          const s = await core.readNamespacedSecret({ name: TLS_SECRET, namespace: rollguardNamespace }).catch(() => undefined);
          return s && s.metadata?.uid !== uid ? s : undefined;
        }, { intervalMs: 20 });
        windows.push({ from, to: Date.now(), uid: back.metadata!.uid! });
        uid = back.metadata!.uid!;
        // restored from memory: the same CA and certificate, so nothing the API server trusts changes
        expect(pemOf(back, 'ca.crt'), `ca.crt after deletion ${n}`).toBe(caPem);
        expect(pemOf(back, 'tls.crt'), `tls.crt after deletion ${n}`).toBe(certPem);
        const during = observedWebhookConfiguration(await admissionApi.readMutatingWebhookConfiguration({ name: configuration }));
        expect(bundleHolds(during?.webhooks[0]?.caBundle, caPem), `the caBundle holds the CA after deletion ${n}`).toBe(true);
        await waitUntil(`writes after restore ${n}`, () => admittedAt.filter((t) => t > windows.at(-1)!.to).length >= 5 || `${failures.length} failures`);
      }
      const admittedSoFar = admittedAt.length;
      await waitUntil('writes after the last restore', () => admittedAt.length >= admittedSoFar + WRITES_AROUND || `${admittedAt.length - admittedSoFar} writes`);
    } finally {
      stopLoad.abort();
      await Promise.all(writers);
    }

    const config = observedWebhookConfiguration(await admissionApi.readMutatingWebhookConfiguration({ name: configuration }));
    const bundle = config?.webhooks[0]?.caBundle ?? '';
    const served = await Promise.all(replicas.map((p) => servedCertificate(p.webhookPort)));
    const rejected = (await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_rejection_count', webhookName)) - rejectedBefore;
    const failOpen = (await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_fail_open_count', webhookName)) - failOpenBefore;
    const requests = (await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_request_total', webhookName)) - requestsBefore;
    const inWindows = windows.map((w) => `${w.to - w.from} ms, ${admittedAt.filter((t) => t >= w.from && t <= w.to).length} writes`);
    console.log(
      `[faults-tls] injected: ${DELETIONS} deletions of Secret ${TLS_SECRET} under ${WRITERS} writers (failurePolicy Fail); back after ${inWindows.join('; ')}; ` +
        `${admittedAt.length} writes admitted, ${failures.length} failed; API server: ${requests} webhook requests, ${rejected} rejected, ${failOpen} failed open`,
    );
    expect(failures).toEqual([]);
    expect(rejected).toBe(0);
    expect(failOpen).toBe(0);
    expect(requests).toBeGreaterThanOrEqual(admittedAt.length);
    expect(bundleHolds(bundle, caPem), 'the caBundle holds the CA').toBe(true);
    expect(Buffer.from(bundle, 'base64').toString('utf8').match(/BEGIN CERTIFICATE/g)?.length, 'the caBundle holds one CA').toBe(1);
    for (const [i, pem] of served.entries()) expect(new X509Certificate(pem).fingerprint256, `certificate served by ${replicas[i]!.name}`).toBe(new X509Certificate(certPem).fingerprint256);
    for (const proc of replicas) expect(((await proc.status()) as { ready: boolean }).ready, `${proc.name} ready`).toBe(true);
    const restores = replicas.flatMap((p) => p.logLines().filter((l) => l.msg === 'rotating certificates' && l.action === 'restore').map((l) => `${p.name}: ${String(l.reason)}`));
    expect(restores.length, `restores logged: ${restores.join('; ')}`).toBeGreaterThanOrEqual(DELETIONS);
  });
});
