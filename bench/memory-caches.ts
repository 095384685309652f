import { execFile } from 'node:child_process';
import https from 'node:https';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import v8 from 'node:v8';
import vm from 'node:vm';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { startControlPlane } from '../src/dev/control-plane.js';
import { createMetadataCache } from '../src/kube/metadata-cache.js';
import { RawApi } from '../src/kube/raw-api.js';
import { IGNORE_LABEL } from '../src/restarter/annotations.js';

// Memory of the metadata caches: RSS after syncing 20,000 ConfigMaps and 20,000 Secrets of
// 4 KB each, against the same program syncing an empty namespace. Prints figures; asserts nothing.
// Run: npx tsc -p tsconfig.json && node dist/bench/memory-caches.js

const OBJECTS_PER_KIND = Number(process.env.BENCH_OBJECTS ?? 20_000);
const PAYLOAD_BYTES = 4096;
const CREATE_CONCURRENCY = 64;
const TARGET_BYTES_PER_OBJECT = 1024;
/**
 * Parsing 80 list pages makes V8 grow its young generation to the maximum (64 MB) and keep it
 * until its memory reducer runs after some seconds of quiet: RSS is read right after the sync
 * and again once settled, which is what a long-running replica holds.
 */
const SETTLE_MS = 20_000;

interface Measurement {
  objects: number;
  syncMs: number;
  rssBefore: number;
  rssSynced: number;
  rssSettled: number;
  rssPeak: number;
  heapBefore: number;
  heapSettled: number;
}

/** The measured side: a fresh process that syncs the two caches for one namespace and reports its memory. */
async function measure(kubeconfigPath: string, namespace: string): Promise<Measurement> {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const logger = pino({ level: 'warn' });
  const api = new RawApi(kc);
  const caches = [
    createMetadataCache({ name: 'ConfigMap cache', api, plural: 'configmaps', namespaces: [namespace], ignoreLabel: IGNORE_LABEL, logger }),
    createMetadataCache({ name: 'Secret cache', api, plural: 'secrets', namespaces: [namespace], ignoreLabel: IGNORE_LABEL, logger }),
  ];
  gc();
  const before = process.memoryUsage();
  const abort = new AbortController();
  const started = performance.now();
  for (const c of caches) await c.informer.start(abort.signal);
  for (const c of caches) await c.informer.whenSynced(abort.signal);
  const syncMs = performance.now() - started;
  gc();
  const synced = process.memoryUsage();
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  gc();
  const settled = process.memoryUsage();
  const objects = caches.reduce((n, c) => n + c.store.size(), 0);
  abort.abort();
  await Promise.all(caches.map((c) => c.informer.stopped()));
  return {
    objects,
    syncMs,
    rssBefore: before.rss,
    rssSynced: synced.rss,
    rssSettled: settled.rss,
    rssPeak: process.resourceUsage().maxRSS * 1024,
    heapBefore: before.heapUsed,
    heapSettled: settled.heapUsed,
  };
}

/** POSTs over kept-alive connections: client-node opens a TLS connection per request, too slow for 40,000 creates. */
async function poster(kc: KubeConfig): Promise<(path: string, body: unknown) => Promise<void>> {
  const options: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(options);
  const agent = new https.Agent({ keepAlive: true, maxSockets: CREATE_CONCURRENCY, ca: options.ca, cert: options.cert, key: options.key });
  const server = kc.getCurrentCluster()!.server;
  return (path, body) =>
    new Promise((resolve, reject) => {
      const req = https.request(`${server}${path}`, { method: 'POST', agent, headers: { 'Content-Type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 201 ? resolve() : reject(new Error(`POST ${path}: HTTP ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end(JSON.stringify(body));
    });
}

async function createAll(kc: KubeConfig, namespace: string): Promise<void> {
  const post = await poster(kc);
  const payload = 'x'.repeat(PAYLOAD_BYTES);
  const secretPayload = Buffer.alloc((PAYLOAD_BYTES / 4) * 3, 7).toString('base64');
  const jobs: (() => Promise<unknown>)[] = [];
  for (let i = 0; i < OBJECTS_PER_KIND; i++) {
    const metadata = { name: `bench-object-${String(i).padStart(5, '0')}`, labels: { app: 'bench' } };
    jobs.push(() => post(`/api/v1/namespaces/${namespace}/configmaps`, { metadata, data: { payload } }));
    jobs.push(() => post(`/api/v1/namespaces/${namespace}/secrets`, { metadata, data: { payload: secretPayload } }));
  }
  let next = 0;
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      while (next < jobs.length) await jobs[next++]!();
    }),
  );
}

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

async function main(): Promise<void> {
  if (process.argv[2] === '--measure') {
    const result = await measure(process.argv[3]!, process.argv[4]!);
    process.stdout.write(JSON.stringify(result));
    return;
  }
  // BENCH_KUBECONFIG: a control plane kept from an earlier run, objects already created.
  const reuse = process.env.BENCH_KUBECONFIG;
  const cp = reuse ? undefined : await startControlPlane({ controllerManager: false });
  const kubeconfigPath = reuse ?? cp!.kubeconfigPath;
  try {
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfigPath);
    const core = kc.makeApiClient(CoreV1Api);
    const existing = new Set((await core.listNamespace()).items.map((n) => n.metadata?.name));
    if (!existing.has('bench-full')) {
      for (const name of ['bench-empty', 'bench-full']) await core.createNamespace({ body: { metadata: { name } } });
      const createStarted = performance.now();
      await createAll(kc, 'bench-full');
      console.log(`created ${OBJECTS_PER_KIND} ConfigMaps and ${OBJECTS_PER_KIND} Secrets of ${PAYLOAD_BYTES} bytes in ${((performance.now() - createStarted) / 1000).toFixed(1)} s`);
    }

    const run = async (namespace: string): Promise<Measurement> => {
      const { stdout } = await promisify(execFile)(process.execPath, [fileURLToPath(import.meta.url), '--measure', kubeconfigPath, namespace], {
        maxBuffer: 1024 * 1024,
      });
      return JSON.parse(stdout) as Measurement;
    };
    const empty = await run('bench-empty');
    const full = await run('bench-full');
    const perObject = (a: number, b: number): string => `${mb(a - b)} = ${Math.round((a - b) / full.objects)} bytes per cached object`;
    const heapDelta = full.heapSettled - full.heapBefore - (empty.heapSettled - empty.heapBefore);
    console.log(`no objects:     RSS ${mb(empty.rssSynced)} after sync, ${mb(empty.rssSettled)} settled, peak ${mb(empty.rssPeak)}; ${empty.objects} cached`);
    console.log(`${full.objects} objects: RSS ${mb(full.rssSynced)} after sync, ${mb(full.rssSettled)} settled, peak ${mb(full.rssPeak)}; first sync ${(full.syncMs / 1000).toFixed(2)} s`);
    console.log(`RSS delta, settled (${SETTLE_MS / 1000} s after sync): ${perObject(full.rssSettled, empty.rssSettled)} (target < ${TARGET_BYTES_PER_OBJECT})`);
    console.log(`RSS delta, right after sync:  ${perObject(full.rssSynced, empty.rssSynced)} (V8 young generation still grown from parsing the lists)`);
    console.log(`RSS delta, peak:              ${perObject(full.rssPeak, empty.rssPeak)}`);
    console.log(`heap delta: ${mb(heapDelta)} = ${Math.round(heapDelta / full.objects)} bytes per cached object`);
    console.log(`full objects in the API server: ${mb(full.objects * PAYLOAD_BYTES)} of data alone, never read`);
  } finally {
    await cp?.stop();
  }
}

await main();
