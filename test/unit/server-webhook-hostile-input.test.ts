import https from 'node:https';
import tls from 'node:tls';
import fc from 'fast-check';
import jsonpatch, { type Operation } from 'fast-json-patch';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdmissionHandler } from '../../src/restarter/admission-handler.js';
import { holdPartitionMutator } from '../../src/rollout/partition-hold-mutator.js';
import { createMetrics, type Metrics } from '../../src/metrics.js';
import type { ObjectVersion, VersionLookup } from '../../src/restarter/annotations.js';
import { createWebhookServer, type WebhookServer } from '../../src/server/webhook-server.js';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../../src/tls/certificates.js';
import { WORKLOAD_KINDS } from '../../src/kube/workloads.js';
import { propertyRuns } from '../env/property-runs.js';
import { staticCertificateSource } from '../env/static-certificate-source.js';

const KEY_BITS = 2048;
const VALIDITY_SECONDS = 3600;
/** A hung request fails the test instead of the run. */
const REPLY_TIMEOUT_MS = 10_000;
/** Thousands of HTTPS round trips: a few seconds on a quiet machine, more on a busy one. */
const PROPERTY_TIMEOUT_MS = 120_000;
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
    metadata: { name: 'db', namespace: 'shop', labels: { 'rollguard.io/enabled': 'true' }, annotations: { 'rollguard.io/rollout': 'health-gated' } },
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
  ca = '';
  port = 0;

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
      routes: [{ path: '/mutate', ...createAdmissionHandler({ cachesSynced: () => true, lookup, mutators: [holdPartitionMutator], metrics: this.metrics, logger }) }],
      readiness: () => ({ ready: true, reasons: [] }),
      logger,
    });
    await this.server.start(this.controller.signal);
    this.port = this.server.address().port;
    // one handshake per connection, not per review: thousands of reviews stay fast
    this.agent = new https.Agent({ keepAlive: true, maxSockets: 4, ca: this.ca });
  }

  /**
   * Sends a request whose body stops short of its content-length, then half-closes: resolves with
   * what came back (maybe nothing) once the server closes the connection.
   */
  sendShort(declaredLength: number, body: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port: this.port, ca: this.ca }, () => {
        socket.write(`POST /mutate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${declaredLength}\r\n\r\n${body}`);
        socket.end();
      });
      const chunks: Buffer[] = [];
      const timer = setTimeout(() => socket.destroy(new Error(`the server held a short body for ${REPLY_TIMEOUT_MS} ms`)), REPLY_TIMEOUT_MS);
      socket.on('data', (c: Buffer) => chunks.push(c));
      socket.on('close', () => {
        clearTimeout(timer);
        resolve(Buffer.concat(chunks).toString('utf8'));
      });
      socket.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
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

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Path = (string | number)[];

/** Every path to a value inside `value`, the root included. */
function pathsOf(value: Json, at: Path = []): Path[] {
  const found: Path[] = [at];
  if (Array.isArray(value)) value.forEach((v, i) => found.push(...pathsOf(v, [...at, i])));
  else if (value !== null && typeof value === 'object') for (const [k, v] of Object.entries(value)) found.push(...pathsOf(v, [...at, k]));
  return found;
}

/** `value` with the value at `path` replaced; the root path replaces the whole. */
function replacedAt(value: Json, path: Path, replacement: Json): Json {
  if (path.length === 0) return replacement;
  const [head, ...rest] = path;
  if (Array.isArray(value)) return value.map((v, i) => (i === head ? replacedAt(v, rest, replacement) : v));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, k === head ? replacedAt(v, rest, replacement) : v]));
  }
  return value;
}

/** A value of any JSON type, so that at any path it is of the wrong type more often than not. */
const anyJson: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(null, true, false, 0, -1, 1e308, '', 'x', [], {}, [null], { name: null }),
  fc.string(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>,
);

/** A review of an opted-in StatefulSet with one to three values, anywhere in it, replaced by others of any type. */
const wrongTyped: fc.Arbitrary<{ uid: string | undefined; body: Json }> = fc
  .tuple(fc.constantFrom('CREATE', 'UPDATE'), fc.array(fc.tuple(fc.nat(), anyJson), { minLength: 1, maxLength: 3 }))
  .map(([operation, replacements]) => {
    let body = statefulSetReview('u-wrong', operation) as Json;
    for (const [at, replacement] of replacements) {
      const paths = pathsOf(body);
      body = replacedAt(body, paths[at % paths.length]!, replacement);
    }
    const uid = (body as { request?: { uid?: unknown } } | null)?.request?.uid;
    return { uid: typeof uid === 'string' ? uid : undefined, body };
  });

const GVK = { group: 'apps', version: 'v1', kind: 'StatefulSet' };

/** A well-formed envelope around an object and oldObject of random JSON. */
const randomObjects: fc.Arbitrary<{ uid: string; body: Json }> = fc
  .record({
    uid: fc.string({ minLength: 1, maxLength: 40 }),
    operation: fc.constantFrom('CREATE', 'UPDATE'),
    namespace: anyJson,
    subResource: fc.option(anyJson, { nil: undefined }),
    object: fc.jsonValue({ maxDepth: 6 }) as fc.Arbitrary<Json>,
    oldObject: fc.jsonValue({ maxDepth: 6 }) as fc.Arbitrary<Json>,
  })
  .map(({ uid, subResource, ...request }) => ({
    uid,
    body: {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: { uid, kind: GVK, resource: { group: 'apps', version: 'v1', resource: 'statefulsets' }, ...(subResource === undefined ? {} : { subResource }), ...request },
    },
  }));

/** What the API server would accept as an answer: a 200 carrying an allowing response for this uid whose patch applies, or a 4xx that says why. */
function expectAnswer(res: Reply, sent: Json, uid: string | undefined, { checkPatch = true } = {}): void {
  expect(res.status, JSON.stringify(res.body)).not.toBeGreaterThanOrEqual(500);
  if (res.status >= 400 && res.status < 500) {
    expect(res.body).toMatchObject({ reason: expect.stringMatching(/\S/) });
    return;
  }
  expect(res.status).toBe(200);
  const review = res.body as { apiVersion?: unknown; kind?: unknown; response?: { uid?: unknown; allowed?: unknown; patchType?: unknown; patch?: unknown } };
  expect(review.apiVersion).toBe('admission.k8s.io/v1');
  expect(review.kind).toBe('AdmissionReview');
  if (uid !== undefined) expect(review.response?.uid).toBe(uid);
  expect(review.response?.allowed).toBe(true);
  if (review.response?.patch === undefined || !checkPatch) return;
  expect(review.response.patchType).toBe('JSONPatch');
  const ops = JSON.parse(Buffer.from(String(review.response.patch), 'base64').toString('utf8')) as Operation[];
  const object = (sent as { request: { object: Json } }).request.object;
  // the API server applies the patch to the object it sent: it must apply
  jsonpatch.applyPatch(structuredClone(object), ops, true, true);
}

/** POSTs a review and checks the answer, and that no mutator threw on it (the handler's "error" result). */
async function expectAnswered(webhook: WebhookUnderTest, body: Json, uid: string | undefined): Promise<void> {
  const errorsBefore = await reviewsWithResult(webhook.metrics, 'error');
  const res = await webhook.post(JSON.stringify(body));
  expectAnswer(res, body, uid);
  expect(await reviewsWithResult(webhook.metrics, 'error'), 'a mutator threw on this review').toBe(errorsBefore);
}

const CLOSED_LABELS: Record<string, Record<string, readonly string[]>> = {
  rollguard_admission_duration_seconds: { operation: ['CREATE', 'UPDATE', 'DELETE', 'CONNECT', 'invalid'] },
  // "error" is a mutator that threw: hostile input must be answered, not crash a mutator
  rollguard_admission_reviews_total: { result: ['patched', 'unchanged', 'not_synced', 'out_of_scope', 'invalid'], kind: [...WORKLOAD_KINDS, 'other'] },
};

/** Fails when an admission metric carries a label value outside its closed set. */
async function expectClosedLabels(metrics: Metrics): Promise<void> {
  for (const [name, labels] of Object.entries(CLOSED_LABELS)) {
    const { values } = await metrics.registry.getSingleMetric(name)!.get();
    for (const v of values) {
      for (const [label, allowed] of Object.entries(labels)) {
        if (v.labels[label] !== undefined) expect(allowed, `${name}{${label}}`).toContain(String(v.labels[label]));
      }
    }
  }
}

describe('/mutate answers every body with a 200 review or a 4xx reason (property-based, real HTTPS server)', () => {
  const webhook = new WebhookUnderTest();
  beforeAll(() => webhook.start());
  afterAll(async () => {
    await expectClosedLabels(webhook.metrics);
    await webhook.stop();
  }, PROPERTY_TIMEOUT_MS);

  it('reviews with wrong types at every depth', async () => {
    await fc.assert(
      fc.asyncProperty(wrongTyped, ({ uid, body }) => expectAnswered(webhook, body, uid)),
      propertyRuns(1500),
    );
    await expectClosedLabels(webhook.metrics);
  }, PROPERTY_TIMEOUT_MS);

  it('well-formed envelopes around random objects', async () => {
    await fc.assert(
      fc.asyncProperty(randomObjects, ({ uid, body }) => expectAnswered(webhook, body, uid)),
      propertyRuns(1000),
    );
    await expectClosedLabels(webhook.metrics);
  }, PROPERTY_TIMEOUT_MS);

  it('random JSON and random text', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.jsonValue().map((v) => JSON.stringify(v)), fc.string({ unit: 'binary' })), async (text) => {
        const res = await webhook.post(text);
        expect(res.status, JSON.stringify(res.body)).toBeGreaterThanOrEqual(400);
        expect(res.status).toBeLessThan(500);
        expect(res.body).toMatchObject({ reason: expect.stringMatching(/\S/) });
      }),
      propertyRuns(500),
    );
  }, PROPERTY_TIMEOUT_MS);

  it('truncated reviews', async () => {
    const whole = JSON.stringify(statefulSetReview('u-cut', 'UPDATE'));
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: whole.length - 1 }), async (cut) => {
        const res = await webhook.post(whole.slice(0, cut));
        expect(res.status).toBe(400);
        expect(res.body).toMatchObject({ reason: expect.stringMatching(/not valid JSON/) });
      }),
      propertyRuns(300),
    );
  }, PROPERTY_TIMEOUT_MS);

  it('bodies shorter than their content-length: the connection ends, the server answers the next review', async () => {
    const whole = JSON.stringify(statefulSetReview('u-short'));
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: whole.length - 1 }), async (cut) => {
        const reply = await webhook.sendShort(whole.length, whole.slice(0, cut));
        // nothing, or an HTTP error status: never a 5xx
        if (reply !== '') expect(reply).toMatch(/^HTTP\/1\.1 4\d\d /);
      }),
      propertyRuns(50),
    );
    expectAnswer(await webhook.post(whole), statefulSetReview('u-short') as Json, 'u-short');
  }, PROPERTY_TIMEOUT_MS);

  it('__proto__, constructor and prototype keys anywhere in a review', async () => {
    const whole = JSON.stringify(statefulSetReview('u-proto'));
    const opens = [...whole.matchAll(/\{/g)].map((m) => m.index);
    const poison = fc.constantFrom('"__proto__":{"polluted":"yes"}', '"constructor":{"prototype":{"polluted":"yes"}}', '"prototype":{"polluted":"yes"}', '"__proto__":null', '"constructor":"x"');
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: opens.length - 1 }), poison, async (i, key) => {
        const at = opens[i]! + 1;
        const text = `${whole.slice(0, at)}${key},${whole.slice(at)}`;
        const res = await webhook.post(text);
        expectAnswer(res, JSON.parse(text) as Json, res.status === 200 ? 'u-proto' : undefined);
        expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      }),
      propertyRuns(300),
    );
  }, PROPERTY_TIMEOUT_MS);
});

describe('/mutate with huge and deeply nested reviews (real HTTPS server)', () => {
  const webhook = new WebhookUnderTest();
  beforeAll(() => webhook.start());
  afterAll(async () => {
    await expectClosedLabels(webhook.metrics);
    await webhook.stop();
  });

  type Review = { request: { object: { spec: { template: { metadata: { annotations: Record<string, string> }; spec: { containers: Record<string, Json>[] } } } } } };
  const reviewWith = (change: (review: Review) => void, operation = 'UPDATE'): Json => {
    const review = statefulSetReview('u-big', operation);
    change(review as unknown as Review);
    return review as Json;
  };
  const DEEP = '"deep-placeholder"';
  /** JSON text of `review` with the placeholder replaced by values nested `depth` deep (too deep for JSON.stringify). */
  const deepText = (review: Json, depth: number, open: string, close: string): string =>
    JSON.stringify(review).replace(DEEP, `${open.repeat(depth)}1${close.repeat(depth)}`);

  const cases: { name: string; text: string; patchChecked?: false; rejected?: RegExp }[] = [
    {
      name: '20 000 template annotations',
      text: JSON.stringify(
        reviewWith((r) => {
          r.request.object.spec.template.metadata.annotations = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`example.com/k${i}`, 'v']));
        }),
      ),
    },
    {
      name: '20 000 env entries that reference objects',
      text: JSON.stringify(
        reviewWith((r) => {
          r.request.object.spec.template.spec.containers[0]!.env = Array.from({ length: 20_000 }, (_, i) => ({ name: `E${i}`, valueFrom: { configMapKeyRef: { name: `cm-${i}`, key: 'k' } } }));
        }),
      ),
    },
    {
      name: '10 000 containers',
      text: JSON.stringify(
        reviewWith((r) => {
          r.request.object.spec.template.spec.containers = Array.from({ length: 10_000 }, (_, i) => ({ name: `c${i}`, image: 'x', envFrom: [{ secretRef: { name: 'db-tls' } }] }));
        }),
      ),
    },
    {
      name: 'an object nested 100 000 deep in the pod spec',
      text: deepText(reviewWith((r) => (r.request.object.spec.template.spec.containers[0]!.x = DEEP.slice(1, -1))), 100_000, '{"a":', '}'),
      patchChecked: false,
      rejected: /nested more than 100 levels deep/,
    },
    {
      name: 'arrays nested 1 000 000 deep in the spec (UPDATE: compared with the old spec)',
      text: deepText(reviewWith((r) => ((r.request.object.spec as unknown as Record<string, Json>).x = DEEP.slice(1, -1))), 1_000_000, '[', ']'),
      patchChecked: false,
      rejected: /nested more than 100 levels deep/,
    },
    {
      name: 'arrays nested 1 000 000 deep in oldObject',
      text: deepText(reviewWith((r) => ((r.request as unknown as Record<string, Json>).oldObject = DEEP.slice(1, -1))), 1_000_000, '[', ']'),
      patchChecked: false,
      rejected: /nested more than 100 levels deep/,
    },
  ];

  it.each(cases)('$name: a 200 review or a 4xx reason, no mutator error', async ({ text, patchChecked, rejected }) => {
    const errorsBefore = await reviewsWithResult(webhook.metrics, 'error');
    const res = await webhook.post(text);
    if (rejected) expect(res).toMatchObject({ status: 400, body: { reason: expect.stringMatching(rejected) } });
    // applying the patch to a value this deep would overflow the test's own stack
    expectAnswer(res, patchChecked === false ? { request: { object: {} } } : (JSON.parse(text) as Json), 'u-big', { checkPatch: patchChecked !== false });
    expect(await reviewsWithResult(webhook.metrics, 'error'), 'a mutator threw on this review').toBe(errorsBefore);
  }, PROPERTY_TIMEOUT_MS);
});
