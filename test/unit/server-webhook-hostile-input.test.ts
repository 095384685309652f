import https from 'node:https';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdmissionHandler } from '../../src/admission/handler.js';
import { holdPartitionMutator } from '../../src/admission/partition-hold-mutator.js';
import { createMetrics, type Metrics } from '../../src/metrics.js';
import type { ObjectVersion, VersionLookup } from '../../src/restarter/annotations.js';
import { createWebhookServer, type WebhookServer } from '../../src/server/webhook-server.js';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../../src/tls/certificates.js';
import { staticCertificateSource } from '../env/static-certificate-source.js';

const KEY_BITS = 2048;
const VALIDITY_SECONDS = 3600;
/** A hung request fails the test instead of the run. */
const REPLY_TIMEOUT_MS = 10_000;
const DURATION_METRIC = 'rollguard_admission_duration_seconds';

interface Reply {
  status: number;
  body: unknown;
}

const versions: Record<string, ObjectVersion> = {
  'ConfigMap/shop/db-config': { uid: 'cm-uid', resourceVersion: '11', ignored: false },
  'Secret/shop/db-tls': { uid: 'tls-uid', resourceVersion: '22', ignored: false },
};
const lookup: VersionLookup = (kind, namespace, name) => versions[`${kind}/${namespace}/${name}`];

export function statefulSetReview(uid: string, operation = 'CREATE'): Record<string, unknown> {
  const object = {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: 'db', namespace: 'shop', labels: { 'rollguard.io/enabled': 'true' }, annotations: { 'rollguard.io/health-gated': 'true' } },
    spec: {
      serviceName: 'db',
      replicas: 3,
      selector: { matchLabels: { app: 'db' } },
      updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: 0 } },
      template: {
        metadata: { labels: { app: 'db' }, annotations: { 'configmap.rollguard.io/db-config': 'cm-uid/10' } },
        spec: {
          initContainers: [{ name: 'init', image: 'busybox', env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'db-config', key: 'a' } } }] }],
          containers: [
            {
              name: 'db',
              image: 'postgres:16',
              env: [{ name: 'P', valueFrom: { secretKeyRef: { name: 'db-tls', key: 'p' } } }],
              envFrom: [{ secretRef: { name: 'db-tls' } }, { configMapRef: { name: 'db-config' } }],
            },
          ],
          volumes: [
            { name: 'config', configMap: { name: 'db-config' } },
            { name: 'tls', secret: { secretName: 'db-tls' } },
            { name: 'all', projected: { sources: [{ configMap: { name: 'db-config' } }, { secret: { name: 'db-tls' } }] } },
          ],
        },
      },
    },
  };
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid,
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      namespace: 'shop',
      name: 'db',
      operation,
      object,
      ...(operation === 'UPDATE' ? { oldObject: structuredClone(object) } : {}),
    },
  };
}

/** The number of label sets of a metric; a histogram's buckets (`le`) are one series with it. */
async function seriesCount(metrics: Metrics, name: string): Promise<number> {
  const metric = metrics.registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  const { values } = await metric.get();
  return new Set(values.map(({ labels: { le: _bucket, ...labels } }) => JSON.stringify(labels))).size;
}

async function reviewsWithResult(metrics: Metrics, result: string): Promise<number> {
  const { values } = await metrics.admissionReviews.get();
  return values.find((v) => v.labels.result === result)?.value ?? 0;
}

export class WebhookUnderTest {
  readonly metrics = createMetrics();
  private readonly controller = new AbortController();
  private server?: WebhookServer;
  private agent?: https.Agent;
  private ca = '';
  private port = 0;

  async start(): Promise<void> {
    const authority: KeyPairPem = await createCertificateAuthority({ commonName: 'hostile-input-ca', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS });
    const leaf = await createSignedCertificate(authority, {
      commonName: 'webhook',
      validitySeconds: VALIDITY_SECONDS,
      keyBits: KEY_BITS,
      usage: 'server',
      ipAddresses: ['127.0.0.1'],
    });
    this.ca = authority.certPem;
    const logger = pino({ level: 'silent' });
    this.server = createWebhookServer({
      host: '127.0.0.1',
      port: 0,
      certificates: staticCertificateSource(leaf),
      handler: createAdmissionHandler({ cachesSynced: () => true, lookup, mutators: [holdPartitionMutator], metrics: this.metrics, logger }),
      readiness: () => ({ ready: true, reasons: [] }),
      logger,
      metrics: this.metrics,
    });
    await this.server.start(this.controller.signal);
    this.port = this.server.address().port;
    // one handshake per connection, not per review: thousands of reviews stay fast
    this.agent = new https.Agent({ keepAlive: true, maxSockets: 4, ca: this.ca });
  }

  async stop(): Promise<void> {
    this.agent?.destroy();
    this.controller.abort();
    await this.server?.stopped();
  }

  /** POSTs `body` to /mutate as it is, JSON or not. */
  post(body: string | Buffer, contentType = 'application/json'): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const req = https.request(
        {
          host: '127.0.0.1',
          port: this.port,
          method: 'POST',
          path: '/mutate',
          agent: this.agent,
          timeout: REPLY_TIMEOUT_MS,
          headers: { 'content-type': contentType, 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // not JSON: the assertion shows the text
            }
            resolve({ status: res.statusCode ?? 0, body: parsed });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer to /mutate within ${REPLY_TIMEOUT_MS} ms`)));
      req.on('error', reject);
      req.end(body);
    });
  }
}

describe('/mutate under hostile input, real HTTPS server and admission handler', () => {
  const webhook = new WebhookUnderTest();
  beforeAll(() => webhook.start());
  afterAll(() => webhook.stop());

  it('keeps one duration series per operation whatever operation strings clients send', async () => {
    // every label value the closed set can take, once
    for (const operation of ['CREATE', 'UPDATE', 'DELETE', 'CONNECT', 'not-an-operation']) {
      await webhook.post(JSON.stringify(statefulSetReview('u-warm', operation)));
    }
    await webhook.post(JSON.stringify({ ...statefulSetReview('u-warm'), request: { uid: 'u-warm', operation: 42 } }));
    const before = await seriesCount(webhook.metrics, DURATION_METRIC);

    for (let i = 0; i < 200; i++) {
      const res = await webhook.post(JSON.stringify(statefulSetReview(`u-${i}`, `op-${i}-${'x'.repeat(i)}`)));
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ reason: expect.stringMatching(/request\.operation/) });
    }

    expect(await seriesCount(webhook.metrics, DURATION_METRIC)).toBe(before);
    expect(before).toBe(5);
    expect(await reviewsWithResult(webhook.metrics, 'error')).toBe(0);
  });
});
