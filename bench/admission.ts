/**
 * Admission throughput and latency: rollguard's /mutate (TLS, keep-alive, a ~10 KB
 * StatefulSet review that gets a patch) against a bare Fastify HTTPS route that echoes
 * `allowed: true`, on the same machine in the same run. The servers run in a child
 * process (one core), the load generator here (the other core).
 *
 *   npm run build:bench && node dist/bench/admission.js [seconds]
 */
import { fork, type ChildProcess } from 'node:child_process';
import https from 'node:https';
import { fileURLToPath } from 'node:url';
import Fastify from 'fastify';
import { pino } from 'pino';
import { createMetrics } from '../src/metrics.js';
import { createAdmissionHandler } from '../src/admission/handler.js';
import type { ObjectVersion } from '../src/restarter/annotations.js';
import { createWebhookServer } from '../src/server/webhook-server.js';
import { staticCertificateSource } from '../test/env/static-certificate-source.js';
import { createCertificateAuthority, createSignedCertificate } from '../src/tls/certificates.js';

const SECONDS = Number(process.argv[2] ?? 5);
const CONCURRENCY = 16;
const TARGET_RATE = 1_000;

/** A realistic review: 4 containers, 20 env refs, volumes, ~10 KB of JSON. */
function review(uid: string): string {
  const env = Array.from({ length: 20 }, (_, i) => ({
    name: `SETTING_${i}`,
    valueFrom: i % 2 ? { configMapKeyRef: { name: `config-${i % 5}`, key: `k${i}` } } : { secretKeyRef: { name: `secret-${i % 3}`, key: `k${i}` } },
  }));
  const container = (name: string) => ({
    name,
    image: `registry.example/${name}:1.2.3`,
    env,
    envFrom: [{ configMapRef: { name: 'shared-config' } }],
    resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
    ports: [{ containerPort: 8080, name: 'http' }],
    readinessProbe: { httpGet: { path: '/ready', port: 8080 }, periodSeconds: 5 },
    volumeMounts: [{ name: 'config', mountPath: '/etc/app' }, { name: 'tls', mountPath: '/etc/tls' }],
  });
  const set = {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: 'db', namespace: 'prod', labels: { 'rollguard.io/enabled': 'true', app: 'db' }, annotations: { 'owner': 'team-a' } },
    spec: {
      replicas: 3,
      serviceName: 'db',
      selector: { matchLabels: { app: 'db' } },
      template: {
        metadata: { labels: { app: 'db' }, annotations: { 'prometheus.io/scrape': 'true' } },
        spec: {
          containers: ['db', 'exporter', 'backup', 'proxy'].map(container),
          initContainers: [container('init')],
          volumes: [
            { name: 'config', configMap: { name: 'db-config' } },
            { name: 'tls', secret: { secretName: 'db-tls' } },
            { name: 'bundle', projected: { sources: [{ configMap: { name: 'ca-bundle' } }, { secret: { name: 'db-creds' } }] } },
          ],
        },
      },
    },
  };
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid,
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      operation: 'CREATE',
      namespace: 'prod',
      name: 'db',
      object: set,
      userInfo: { username: 'admin' },
    },
  });
}

async function serveInChild(): Promise<void> {
  const ca = await createCertificateAuthority({ commonName: 'bench-ca', validitySeconds: 3600, keyBits: 2048 });
  const pair = await createSignedCertificate(ca, { commonName: 'bench', ipAddresses: ['127.0.0.1'], usage: 'server', validitySeconds: 3600, keyBits: 2048 });
  const logger = pino({ level: 'warn' });
  const metrics = createMetrics();
  const version: ObjectVersion = { uid: '0b6a3e7e-4c1b-4f0e-9a7e-6f3c2d1e0f9a', resourceVersion: '123456', ignored: false };
  const webhook = createWebhookServer({
    host: '127.0.0.1',
    port: 0,
    certificates: staticCertificateSource({ ...pair, caPem: ca.certPem }),
    handler: createAdmissionHandler({ cachesSynced: () => true, lookup: () => version, metrics }),
    readiness: () => ({ ready: true, reasons: [] }),
    logger,
    metrics,
    ...(process.env.BENCH_MAX_REQUESTS_PER_CONNECTION ? { maxRequestsPerConnection: Number(process.env.BENCH_MAX_REQUESTS_PER_CONNECTION) } : {}),
  });
  await webhook.start(new AbortController().signal);
  const bare = Fastify({ https: { cert: pair.certPem, key: pair.keyPem }, bodyLimit: 8 * 1024 * 1024 });
  bare.post('/mutate', async (req) => {
    const uid = (req.body as { request: { uid: string } }).request.uid;
    return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid, allowed: true } };
  });
  await bare.listen({ host: '127.0.0.1', port: 0 });
  const barePort = (bare.server.address() as { port: number }).port;
  process.send?.({ rollguard: webhook.address().port, bare: barePort });
}

interface Result {
  requests: number;
  perSecond: number;
  p50: number;
  p99: number;
  errors: number;
}

function post(agent: https.Agent, port: number, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = https.request(
      { host: '127.0.0.1', port, path: '/mutate', method: 'POST', agent, rejectUnauthorized: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve(Number(process.hrtime.bigint() - started) / 1e6) : reject(new Error(`status ${res.statusCode}`))));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

/** Closed loop: CONCURRENCY requests always in flight. */
async function throughput(port: number, body: string): Promise<Result> {
  const agent = new https.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const latencies: number[] = [];
  let errors = 0;
  const deadline = Date.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < deadline) {
        try {
          latencies.push(await post(agent, port, body));
        } catch {
          errors++;
        }
      }
    }),
  );
  agent.destroy();
  latencies.sort((a, b) => a - b);
  return { requests: latencies.length, perSecond: latencies.length / SECONDS, p50: percentile(latencies, 50), p99: percentile(latencies, 99), errors };
}

/** Open loop at a fixed rate, so latency is not hidden by the loop waiting on itself. */
async function atRate(port: number, body: string, rate: number): Promise<Result> {
  // a fixed pool, opened (TLS handshakes and all) before the clock starts, as the API server keeps one
  const agent = new https.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  await Promise.all(Array.from({ length: CONCURRENCY * 4 }, () => post(agent, port, body)));
  await openLoop(agent, port, body, rate, 1);
  const result = await openLoop(agent, port, body, rate, SECONDS);
  agent.destroy();
  return result;
}

async function openLoop(agent: https.Agent, port: number, body: string, rate: number, seconds: number): Promise<Result> {
  const latencies: number[] = [];
  let errors = 0;
  const total = rate * seconds;
  const started = Date.now();
  const pending: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - Date.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(post(agent, port, body).then((ms) => void latencies.push(ms), () => void errors++));
  }
  await Promise.all(pending);
  latencies.sort((a, b) => a - b);
  return { requests: latencies.length, perSecond: latencies.length / ((Date.now() - started) / 1000), p50: percentile(latencies, 50), p99: percentile(latencies, 99), errors };
}

const fmt = (r: Result): string =>
  `${r.perSecond.toFixed(0).padStart(6)} req/s  p50 ${r.p50.toFixed(3)} ms  p99 ${r.p99.toFixed(3)} ms  (${r.requests} requests, ${r.errors} errors)`;

async function main(): Promise<void> {
  // BENCH_SERVER_NODE_OPTIONS="--max-semi-space-size=32" shows the effect of fewer young-generation collections
  const execArgv = (process.env.BENCH_SERVER_NODE_OPTIONS ?? '').split(' ').filter(Boolean);
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--serve'], { stdio: 'inherit', execArgv });
  const ports = await new Promise<{ rollguard: number; bare: number }>((resolve) => child.once('message', (m) => resolve(m as { rollguard: number; bare: number })));
  try {
    const body = review('3f1c2a40-0000-4000-8000-000000000001');
    console.log(`review body: ${(Buffer.byteLength(body) / 1024).toFixed(1)} KB; ${SECONDS} s per run; servers in one child process, load from this one`);
    await throughput(ports.rollguard, body); // warm-up: JIT and TLS sessions
    await throughput(ports.bare, body);
    const rgMax = await throughput(ports.rollguard, body);
    const bareMax = await throughput(ports.bare, body);
    // each open loop runs twice, in turn, and the second pair counts: the first one after the
    // closed-loop runs pays for the load generator's own garbage collection
    await atRate(ports.rollguard, body, TARGET_RATE);
    await atRate(ports.bare, body, TARGET_RATE);
    const rgRate = await atRate(ports.rollguard, body, TARGET_RATE);
    const bareRate = await atRate(ports.bare, body, TARGET_RATE);
    console.log(`max throughput (${CONCURRENCY} in flight, keep-alive):`);
    console.log(`  rollguard /mutate   ${fmt(rgMax)}`);
    console.log(`  bare Fastify route  ${fmt(bareMax)}`);
    console.log(`  ratio rollguard/bare: ${(rgMax.perSecond / bareMax.perSecond).toFixed(2)}`);
    console.log(`at ${TARGET_RATE} reviews/s (open loop):`);
    console.log(`  rollguard /mutate   ${fmt(rgRate)}`);
    console.log(`  bare Fastify route  ${fmt(bareRate)}`);
    console.log(`  p99 ratio rollguard/bare: ${(rgRate.p99 / bareRate.p99).toFixed(2)}`);
  } finally {
    child.kill();
  }
}

if (process.argv.includes('--serve')) void serveInChild();
else void main();
