import https from 'node:https';
import { staticCertificateSource } from '../test/env/static-certificate-source.js';
import tls from 'node:tls';
import { performance } from 'node:perf_hooks';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { Registry } from 'prom-client';
import { startControlPlane } from '../src/dev/control-plane.js';
import { createMetrics } from '../src/metrics.js';
import type { ReviewHandler } from '../src/admission/review.js';
import { createWebhookServer } from '../src/server/webhook-server.js';
import { createCertificateSource } from '../src/tls/certificate-source.js';
import {
  certificateFingerprint,
  certificateInfo,
  createCertificateAuthority,
  createSignedCertificate,
} from '../src/tls/certificates.js';
import { nextBundle, renewalPolicy } from '../src/tls/renewal.js';

// Cost of the webhook's TLS: full handshakes, /mutate over kept-alive connections on the server's one
// event loop (the load comes from a worker thread, so it runs on the other core), and the time from
// "renew" to "new handshakes get the new certificate", in process and through a real Secret.
// Prints figures; asserts nothing.
// Run: npm run bench -- tls-handshake   (BENCH_CLUSTER=0 skips the control plane)

const KEY_BITS = 2048;
const VALIDITY_SECONDS = 3600;
const SEQUENTIAL_HANDSHAKES = Number(process.env.BENCH_HANDSHAKES ?? 300);
const CONCURRENT_HANDSHAKES = SEQUENTIAL_HANDSHAKES * 2;
const HANDSHAKE_CONCURRENCY = 8;
const LOAD_SECONDS = Number(process.env.BENCH_LOAD_SECONDS ?? 5);
const LOAD_CONCURRENCY = 16;
const SWAPS = 20;
/** serving certificates of a few seconds, renewed at half-life: each renewal is one sample */
const CLUSTER_SERVING_SECONDS = 4;
const CLUSTER_ROTATIONS = Number(process.env.BENCH_ROTATIONS ?? 8);

type Job =
  | { kind: 'handshakes'; port: number; caPem: string; count: number; concurrency: number }
  | { kind: 'load'; port: number; caPem: string; seconds: number; concurrency: number; body: string };

interface JobResult {
  elapsedMs: number;
  done: number;
  errors: number;
  latenciesMs: number[];
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
}

function summary(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  return `p50 ${percentile(sorted, 50).toFixed(2)} ms, p99 ${percentile(sorted, 99).toFixed(2)} ms, max ${(sorted.at(-1) ?? NaN).toFixed(2)} ms`;
}

function handshake(port: number, caPem: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: caPem }, () => {
      const fingerprint = socket.getPeerCertificate().fingerprint256;
      socket.destroy();
      resolve(fingerprint);
    });
    socket.on('error', reject);
  });
}

async function runJob(job: Job): Promise<JobResult> {
  const latenciesMs: number[] = [];
  let done = 0;
  let errors = 0;
  const started = performance.now();
  if (job.kind === 'handshakes') {
    let next = 0;
    await Promise.all(
      Array.from({ length: job.concurrency }, async () => {
        while (next++ < job.count) {
          const t = performance.now();
          try {
            await handshake(job.port, job.caPem);
            latenciesMs.push(performance.now() - t);
            done++;
          } catch {
            errors++;
          }
        }
      }),
    );
  } else {
    const agent = new https.Agent({ keepAlive: true, maxSockets: job.concurrency, ca: job.caPem });
    const deadline = started + job.seconds * 1000;
    const post = (): Promise<void> =>
      new Promise((resolve, reject) => {
        const req = https.request(
          { host: '127.0.0.1', port: job.port, method: 'POST', path: '/mutate', agent, headers: { 'content-type': 'application/json' } },
          (res) => {
            res.resume();
            res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
          },
        );
        req.on('error', reject);
        req.end(job.body);
      });
    await Promise.all(
      Array.from({ length: job.concurrency }, async () => {
        while (performance.now() < deadline) {
          const t = performance.now();
          try {
            await post();
            latenciesMs.push(performance.now() - t);
            done++;
          } catch {
            errors++;
          }
        }
      }),
    );
    agent.destroy();
  }
  return { elapsedMs: performance.now() - started, done, errors, latenciesMs };
}

/** Runs a job in a worker thread, so the client's crypto does not share the server's event loop. */
function inWorker(job: Job): Promise<JobResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: job });
    worker.once('message', (result: JobResult) => resolve(result));
    worker.once('error', reject);
    worker.once('exit', (code) => {
      if (code !== 0) reject(new Error(`bench worker exited with ${code}`));
    });
  });
}

const trivialHandler: ReviewHandler = (body) => {
  const uid = (body as { request: { uid: string } }).request.uid;
  return { status: 200, body: { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid, allowed: true } } };
};

/** A review the size of a small StatefulSet CREATE. */
function sampleReview(): string {
  const object = {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: 'web', namespace: 'default', labels: { 'rollguard.io/enabled': 'true' } },
    spec: {
      replicas: 3,
      serviceName: 'web',
      selector: { matchLabels: { app: 'web' } },
      template: {
        metadata: { labels: { app: 'web' } },
        spec: {
          containers: [
            {
              name: 'app',
              image: 'registry.example/app:1',
              envFrom: [{ configMapRef: { name: 'web-config' } }],
              volumeMounts: [{ name: 'tls', mountPath: '/tls' }],
            },
          ],
          volumes: [{ name: 'tls', secret: { secretName: 'web-tls' } }],
        },
      },
    },
  };
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: '705ab4f5-6393-11e8-b7cc-42010a800002',
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      namespace: 'default',
      operation: 'CREATE',
      userInfo: { username: 'admin', groups: ['system:masters'] },
      object,
    },
  });
}

async function inProcess(): Promise<void> {
  const ca = await createCertificateAuthority({ commonName: 'bench-ca', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS });
  const leaf = { commonName: 'bench', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS, usage: 'server' as const, ipAddresses: ['127.0.0.1'] };
  const source = staticCertificateSource(await createSignedCertificate(ca, leaf));
  const controller = new AbortController();
  const server = createWebhookServer({
    host: '127.0.0.1',
    port: 0,
    certificates: source,
    routes: [{ path: '/mutate', handle: trivialHandler }],
    readiness: () => ({ ready: true, reasons: [] }),
    logger: pino({ level: 'warn' }),
  });
  await server.start(controller.signal);
  const port = server.address().port;
  try {
    const protocol = await new Promise<string>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.certPem }, () => {
        resolve(`${socket.getProtocol() ?? '?'} ${socket.getCipher().name}`);
        socket.destroy();
      });
      socket.on('error', reject);
    });
    console.log(`TLS: RSA-${KEY_BITS} serving key, ${protocol} (Node ${process.version}); server on one event loop, client in a worker thread`);
    const seq = await inWorker({ kind: 'handshakes', port, caPem: ca.certPem, count: SEQUENTIAL_HANDSHAKES, concurrency: 1 });
    const perHandshake = seq.elapsedMs / seq.done;
    console.log(
      `  full handshake, one at a time:       ${perHandshake.toFixed(2)} ms/handshake (${(1000 / perHandshake).toFixed(0)} handshakes/s; ${summary(seq.latenciesMs)}; ${seq.errors} errors)`,
    );
    const elu0 = performance.eventLoopUtilization();
    const par = await inWorker({ kind: 'handshakes', port, caPem: ca.certPem, count: CONCURRENT_HANDSHAKES, concurrency: HANDSHAKE_CONCURRENCY });
    const elu = performance.eventLoopUtilization(elu0);
    console.log(
      `  full handshakes, ${HANDSHAKE_CONCURRENCY} in flight:        ${((par.done / par.elapsedMs) * 1000).toFixed(0)} handshakes/s (server event loop ${(elu.utilization * 100).toFixed(0)}% busy; ${par.errors} errors)`,
    );
    // the client in the worker is the bottleneck on two cores; what the server spends per handshake is the figure that scales
    const serverMsPerHandshake = (elu.utilization * par.elapsedMs) / par.done;
    console.log(
      `    server event-loop time per handshake: ${serverMsPerHandshake.toFixed(3)} ms → ≈ ${(1000 / serverMsPerHandshake).toFixed(0)} handshakes/s per fully busy server core`,
    );

    const body = sampleReview();
    const loadElu0 = performance.eventLoopUtilization();
    const load = await inWorker({ kind: 'load', port, caPem: ca.certPem, seconds: LOAD_SECONDS, concurrency: LOAD_CONCURRENCY, body });
    const loadElu = performance.eventLoopUtilization(loadElu0);
    const rps = (load.done / load.elapsedMs) * 1000;
    console.log(
      `  POST /mutate, keep-alive, ${LOAD_CONCURRENCY} in flight: ${rps.toFixed(0)} requests/s for ${LOAD_SECONDS} s (${Buffer.byteLength(body)} B review; ${summary(load.latenciesMs)}; server event loop ${(loadElu.utilization * 100).toFixed(0)}% busy; ${load.errors} errors)`,
    );
    const serverMsPerRequest = (loadElu.utilization * load.elapsedMs) / load.done;
    console.log(
      `    server event-loop time per request: ${(serverMsPerRequest * 1000).toFixed(1)} µs → ≈ ${(1000 / serverMsPerRequest).toFixed(0)} requests/s per fully busy server core`,
    );

    const generate: number[] = [];
    const swap: number[] = [];
    const firstHandshake: number[] = [];
    const policy = renewalPolicy({ serviceName: 'bench', namespace: 'default', extraIpAddresses: ['127.0.0.1'], keyBits: KEY_BITS });
    const bundle = { ca, serving: source.current() };
    for (let i = 0; i < SWAPS; i++) {
      const t0 = performance.now();
      const renewed = await nextBundle('renew-serving', { stored: { kind: 'valid', bundle, resourceVersion: '1' }, policy, now: new Date() });
      const t1 = performance.now();
      source.set(renewed.serving);
      const t2 = performance.now();
      const seen = await handshake(port, ca.certPem);
      const t3 = performance.now();
      if (seen !== certificateFingerprint(renewed.serving.certPem)) throw new Error('the handshake after the swap did not get the new certificate');
      generate.push(t1 - t0);
      swap.push(t2 - t1);
      firstHandshake.push(t3 - t2);
    }
    console.log(`Renew and swap in process (${SWAPS} times):`);
    console.log(`  new RSA-${KEY_BITS} key + signed certificate: ${summary(generate)}`);
    console.log(`  setSecureContext:                    ${summary(swap)}`);
    console.log(`  first handshake with the new one:    ${summary(firstHandshake)}`);
  } finally {
    controller.abort();
    await server.stopped();
  }
}

/** From the moment a renewal is due to the moment the server presents the new certificate, through a real Secret. */
async function throughSecret(): Promise<void> {
  const reuse = process.env.BENCH_KUBECONFIG;
  const cp = reuse ? undefined : await startControlPlane({ controllerManager: false });
  const kc = new KubeConfig();
  kc.loadFromFile(reuse ?? cp!.kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  const namespace = `tls-bench-${Math.random().toString(36).slice(2, 8)}`;
  const controller = new AbortController();
  const source = createCertificateSource({
    kubeConfig: kc,
    namespace,
    secretName: 'rollguard-tls',
    serviceName: 'rollguard',
    extraIpAddresses: ['127.0.0.1'],
    servingValiditySeconds: CLUSTER_SERVING_SECONDS,
    renewBeforeFraction: 0.5,
    keyBits: KEY_BITS,
    logger: pino({ level: 'warn' }),
    metrics: createMetrics(new Registry()),
  });
  const server = createWebhookServer({
    host: '127.0.0.1',
    port: 0,
    certificates: source,
    routes: [{ path: '/mutate', handle: trivialHandler }],
    readiness: () => ({ ready: source.ready(), reasons: source.ready() ? [] : ['certificate not loaded'] }),
    logger: pino({ level: 'warn' }),
  });
  try {
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    await source.start(controller.signal);
    await server.start(controller.signal);
    const delays: number[] = [];
    let previous = source.current()!;
    await new Promise<void>((resolve) => {
      const unsubscribe = source.onChange((pair) => {
        const due = certificateInfo(previous.certPem).notAfter.getTime() - (CLUSTER_SERVING_SECONDS / 2) * 1000;
        delays.push(Date.now() - due);
        previous = pair;
        if (delays.length >= CLUSTER_ROTATIONS) {
          unsubscribe();
          resolve();
        }
      });
    });
    const port = server.address().port;
    if ((await handshake(port, source.current()!.caPem!)) !== certificateFingerprint(source.current()!.certPem)) {
      throw new Error('the server does not present the certificate of the Secret');
    }
    console.log(`Renew and swap through the Secret (real kube-apiserver, ${CLUSTER_ROTATIONS} renewals):`);
    console.log(`  renewal due → new certificate served (timer, key, Secret write, watch event, swap): ${summary(delays)}`);
  } finally {
    controller.abort();
    await server.stopped();
    await source.stopped();
    await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    await cp?.stop();
  }
}

async function main(): Promise<void> {
  await inProcess();
  if (process.env.BENCH_CLUSTER !== '0') await throughSecret();
}

if (isMainThread) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
} else {
  void runJob(workerData as Job).then((result) => parentPort!.postMessage(result));
}
