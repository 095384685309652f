import { execFile } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import v8 from 'node:v8';
import vm from 'node:vm';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { startControlPlane } from '../src/dev/control-plane.js';
import { createMetadataCache } from '../src/kube/metadata-cache.js';
import { WORKLOAD_KINDS, WORKLOAD_PLURALS, createWorkloadCache, isWorkloadKind, type WorkloadKind } from '../src/kube/workloads.js';
import { RawApi } from '../src/kube/raw-api.js';
import { ENABLED_LABEL, IGNORE_LABEL } from '../src/restarter/annotations.js';
import { createCertificateAuthority, createSignedCertificate } from '../src/tls/certificates.js';
import { certDir, peakRssOf, rssOf, startPeer } from './side-by-side/peer.js';
import { memoryLine, startRollguardServe, type MemoryFigures } from './side-by-side/rollguard-serve.js';

// Memory side by side, one API server, one run: rollguard's metadata caches and the
// controller-runtime peer's metadata-only cache (PartialObjectMetadata, managedFields stripped),
// each in a fresh process, syncing 20,000 ConfigMaps and 20,000 Secrets of 4 KB (every 1,000th
// labelled rollguard.io/ignore) against the same program syncing an empty namespace; a check that
// both caches hold the same (namespace, name, uid, resourceVersion, ignored); then idle RSS of the
// product (`rollguard serve`, nothing to watch) beside the peer's, and what holds rollguard's idle heap.
// Prints figures and ratios; asserts nothing (but stops when the caches disagree).
//   npm run bench -- memory-caches
// BENCH_NODE_ARGS: V8 flags for rollguard's processes, e.g. BENCH_NODE_ARGS=--max-semi-space-size=2.
// With --workloads, the workload caches instead: 2,000 labelled StatefulSets, Deployments and
// DaemonSets (BENCH_WORKLOADS), each kind's cache synced alone in a fresh process against the
// same process syncing an empty namespace; bytes per cached workload, and ratios between kinds.
//   npm run bench -- memory-caches --workloads

const OBJECTS_PER_KIND = Number(process.env.BENCH_OBJECTS ?? 20_000);
const PAYLOAD_BYTES = 4096;
const CREATE_CONCURRENCY = 32;
const IGNORED_EVERY = 1_000;
const TARGET_BYTES_PER_OBJECT = 600;
/**
 * Parsing 80 list pages makes V8 grow its young generation to the maximum (64 MB) and keep it
 * until its memory reducer runs after some seconds of quiet: RSS is read right after the sync
 * and again once settled, which is what a long-running replica holds.
 */
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 20_000);
/** V8 flags for rollguard's processes (the cache's and `rollguard serve`), e.g. a heap setting to weigh; the peer is Go */
const NODE_ARGS = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
/** What rollguard imports at start, each weighed alone in a fresh process. */
const PRODUCT_MODULES = ['@kubernetes/client-node', 'fastify', 'pino', 'prom-client', 'node-forge', 'fast-json-patch'];

interface Measurement {
  objects: number;
  syncMs: number;
  rssBefore: number;
  rssSynced: number;
  rssSettled: number;
  rssPeak: number;
  heapBefore: number;
  heapSettled: number;
  /** entries of the peer's cache that rollguard's lacks or holds otherwise */
  mismatches?: number;
}

interface CachedObject {
  kind: 'ConfigMap' | 'Secret';
  namespace: string;
  name: string;
  uid: string;
  resourceVersion: string;
  ignored: boolean;
}

interface SyncingInformer {
  start(signal: AbortSignal): Promise<void>;
  whenSynced(signal: AbortSignal): Promise<boolean>;
  stopped(): Promise<void>;
}

/**
 * Syncs `informers` in this process and reports its memory before, right after the sync and
 * SETTLE_MS later (each after a full GC); `inspect` reads the synced caches before they stop.
 */
async function measureSync<T>(informers: SyncingInformer[], size: () => number, inspect: () => T): Promise<Measurement & T> {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  gc();
  const before = process.memoryUsage();
  const abort = new AbortController();
  const started = performance.now();
  for (const informer of informers) await informer.start(abort.signal);
  for (const informer of informers) await informer.whenSynced(abort.signal);
  const syncMs = performance.now() - started;
  gc();
  const synced = process.memoryUsage();
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  gc();
  const settled = process.memoryUsage();
  const objects = size();
  const extra = inspect();
  abort.abort();
  await Promise.all(informers.map((informer) => informer.stopped()));
  return {
    objects,
    syncMs,
    rssBefore: before.rss,
    rssSynced: synced.rss,
    rssSettled: settled.rss,
    rssPeak: process.resourceUsage().maxRSS * 1024,
    heapBefore: before.heapUsed,
    heapSettled: settled.heapUsed,
    ...extra,
  };
}

/** rollguard's side: a fresh process that syncs the two caches for one namespace and reports its memory. */
async function measure(kubeconfigPath: string, namespace: string, expectedFile: string | undefined): Promise<Measurement> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const logger = pino({ level: 'warn' });
  const api = new RawApi(kc);
  const caches = {
    ConfigMap: createMetadataCache({ name: 'ConfigMap cache', api, plural: 'configmaps', namespaces: [namespace], ignoreLabel: IGNORE_LABEL, logger }),
    Secret: createMetadataCache({ name: 'Secret cache', api, plural: 'secrets', namespaces: [namespace], ignoreLabel: IGNORE_LABEL, logger }),
  };
  const all = Object.values(caches);
  const objects = (): number => all.reduce((n, c) => n + c.store.size(), 0);
  return measureSync(
    all.map((c) => c.informer),
    objects,
    () => {
      if (!expectedFile) return {};
      const expected = JSON.parse(fs.readFileSync(expectedFile, 'utf8')) as CachedObject[];
      let mismatches = Math.abs(expected.length - objects());
      for (const e of expected) {
        const got = caches[e.kind].store.get(e.namespace, e.name);
        if (!got || got.uid !== e.uid || got.resourceVersion !== e.resourceVersion || got.ignored !== e.ignored) mismatches++;
      }
      return { mismatches };
    },
  );
}

const WORKLOADS_PER_KIND = Number(process.env.BENCH_WORKLOADS ?? 2_000);

/** rollguard's side for one workload kind: a fresh process that syncs that kind's labelled cache for one namespace. */
async function measureWorkloads(kubeconfigPath: string, namespace: string, kind: WorkloadKind): Promise<Measurement & { wireBytes: number }> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const api = new RawApi(kc);
  const cache = createWorkloadCache(kind, { api, namespaces: [namespace], labelSelector: `${ENABLED_LABEL}=true`, logger: pino({ level: 'warn' }) });
  return measureSync([cache.informer], () => cache.store.size(), () => {
    // what one object is on the wire (JSON), beside what the cache holds of it
    const first = cache.store.list()[0];
    return { wireBytes: first ? Buffer.byteLength(JSON.stringify(first)) : 0 };
  });
}

/** A labelled workload of `kind` as a chart would write it: one container, a ConfigMap and a Secret referenced, probes, resources. */
function benchWorkload(kind: WorkloadKind, i: number): Record<string, unknown> {
  const name = `bench-${kind.toLowerCase()}-${String(i).padStart(5, '0')}`;
  const labels = { app: name, 'app.kubernetes.io/part-of': 'bench' };
  const template = {
    metadata: { labels, annotations: { 'configmap.rollguard.io/bench-config': '7c6a1a52-3f0e-4b53-9d3e-1b2c3d4e5f60/123456', 'secret.rollguard.io/bench-secret': '0d9e8f7a-6b5c-4d3e-2f1a-0b9c8d7e6f50/123457' } },
    spec: {
      containers: [
        {
          name: 'app',
          image: 'registry.example/team/app:1.2.3',
          ports: [{ name: 'http', containerPort: 8080 }],
          envFrom: [{ configMapRef: { name: 'bench-config' } }],
          env: [{ name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'bench-secret', key: 'password' } } }],
          resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
          readinessProbe: { httpGet: { path: '/readyz', port: 'http' }, periodSeconds: 5 },
          volumeMounts: [{ name: 'config', mountPath: '/etc/app' }],
        },
      ],
      volumes: [{ name: 'config', configMap: { name: 'bench-config' } }],
    },
  };
  const spec: Record<string, unknown> = { selector: { matchLabels: labels }, template };
  if (kind !== 'DaemonSet') spec.replicas = 0;
  if (kind === 'StatefulSet') spec.serviceName = name;
  return { apiVersion: 'apps/v1', kind, metadata: { name, labels: { ...labels, [ENABLED_LABEL]: 'true' } }, spec };
}

/** --workloads: the three kinds' caches at WORKLOADS_PER_KIND labelled workloads each. */
async function workloadsMain(): Promise<void> {
  // no controller manager: no ReplicaSets, pods or revisions, only the workloads themselves
  const cp = await startControlPlane({ controllerManager: false });
  try {
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    const core = kc.makeApiClient(CoreV1Api);
    for (const name of ['bench-empty', 'bench-workloads']) await core.createNamespace({ body: { metadata: { name } } });
    const post = await poster(kc);
    const createStarted = performance.now();
    const jobs = WORKLOAD_KINDS.flatMap((kind) =>
      Array.from({ length: WORKLOADS_PER_KIND }, (_, i) => () => post(`/apis/apps/v1/namespaces/bench-workloads/${WORKLOAD_PLURALS[kind]}`, benchWorkload(kind, i))),
    );
    let next = 0;
    await Promise.all(Array.from({ length: CREATE_CONCURRENCY }, async () => {
      while (next < jobs.length) await jobs[next++]!();
    }));
    console.log(`created ${WORKLOADS_PER_KIND} labelled StatefulSets, Deployments and DaemonSets in ${((performance.now() - createStarted) / 1000).toFixed(1)} s`);
    const run = async (namespace: string, kind: WorkloadKind): Promise<Measurement & { wireBytes: number }> => {
      const { stdout } = await promisify(execFile)(process.execPath, [fileURLToPath(import.meta.url), '--measure-workloads', cp.kubeconfigPath, namespace, kind], { maxBuffer: 1024 * 1024 });
      return JSON.parse(stdout) as Measurement & { wireBytes: number };
    };
    const col = (s: string, w = 14): string => s.padStart(w);
    console.log(`
bytes per cached workload (${WORKLOADS_PER_KIND} of each kind vs an empty namespace, each kind in a fresh process; settled = ${SETTLE_MS / 1000} s after sync)`);
    console.log(`${'kind'.padEnd(14)}${col('RSS settled')}${col('heap (live)')}${col('JSON bytes')}${col('heap/JSON', 11)}${col('heap/STS', 10)}${col('sync', 9)}`);
    let reference: number | undefined;
    for (const kind of WORKLOAD_KINDS) {
      const empty = await run('bench-empty', kind);
      const full = await run('bench-workloads', kind);
      if (full.objects !== WORKLOADS_PER_KIND) throw new Error(`${kind} cache holds ${full.objects} workloads, want ${WORKLOADS_PER_KIND}`);
      const rss = (full.rssSettled - empty.rssSettled) / full.objects;
      const heap = (full.heapSettled - full.heapBefore - (empty.heapSettled - empty.heapBefore)) / full.objects;
      reference ??= heap;
      console.log(
        `${kind.padEnd(14)}${col(rss.toFixed(0))}${col(heap.toFixed(0))}${col(String(full.wireBytes))}${col((heap / full.wireBytes).toFixed(2), 11)}${col((heap / reference).toFixed(2), 10)}${col(`${(full.syncMs / 1000).toFixed(2)} s`, 9)}`,
      );
    }
  } finally {
    await cp.stop();
  }
}

/** The peer's side: the Go process, its cache scoped to one namespace, measured from /proc and its /memory. */
async function measurePeer(kubeconfigPath: string, namespace: string, dir: string): Promise<{ m: Measurement; dump: CachedObject[] }> {
  const started = performance.now();
  const peer = await startPeer({ certDir: dir, kubeconfig: kubeconfigPath, namespaces: [namespace] });
  try {
    const pid = peer.child.pid!;
    const heap = async (): Promise<number> => ((await (await fetch(`http://127.0.0.1:${peer.adminPort}/memory`)).json()) as { heapAlloc: number }).heapAlloc;
    const rssBefore = rssOf(pid);
    const heapBefore = await heap();
    while (!((await (await fetch(`http://127.0.0.1:${peer.adminPort}/synced`)).json()) as boolean)) await new Promise((r) => setTimeout(r, 20));
    const syncMs = performance.now() - started;
    const rssSynced = rssOf(pid);
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const heapSettled = await heap();
    const rssSettled = rssOf(pid);
    const dump = ((await (await fetch(`http://127.0.0.1:${peer.adminPort}/cache`)).json()) as CachedObject[] | null) ?? [];
    return { m: { objects: dump.length, syncMs, rssBefore, rssSynced, rssSettled, rssPeak: peakRssOf(pid), heapBefore, heapSettled }, dump };
  } finally {
    await peer.stop();
  }
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
        res.on('end', () => (res.statusCode === 201 || res.statusCode === 409 ? resolve() : reject(new Error(`POST ${path}: HTTP ${res.statusCode}`))));
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
    const labels = { app: 'bench', ...(i % IGNORED_EVERY === 0 ? { [IGNORE_LABEL]: 'true' } : {}) };
    const metadata = { name: `bench-object-${String(i).padStart(5, '0')}`, labels };
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

/** `rollguard serve` with nothing to watch: RSS once ready and settled, and a heap snapshot of it. */
async function productIdle(kubeconfigPath: string, dir: string, namespace: string): Promise<{ rss: number; peak: number; memory: MemoryFigures; snapshot: string }> {
  const snapshotDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-bench-heap-'));
  const rg = await startRollguardServe({
    kubeconfigPath,
    certDir: dir,
    namespace,
    watchNamespaces: [namespace],
    nodeArgs: [...NODE_ARGS, '--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${snapshotDir}`],
  });
  try {
    for (const deadline = Date.now() + 60_000; !(await rg.ready()); await new Promise((r) => setTimeout(r, 200))) {
      if (Date.now() > deadline) throw new Error('rollguard serve not ready after 60 s');
    }
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const pid = rg.child.pid!;
    const rss = rssOf(pid);
    const peak = peakRssOf(pid);
    const memory = await rg.memory();
    rg.child.kill('SIGUSR2');
    let snapshot = '';
    for (const until = Date.now() + 60_000; Date.now() < until && !snapshot; await new Promise((r) => setTimeout(r, 500))) {
      const done = fs.readdirSync(snapshotDir).find((f) => f.endsWith('.heapsnapshot'));
      // the file is complete once its size stops changing
      if (done) {
        const size = fs.statSync(path.join(snapshotDir, done)).size;
        await new Promise((r) => setTimeout(r, 1000));
        if (fs.statSync(path.join(snapshotDir, done)).size === size && size > 0) snapshot = path.join(snapshotDir, done);
      }
    }
    return { rss, peak, memory, snapshot };
  } finally {
    await rg.stop();
  }
}

/** Heap and RSS each product dependency adds when imported alone into a fresh Node process. */
async function importCosts(): Promise<{ module: string; heap: number; rss: number }[]> {
  const script = `
    const gc = require('node:vm').runInNewContext('gc'); gc();
    const a = process.memoryUsage();
    await import(process.argv[1]); gc();
    const b = process.memoryUsage();
    console.log(JSON.stringify({ heap: b.heapUsed - a.heapUsed, rss: b.rss - a.rss }));`;
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
  const out: { module: string; heap: number; rss: number }[] = [];
  for (const module of PRODUCT_MODULES) {
    const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', '--input-type=commonjs', '-e', `(async () => {${script}})()`, module], { cwd: repo });
    out.push({ module, ...(JSON.parse(stdout) as { heap: number; rss: number }) });
  }
  return out;
}

const LONG_STRING_BYTES = 20_000;

/** Self sizes in a heap snapshot, summed by node type and by the script that holds each closure or compiled code. */
function snapshotSummary(file: string): string[] {
  const snap = JSON.parse(fs.readFileSync(file, 'utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f));
  const byType = new Map<string, number>();
  const byName = new Map<string, number>();
  /** long strings: in an idle process, mostly the source text V8 keeps of each module loaded */
  const long: [string, number][] = [];
  let total = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const type = types[snap.nodes[i + typeAt!]!]!;
    const name = snap.strings[snap.nodes[i + nameAt!]!]!;
    const size = snap.nodes[i + sizeAt!]!;
    total += size;
    byType.set(type, (byType.get(type) ?? 0) + size);
    const key = type === 'code' || type === 'closure' || type === 'object' || type === 'array' ? `${type}: ${name.slice(0, 60)}` : undefined;
    if (key) byName.set(key, (byName.get(key) ?? 0) + size);
    if (type === 'string' && size > LONG_STRING_BYTES) long.push([name.slice(0, 60).replace(/\s+/g, ' '), size]);
  }
  long.sort((a, b) => b[1] - a[1]);
  const longTotal = long.reduce((sum, [, size]) => sum + size, 0);
  const top = (m: Map<string, number>, n: number) => [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([k, v]) => `    ${mb(v).padStart(9)}  ${k}`);
  return [
    `  heap snapshot: ${mb(total)} in all; by node type:`,
    ...top(byType, 8),
    '  largest groups (type: constructor or name):',
    ...top(byName, 12),
    `  strings over ${LONG_STRING_BYTES / 1000} KB: ${long.length}, ${mb(longTotal)}; the largest, by their first characters:`,
    ...long.slice(0, 6).map(([start, size]) => `    ${mb(size).padStart(9)}  ${JSON.stringify(start)}`),
  ];
}

async function main(): Promise<void> {
  if (process.argv[2] === '--measure-workloads') {
    const kind = process.argv[5];
    if (!isWorkloadKind(kind)) throw new Error(`--measure-workloads: kind ${kind} is not one of ${WORKLOAD_KINDS.join(', ')}`);
    process.stdout.write(JSON.stringify(await measureWorkloads(process.argv[3]!, process.argv[4]!, kind)));
    return;
  }
  if (process.argv[2] === '--workloads') return workloadsMain();
  if (process.argv[2] === '--measure') {
    const result = await measure(process.argv[3]!, process.argv[4]!, process.argv[5]);
    process.stdout.write(JSON.stringify(result));
    return;
  }
  // BENCH_KUBECONFIG: a control plane kept from an earlier run, objects already created.
  const reuse = process.env.BENCH_KUBECONFIG;
  const cp = reuse ? undefined : await startControlPlane({ controllerManager: false });
  const kubeconfigPath = reuse ?? cp!.kubeconfigPath;
  const ca = await createCertificateAuthority({ commonName: 'bench-ca', validitySeconds: 3600, keyBits: 2048 });
  const dir = certDir(await createSignedCertificate(ca, { commonName: 'bench', ipAddresses: ['127.0.0.1'], usage: 'server', validitySeconds: 3600, keyBits: 2048 }));
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

    const run = async (namespace: string, expectedFile?: string): Promise<Measurement> => {
      const { stdout } = await promisify(execFile)(process.execPath, [...NODE_ARGS, fileURLToPath(import.meta.url), '--measure', kubeconfigPath, namespace, ...(expectedFile ? [expectedFile] : [])], {
        maxBuffer: 1024 * 1024,
      });
      return JSON.parse(stdout) as Measurement;
    };
    const peerEmpty = (await measurePeer(kubeconfigPath, 'bench-empty', dir)).m;
    const { m: peerFull, dump } = await measurePeer(kubeconfigPath, 'bench-full', dir);
    const expectedFile = path.join(dir, 'peer-cache.json');
    fs.writeFileSync(expectedFile, JSON.stringify(dump));
    const empty = await run('bench-empty');
    const full = await run('bench-full', expectedFile);
    if (full.mismatches !== 0 || full.objects !== peerFull.objects) {
      throw new Error(`caches disagree: rollguard ${full.objects} objects, peer ${peerFull.objects}, ${full.mismatches} entries differ`);
    }
    console.log(`cache check: both hold the same ${full.objects} (namespace, name, uid, resourceVersion, ignored); the peer strips managedFields`);

    const per = (f: Measurement, e: Measurement, pick: (m: Measurement) => number): number => (pick(f) - pick(e)) / f.objects;
    const rows: [string, (m: Measurement) => number][] = [
      ['RSS settled', (m) => m.rssSettled],
      ['RSS right after sync', (m) => m.rssSynced],
      ['RSS peak', (m) => m.rssPeak],
      ['heap (live, after GC)', (m) => m.heapSettled - m.heapBefore],
    ];
    const col = (s: string, w = 14): string => s.padStart(w);
    console.log(`\nbytes per cached object (${full.objects} objects vs an empty namespace; settled = ${SETTLE_MS / 1000} s after sync)`);
    if (NODE_ARGS.length) console.log(`  rollguard's processes run with ${NODE_ARGS.join(' ')} (BENCH_NODE_ARGS)`);
    console.log(`${''.padEnd(24)}${col('rollguard')}${col('c-r peer')}${col('rg/peer', 9)}`);
    for (const [label, pick] of rows) {
      const [rg, peer] = [per(full, empty, pick), per(peerFull, peerEmpty, pick)];
      console.log(`${label.padEnd(24)}${col(rg.toFixed(0))}${col(peer.toFixed(0))}${col((rg / peer).toFixed(2), 9)}`);
    }
    console.log(`  rollguard settled target <= ${TARGET_BYTES_PER_OBJECT} B; peak right after sync target <= 2 x settled`);
    console.log(`  first sync: rollguard ${(full.syncMs / 1000).toFixed(2)} s, peer ${(peerFull.syncMs / 1000).toFixed(2)} s (peer's includes its process start)`);
    console.log(`  absolute RSS settled: rollguard ${mb(empty.rssSettled)} empty / ${mb(full.rssSettled)} full; peer ${mb(peerEmpty.rssSettled)} / ${mb(peerFull.rssSettled)}`);

    await core.createNamespace({ body: { metadata: { name: 'bench-idle' } } }).catch(() => undefined);
    const idle = await productIdle(kubeconfigPath, dir, 'bench-idle');
    const peerIdle = (await measurePeer(kubeconfigPath, 'bench-idle', dir)).m;
    console.log(`\nidle (nothing to watch, ${SETTLE_MS / 1000} s after ready): rollguard serve RSS ${mb(idle.rss)} (peak ${mb(idle.peak)}); c-r peer RSS ${mb(peerIdle.rssSettled)}; ratio ${(idle.rss / peerIdle.rssSettled).toFixed(2)} (target <= 80 MB)`);
    console.log(`  ${memoryLine(idle.rss, idle.memory)}`);
    if (idle.snapshot) {
      for (const line of snapshotSummary(idle.snapshot)) console.log(line);
      fs.rmSync(path.dirname(idle.snapshot), { recursive: true, force: true });
    }
    console.log('  heap and RSS each dependency adds, imported alone into a fresh Node:');
    for (const c of await importCosts()) console.log(`    ${c.module.padEnd(26)} heap ${mb(c.heap).padStart(9)}  RSS ${mb(c.rss).padStart(9)}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await cp?.stop();
  }
}

await main();
