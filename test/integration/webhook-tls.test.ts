import { AdmissionregistrationV1Api, type V1MutatingWebhookConfiguration } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMetrics, type Metrics } from '../../src/metrics.js';
import { ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND, parseAdmissionReview } from '../../src/admission/review.js';
import type { ReviewHandler } from '../../src/admission/review.js';
import { createWebhookServer, type WebhookServer } from '../../src/server/webhook-server.js';
import { bundleHolds, caBundlePem, observedWebhookConfiguration } from '../../src/tls/ca-bundle.js';
import { createCertificateSource, type CertificateSource, type CertificateSourceOptions } from '../../src/tls/certificate-source.js';
import { createCertificateAuthority, isSignedBy } from '../../src/tls/certificates.js';
import { secretContents } from '../../src/tls/secret-store.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { apiServerWebhookMetric } from '../env/rollouts.js';
import { waitFor, waitUntil } from '../env/wait.js';

const KEY_BITS = 2048;
const ENABLED = { 'rollguard.io/enabled': 'true' };
/** long enough that the API server waits out a slow CI machine, short enough that a hang shows */
const WEBHOOK_TIMEOUT_SECONDS = 5;

/** Counts the reviews it answers and labels every admitted object, so a test can see both sides. */
function countingHandler(): { handler: ReviewHandler; reviews: () => number } {
  let reviews = 0;
  const handler: ReviewHandler = (body) => {
    const parsed = parseAdmissionReview(body);
    if (!parsed.ok) return { status: 400, body: { reason: parsed.reason } };
    reviews++;
    const patch = [{ op: 'add', path: '/metadata/labels/rollguard.io~1admitted', value: 'true' }];
    return {
      status: 200,
      body: {
        apiVersion: ADMISSION_API_VERSION,
        kind: ADMISSION_REVIEW_KIND,
        response: {
          uid: parsed.review.request!.uid,
          allowed: true,
          patchType: 'JSONPatch',
          patch: Buffer.from(JSON.stringify(patch)).toString('base64'),
        },
      },
    };
  };
  return { handler, reviews: () => reviews };
}

function webhookConfiguration(name: string, webhookName: string, namespace: string, port: number, caBundle?: string): V1MutatingWebhookConfiguration {
  return {
    metadata: { name },
    webhooks: [
      {
        name: webhookName,
        clientConfig: { url: `https://127.0.0.1:${port}/mutate`, ...(caBundle ? { caBundle } : {}) },
        failurePolicy: 'Fail',
        objectSelector: { matchLabels: ENABLED },
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } },
        rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['statefulsets'] }],
        sideEffects: 'None',
        admissionReviewVersions: ['v1'],
        timeoutSeconds: WEBHOOK_TIMEOUT_SECONDS,
      },
    ],
  };
}

interface Running {
  source: CertificateSource;
  server: WebhookServer;
  metrics: Metrics;
  reviews: () => number;
  stop(): Promise<void>;
}

/** A certificate source and a webhook server on 127.0.0.1:0, as main.ts wires them. */
async function startWebhook(opts: Omit<CertificateSourceOptions, 'logger' | 'metrics'>, maxRequestsPerConnection?: number): Promise<Running> {
  const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'silent' });
  const metrics = createMetrics();
  const source = createCertificateSource({ ...opts, logger, metrics });
  const { handler, reviews } = countingHandler();
  const server = createWebhookServer({
    host: '127.0.0.1',
    port: 0,
    certificates: source,
    routes: [{ path: '/mutate', handle: handler }],
    readiness: () => ({ ready: source.ready(), reasons: source.ready() ? [] : ['certificate not loaded'] }),
    logger,
    maxRequestsPerConnection,
  });
  const sourceStop = new AbortController();
  const serverStop = new AbortController();
  const stop = async (): Promise<void> => {
    serverStop.abort();
    await server.stopped();
    sourceStop.abort();
    await source.stopped();
  };
  try {
    await source.start(sourceStop.signal);
    await server.start(serverStop.signal);
  } catch (err) {
    await stop();
    throw err;
  }
  return { source, server, metrics, reviews, stop };
}

async function counterValue(metrics: Metrics, certificate: string): Promise<number> {
  return (await metrics.certificateRotations.get()).values.find((v) => v.labels.certificate === certificate)?.value ?? 0;
}

describe('webhook over self-managed TLS, called by the real API server', () => {
  const { kc, core, apps } = testCluster();
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const suffix = Math.random().toString(36).slice(2, 8);
  let namespace: string;
  const configurations: string[] = [];
  const running: Running[] = [];

  beforeAll(async () => {
    namespace = await createNamespace(core, 'webhook-tls');
  });
  afterAll(async () => {
    for (const r of running.splice(0).reverse()) await r.stop();
    for (const name of configurations) await admission.deleteMutatingWebhookConfiguration({ name }).catch(() => undefined);
    if (namespace) await core.deleteNamespace({ name: namespace });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  /** Registers a configuration whose caBundle rollguard fills in, then starts rollguard's half. */
  async function webhookFor(
    label: string,
    opts: Partial<CertificateSourceOptions> = {},
    maxRequestsPerConnection?: number,
  ): Promise<{ run: Running; configName: string; webhookName: string }> {
    const configName = `rollguard-${label}-${suffix}`;
    const webhookName = `${label}-${suffix}.rollguard.io`;
    // the port is known only once the server listens, and the server needs the certificate first:
    // register with a placeholder URL, then point it at the port
    configurations.push(configName);
    await admission.createMutatingWebhookConfiguration({ body: webhookConfiguration(configName, webhookName, namespace, 1) });
    const run = await startWebhook(
      {
        kubeConfig: kc,
        namespace,
        secretName: `rollguard-tls-${label}`,
        serviceName: 'rollguard',
        webhookConfigurationName: configName,
        extraIpAddresses: ['127.0.0.1'],
        keyBits: KEY_BITS,
        caKeyBits: KEY_BITS,
        ...opts,
      },
      maxRequestsPerConnection,
    );
    running.push(run);
    await admission.patchMutatingWebhookConfiguration({
      name: configName,
      body: [{ op: 'replace', path: '/webhooks/0/clientConfig/url', value: `https://127.0.0.1:${run.server.address().port}/mutate` }],
    });
    await waitUntil('the replica to be ready (caBundle holds its CA)', () => run.source.ready() || JSON.stringify(run.source.status()), {
      timeoutMs: 30_000,
    });
    return { run, configName, webhookName };
  }

  describe('serving', () => {
    let run: Running;
    let configName: string;
    let webhookName: string;

    beforeAll(async () => {
      ({ run, configName, webhookName } = await webhookFor('serve'));
    });

    it('stores the certificates in one kubernetes.io/tls Secret and injects its CA', async () => {
      const secret = await core.readNamespacedSecret({ name: 'rollguard-tls-serve', namespace });
      expect(secret.type).toBe('kubernetes.io/tls');
      expect(Object.keys(secret.data ?? {}).sort()).toEqual(['ca.crt', 'ca.key', 'tls.crt', 'tls.key']);
      const contents = secretContents(secret);
      if (contents.kind !== 'valid') throw new Error(`Secret not valid: ${JSON.stringify(contents)}`);
      expect(run.source.current()?.certPem).toBe(contents.bundle.serving.certPem);
      const config = await admission.readMutatingWebhookConfiguration({ name: configName });
      expect(Buffer.from(config.webhooks![0]!.clientConfig.caBundle!, 'base64').toString()).toBe(caBundlePem(contents.bundle));
      expect(run.source.status()).toMatchObject({ source: 'self-managed', notAfter: expect.any(String), caNotAfter: expect.any(String) });
      const expiry = await run.metrics.certificateExpiry.get();
      expect(expiry.values.map((v) => v.labels.certificate).sort()).toEqual(['ca', 'serving']);
    });

    it('sends a labelled StatefulSet through the webhook, and only a labelled one', async () => {
      const before = run.reviews();
      const created = await apps.createNamespacedStatefulSet({
        namespace,
        body: statefulSet('through-webhook', { replicas: 0, labels: ENABLED }),
      });
      expect(run.reviews()).toBe(before + 1);
      expect(created.metadata?.labels?.['rollguard.io/admitted']).toBe('true');
      await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('not-labelled', { replicas: 0 }) });
      expect(run.reviews()).toBe(before + 1);
      expect(await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_request_total', webhookName)).toBeGreaterThan(0);
    });

    it('puts the caBundle back after someone overwrites it', async () => {
      const foreign = await createCertificateAuthority({ commonName: 'someone-else', validitySeconds: 3600, keyBits: KEY_BITS });
      await admission.patchMutatingWebhookConfiguration({
        name: configName,
        body: [{ op: 'replace', path: '/webhooks/0/clientConfig/caBundle', value: Buffer.from(foreign.certPem).toString('base64') }],
      });
      const caPem = run.source.current()!.caPem!;
      await waitUntil('the caBundle to hold our CA again', async () => {
        const observed = observedWebhookConfiguration(await admission.readMutatingWebhookConfiguration({ name: configName }));
        const bundle = observed?.webhooks[0]?.caBundle;
        return (bundle !== undefined && bundleHolds(bundle, caPem) && !bundleHolds(bundle, foreign.certPem)) || `caBundle ${bundle?.slice(0, 40)}…`;
      }, { timeoutMs: 15_000 });
      await waitUntil('the replica to be ready again', () => run.source.ready(), { timeoutMs: 15_000 });
      await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('after-restore', { replicas: 0, labels: ENABLED }) });
    });
  });

  it('rotates serving certificates and the CA under load with no failed admission', async () => {
    // serving lives 6 s and is renewed at half-life; the CA lives 24 s and is renewed at 12 s,
    // so 20 s of load see several serving rotations and one CA rotation with its overlap steps
    const { run, webhookName } = await webhookFor(
      'rotate',
      { servingValiditySeconds: 6, caValiditySeconds: 24, renewBeforeFraction: 0.5, caPropagationSeconds: 1 },
      // a new connection, so a new handshake, every few reviews: a stale certificate would show
      5,
    );
    const LOAD_MS = 20_000;
    const WORKERS = 3;
    const failures: string[] = [];
    let written = 0;
    const served = new Set<string>();
    // each worker writes one StatefulSet over and over (CREATE once, then UPDATEs): every write is a review,
    // while the shared StatefulSet controller sees three keys rather than thousands of new sets
    const names = Array.from({ length: WORKERS }, (_, w) => `load-${w}`);
    for (const name of names) await apps.createNamespacedStatefulSet({ namespace, body: statefulSet(name, { replicas: 0, labels: ENABLED }) });
    const reviewsBefore = run.reviews();
    const deadline = performance.now() + LOAD_MS;
    const worker = async (name: string): Promise<void> => {
      for (let i = 0; performance.now() < deadline; i++) {
        served.add(run.source.current()!.certPem);
        try {
          await apps.patchNamespacedStatefulSet({
            name,
            namespace,
            body: [{ op: 'add', path: '/metadata/labels/rollguard.io~1write', value: String(i) }],
          });
          written++;
        } catch (err) {
          failures.push(`${name} write ${i} at ${new Date().toISOString()}: ${err instanceof Error ? err.message.slice(0, 300) : String(err)}`);
        }
      }
    };
    await Promise.all(names.map((name) => worker(name)));

    expect(failures).toEqual([]);
    expect(written).toBeGreaterThan(100);
    // an UPDATE that meets a concurrent write (the controller's status) is retried by the API server, admission included
    expect(run.reviews() - reviewsBefore).toBeGreaterThanOrEqual(written);
    expect(await counterValue(run.metrics, 'serving')).toBeGreaterThanOrEqual(3);
    expect(await counterValue(run.metrics, 'ca')).toBeGreaterThanOrEqual(1);
    expect(served.size).toBeGreaterThanOrEqual(4);
    expect(await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_rejection_count', webhookName)).toBe(0);
    expect(await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_fail_open_count', webhookName)).toBe(0);
    expect(await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_request_total', webhookName)).toBeGreaterThanOrEqual(written);

    // the rotation finished: the old CA left the Secret once the serving certificate moved to the new one
    await waitFor('the previous CA to be dropped', async () => {
      const contents = secretContents(await core.readNamespacedSecret({ name: 'rollguard-tls-rotate', namespace }));
      if (contents.kind !== 'valid') throw new Error(`Secret ${contents.kind}`);
      if (contents.bundle.previousCaPem !== undefined) throw new Error('ca-previous.crt still there');
      return isSignedBy(contents.bundle.serving.certPem, contents.bundle.ca.certPem) ? true : undefined;
    }, { timeoutMs: 15_000 });
  }, 90_000);
});
