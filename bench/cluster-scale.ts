import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';
import { loadKubeConfig } from '../src/kube/kubeconfig.js';
import { startControlPlane } from '../src/dev/control-plane.js';
import { ENABLED_LABEL, annotationKey } from '../src/restarter/annotations.js';
import { createCertificateAuthority, createSignedCertificate } from '../src/tls/certificates.js';
import { certDir, peakRssOf, rssOf } from './side-by-side/peer.js';
import { review } from './side-by-side/review.js';
import { referencedObjects } from '../src/restarter/references.js';
import { deployedNodeOptions, memoryLine, mib, startRollguardServe, type RollguardServe } from './side-by-side/rollguard-serve.js';
import { parseMetrics, sumOf, type Sample } from '../test/e2e/apiserver-metrics.js';

// A large cluster on the real control plane: 1,000 namespaces, 5,000 opted-in StatefulSets
// (replicas: 0, and no kube-controller-manager, so no StatefulSet controller and no pods),
// 100,000 ConfigMaps and Secrets, all written through the API with bounded concurrency, then
// `rollguard serve` started as the product process: start -> caches synced -> ready, peak and
// settled RSS; a storm of 2,000 ConfigMap changes referenced by 2,000 sets (one each) while
// /mutate is reviewed at a fixed rate: time to the last patch, restarts per 1-s window against
// --max-restarts-per-second plus its burst, each set patched once; then rollguard restarted:
// zero patches. Prints figures; asserts nothing.
//   npm run bench -- cluster-scale
//   BENCH_NAMESPACES (1000), BENCH_SETS_PER_NAMESPACE (5), BENCH_OBJECTS_PER_NAMESPACE (100),
//   BENCH_STORM (2000), BENCH_PACE (100 restarts/s), BENCH_WORKERS (rollguard's --workers), BENCH_MAX_WORKERS (its --max-workers),
//   BENCH_KUBECONFIG (a control plane kept, objects created); BENCH_NODE_ARGS (node flags of rollguard after
//   the image's NODE_OPTIONS, which it always runs with, e.g. "--cpu-prof --cpu-prof-dir=/tmp/p"; "none": no flags), BENCH_APISERVER_ARGS (e.g. "--profiling=true" for
//   the API server's /debug/pprof), BENCH_HEAP_SNAPSHOT (a folder: a heap snapshot of rollguard once settled, for
//   `npm run bench -- heap-summary FILE`)

const NAMESPACES = Number(process.env.BENCH_NAMESPACES ?? 1_000);
const SETS_PER_NAMESPACE = Number(process.env.BENCH_SETS_PER_NAMESPACE ?? 5);
const OBJECTS_PER_NAMESPACE = Number(process.env.BENCH_OBJECTS_PER_NAMESPACE ?? 100);
const STORM = Number(process.env.BENCH_STORM ?? 2_000);
const PACE = Number(process.env.BENCH_PACE ?? 100);
/** rollguard's --workers; unset: its default */
const WORKERS = process.env.BENCH_WORKERS;
/** rollguard's --max-workers; unset: its default */
const MAX_WORKERS = process.env.BENCH_MAX_WORKERS;
const HEAP_SNAPSHOT_DIR = process.env.BENCH_HEAP_SNAPSHOT;
/** As rollguard computes it: a burst of one second's worth. */
const BURST = Math.max(1, Math.ceil(PACE));
const WRITE_CONCURRENCY = 12;
const ADMISSION_RATE = 100;
const SETTLE_MS = 30_000;
/** After the first pass: rollguard gives back what a burst grew once it has been quiet 5 s (src/heap.ts). */
const AFTER_PASS_MS = 10_000;
const QUIET_AFTER_RESTART_MS = 20_000;
const NS_PREFIX = 'scale-';

/** The TCP connections a process holds, by state, from /proc (no ss or lsof needed). */
function connectionsOf(pid: number): string {
  const inodes = new Set<string>();
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    const target = (() => {
      try {
        return fs.readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        return '';
      }
    })();
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) inodes.add(m[1]!);
  }
  const states = new Map<string, number>();
  for (const line of fs.readFileSync(`/proc/${pid}/net/tcp`, 'utf8').split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/);
    if (cols.length < 10 || !inodes.has(cols[9]!)) continue;
    states.set(cols[3]!, (states.get(cols[3]!) ?? 0) + 1);
  }
  return [...states].map(([state, n]) => `${n} in state 0x${state}`).join(', ') || 'none';
}
const PAYLOAD = 'x'.repeat(512);

type Request = (method: string, path: string, body?: unknown, contentType?: string) => Promise<{ status: number; json: unknown }>;

async function apiClient(kc: KubeConfig): Promise<{ request: Request; agentOptions: https.AgentOptions; server: string }> {
  const options: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(options);
  const agentOptions = { ca: options.ca, cert: options.cert, key: options.key };
  const agent = new https.Agent({ keepAlive: true, maxSockets: WRITE_CONCURRENCY, ...agentOptions });
  const server = kc.getCurrentCluster()!.server;
  const request: Request = (method, path, body, contentType = 'application/json') =>
    new Promise((resolve, reject) => {
      const req = https.request(`${server}${path}`, { method, agent, headers: { 'Content-Type': contentType } }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: text ? (JSON.parse(text) as unknown) : undefined }));
      });
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  return { request, agentOptions, server };
}

/** A Prometheus text exposition read with the bench's credentials (the API server's /metrics) or none (rollguard's admin port). */
function metricsAt(url: string, agentOptions: https.AgentOptions = {}): Promise<Sample[]> {
  return new Promise((resolve, reject) => {
    const get = url.startsWith('https:') ? https.get : http.get;
    const req = get(url, { ...agentOptions, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => (res.statusCode === 200 ? resolve(parseMetrics(text)) : reject(new Error(`GET ${url}: HTTP ${res.statusCode}`))));
    });
    req.on('error', reject);
  });
}

/** The mean of a histogram between two samples of it, in ms, and how many it counted. */
function meanBetween(before: Sample[], after: Sample[], name: string, where: (labels: Record<string, string>) => boolean): string {
  const count = sumOf(after, `${name}_count`, where) - sumOf(before, `${name}_count`, where);
  const sum = sumOf(after, `${name}_sum`, where) - sumOf(before, `${name}_sum`, where);
  return count > 0 ? `${((sum / count) * 1000).toFixed(1)} ms mean of ${count}` : 'none';
}

/** The API server's request latency by call rollguard makes in a storm, beside rollguard's own reconcile time. */
function stormLatencies(apiBefore: Sample[], apiAfter: Sample[], rgBefore: Sample[], rgAfter: Sample[]): string[] {
  const call = (verb: string, resource: string) => (l: Record<string, string>) => l.verb === verb && l.resource === resource;
  const apiserver = 'apiserver_request_duration_seconds';
  const rejected = sumOf(apiAfter, 'apiserver_flowcontrol_rejected_requests_total') - sumOf(apiBefore, 'apiserver_flowcontrol_rejected_requests_total');
  return [
    `  the API server's own latency over the storm: PATCH statefulsets ${meanBetween(apiBefore, apiAfter, apiserver, call('PATCH', 'statefulsets'))}; GET configmaps ${meanBetween(apiBefore, apiAfter, apiserver, call('GET', 'configmaps'))}; POST events ${meanBetween(apiBefore, apiAfter, apiserver, call('POST', 'events'))}; requests rejected by priority and fairness (429): ${rejected}`,
    `  rollguard's reconcile over the storm: ${meanBetween(rgBefore, rgAfter, 'rollguard_reconcile_duration_seconds', (l) => l.controller === 'restarter')}`,
  ];
}

/** Signals `pid` to write a heap snapshot into `dir` and waits until the file stops growing; its path. */
async function heapSnapshot(pid: number, dir: string): Promise<string> {
  const before = new Set(fs.readdirSync(dir));
  process.kill(pid, 'SIGUSR2');
  let last = -1;
  for (const started = performance.now(); performance.now() - started < 300_000; ) {
    await new Promise((r) => setTimeout(r, 1_000));
    const file = fs.readdirSync(dir).find((f) => f.endsWith('.heapsnapshot') && !before.has(f));
    if (!file) continue;
    const size = fs.statSync(`${dir}/${file}`).size;
    if (size > 0 && size === last) return `${dir}/${file}`;
    last = size;
  }
  throw new Error(`no heap snapshot of ${pid} in ${dir} after 300 s`);
}

async function inParallel(count: number, job: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: WRITE_CONCURRENCY }, async () => {
      while (next < count) await job(next++);
    }),
  );
}

const ns = (n: number): string => `${NS_PREFIX}${String(n).padStart(4, '0')}`;
const cfg = (k: number): string => `cfg-${k}`;
const sec = (k: number): string => `sec-${k}`;

interface Created {
  uid: string;
  resourceVersion: string;
}

async function create(request: Request, path: string, body: unknown): Promise<Created> {
  for (let attempt = 0; ; attempt++) {
    const res = await request('POST', path, body);
    if (res.status === 201) return (res.json as { metadata: Created }).metadata;
    if (res.status === 409) {
      const name = (body as { metadata: { name: string } }).metadata.name;
      const got = await request('GET', `${path}/${name}`);
      return (got.json as { metadata: Created }).metadata;
    }
    if (attempt >= 5 || (res.status !== 429 && res.status < 500)) throw new Error(`POST ${path}: HTTP ${res.status} ${JSON.stringify(res.json)}`);
    await new Promise((r) => setTimeout(r, 200 * (attempt + 1)));
  }
}

/**
 * The namespace of the review sent to /mutate during the storm, with the ConfigMaps and Secrets
 * it references: a review that names objects the caches do not know waits --reference-wait for
 * them (1 s), and a workload's own objects exist in a cluster.
 */
async function populateReviewed(request: Request): Promise<void> {
  const { request: reviewed } = JSON.parse(review('populate')) as { request: { namespace: string; object: { spec: { template: unknown } } } };
  await create(request, '/api/v1/namespaces', { metadata: { name: reviewed.namespace } });
  for (const ref of referencedObjects(reviewed.object.spec.template, { projected: true })) {
    const plural = ref.kind === 'ConfigMap' ? 'configmaps' : 'secrets';
    await create(request, `/api/v1/namespaces/${reviewed.namespace}/${plural}`, { metadata: { name: ref.name }, data: {} });
  }
}

/** Writes the whole cluster; every set is created with the annotations rollguard would give it, so the start patches nothing. */
async function populate(request: Request): Promise<void> {
  const started = performance.now();
  await populateReviewed(request);
  await inParallel(NAMESPACES, async (n) => void (await create(request, '/api/v1/namespaces', { metadata: { name: ns(n) } })));
  await create(request, '/api/v1/namespaces', { metadata: { name: 'rollguard-system' } });
  const half = OBJECTS_PER_NAMESPACE / 2;
  const versions = new Map<string, Created>();
  await inParallel(NAMESPACES * half, async (i) => {
    const n = Math.floor(i / half);
    const k = i % half;
    const [c, s] = await Promise.all([
      create(request, `/api/v1/namespaces/${ns(n)}/configmaps`, { metadata: { name: cfg(k) }, data: { payload: PAYLOAD } }),
      create(request, `/api/v1/namespaces/${ns(n)}/secrets`, { metadata: { name: sec(k) }, stringData: { payload: PAYLOAD } }),
    ]);
    if (k < SETS_PER_NAMESPACE) {
      versions.set(`${ns(n)}/${cfg(k)}`, c);
      versions.set(`${ns(n)}/${sec(k)}`, s);
    }
  });
  console.log(`wrote ${NAMESPACES} namespaces and ${NAMESPACES * OBJECTS_PER_NAMESPACE} ConfigMaps and Secrets in ${((performance.now() - started) / 1000).toFixed(0)} s`);
  const setsStarted = performance.now();
  await inParallel(NAMESPACES * SETS_PER_NAMESPACE, async (i) => {
    const n = Math.floor(i / SETS_PER_NAMESPACE);
    const k = i % SETS_PER_NAMESPACE;
    const v = (name: string) => versions.get(`${ns(n)}/${name}`)!;
    const annotations = {
      [annotationKey('ConfigMap', cfg(k))]: `${v(cfg(k)).uid}/${v(cfg(k)).resourceVersion}`,
      [annotationKey('Secret', sec(k))]: `${v(sec(k)).uid}/${v(sec(k)).resourceVersion}`,
    };
    await create(request, `/apis/apps/v1/namespaces/${ns(n)}/statefulsets`, {
      metadata: { name: `set-${k}`, labels: { [ENABLED_LABEL]: 'true' } },
      spec: {
        replicas: 0,
        serviceName: `set-${k}`,
        selector: { matchLabels: { app: `set-${k}` } },
        template: {
          metadata: { labels: { app: `set-${k}` }, annotations },
          spec: {
            containers: [{ name: 'app', image: 'registry.example/app:1', envFrom: [{ secretRef: { name: sec(k) } }] }],
            volumes: [{ name: 'config', configMap: { name: cfg(k) } }],
          },
        },
      },
    });
  });
  console.log(`wrote ${NAMESPACES * SETS_PER_NAMESPACE} StatefulSets in ${((performance.now() - setsStarted) / 1000).toFixed(0)} s`);
}

/** Every change of a rollguard annotation on an opted-in set, seen by a watch of our own. */
class PatchWatch {
  readonly patches: { set: string; at: number }[] = [];
  private readonly seen = new Map<string, string>();
  private req?: ReturnType<typeof https.request>;

  async start(request: Request, server: string, agentOptions: https.AgentOptions): Promise<void> {
    const list = await request('GET', `/apis/apps/v1/statefulsets?labelSelector=${encodeURIComponent(`${ENABLED_LABEL}=true`)}`);
    const body = list.json as { metadata: { resourceVersion: string }; items: SetShape[] };
    for (const item of body.items) this.seen.set(key(item), fingerprint(item));
    const url = `${server}/apis/apps/v1/statefulsets?watch=1&allowWatchBookmarks=true&resourceVersion=${body.metadata.resourceVersion}&labelSelector=${encodeURIComponent(`${ENABLED_LABEL}=true`)}`;
    await new Promise<void>((resolve, reject) => {
      this.req = https.get(url, { ...agentOptions, agent: false }, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`watch: HTTP ${res.statusCode}`));
        resolve();
        let buffer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buffer += chunk;
          let nl: number;
          while ((nl = buffer.indexOf('\n')) >= 0) {
            const line = buffer.slice(0, nl);
            buffer = buffer.slice(nl + 1);
            if (line) this.onEvent(JSON.parse(line) as { type: string; object: SetShape });
          }
        });
      });
      this.req.on('error', (err) => (this.req?.destroyed ? undefined : reject(err)));
    });
  }

  private onEvent(event: { type: string; object: SetShape }): void {
    if (event.type !== 'MODIFIED' && event.type !== 'ADDED') return;
    const k = key(event.object);
    const print = fingerprint(event.object);
    const before = this.seen.get(k);
    this.seen.set(k, print);
    if (before !== undefined && before !== print) this.patches.push({ set: k, at: performance.now() });
  }

  stop(): void {
    this.req?.destroy();
  }
}

interface SetShape {
  metadata: { namespace: string; name: string };
  spec?: { template?: { metadata?: { annotations?: Record<string, string> } } };
}

const key = (s: SetShape): string => `${s.metadata.namespace}/${s.metadata.name}`;
function fingerprint(s: SetShape): string {
  const a = s.spec?.template?.metadata?.annotations ?? {};
  return Object.keys(a)
    .filter((k) => k.includes('.rollguard.io/'))
    .sort()
    .map((k) => `${k}=${a[k]}`)
    .join(',');
}

/** RSS of a process, sampled every 250 ms until stopped. */
function sampleRss(pid: number): { samples: { at: number; rss: number }[]; stop: () => void } {
  const samples: { at: number; rss: number }[] = [];
  const timer = setInterval(() => {
    try {
      samples.push({ at: performance.now(), rss: rssOf(pid) });
    } catch {
      // exited
    }
  }, 250);
  return { samples, stop: () => clearInterval(timer) };
}

/** Sends reviews to /mutate at a fixed rate until stopped; latencies in ms. */
function reviewAtRate(port: number, rate: number): { latencies: number[]; errors: () => number; stop: () => Promise<void> } {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 8 });
  const body = review('3f1c2a40-0000-4000-8000-000000000001');
  const latencies: number[] = [];
  const pending = new Set<Promise<void>>();
  let errors = 0;
  const timer = setInterval(() => {
    const started = performance.now();
    const p: Promise<void> = new Promise<void>((resolve) => {
      const req = https.request({ host: '127.0.0.1', port, path: '/mutate', method: 'POST', agent, rejectUnauthorized: false, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => {
          if (res.statusCode === 200) latencies.push(performance.now() - started);
          else errors++;
          resolve();
        });
      });
      req.on('error', () => (errors++, resolve()));
      req.end(body);
    }).finally(() => pending.delete(p));
    pending.add(p);
  }, 1000 / rate);
  return {
    latencies,
    errors: () => errors,
    async stop() {
      clearInterval(timer);
      await Promise.all(pending);
      agent.destroy();
    },
  };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

const secs = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

async function waitUntil(what: string, timeoutMs: number, probe: () => Promise<boolean>): Promise<number> {
  const started = performance.now();
  while (!(await probe().catch(() => false))) {
    if (performance.now() - started > timeoutMs) throw new Error(`${what}: not after ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return performance.now();
}

async function main(): Promise<void> {
  const reuse = process.env.BENCH_KUBECONFIG;
  const cp = reuse ? undefined : await startControlPlane({ controllerManager: false, apiServerArgs: words(process.env.BENCH_APISERVER_ARGS) });
  const kubeconfigPath = reuse ?? cp!.kubeconfigPath;
  const kc = loadKubeConfig(kubeconfigPath);
  const ca = await createCertificateAuthority({ commonName: 'bench-ca', validitySeconds: 3600, keyBits: 2048 });
  const dir = certDir(await createSignedCertificate(ca, { commonName: 'bench', ipAddresses: ['127.0.0.1'], usage: 'server', validitySeconds: 3600, keyBits: 2048 }));
  const { request, agentOptions, server } = await apiClient(kc);
  const watch = new PatchWatch();
  let rg: RollguardServe | undefined;
  try {
    if ((await request('GET', `/api/v1/namespaces/${ns(NAMESPACES - 1)}`)).status !== 200) await populate(request);
    await watch.start(request, server, agentOptions);
    // the image's NODE_OPTIONS, as deployed, then BENCH_NODE_ARGS (a later flag wins); BENCH_NODE_ARGS=none: no flags at all
    const nodeArgs = process.env.BENCH_NODE_ARGS === 'none' ? [] : [...deployedNodeOptions(), ...words(process.env.BENCH_NODE_ARGS)];
    console.log(`rollguard serve (${process.env.BENCH_ROLLGUARD_CLI ?? "the image's bundle, dist/image/cli.js"}) runs with node ${nodeArgs.join(' ') || '(no flags)'}`);
    const snapshotArgs = HEAP_SNAPSHOT_DIR ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${HEAP_SNAPSHOT_DIR}`] : [];
    const start = () => startRollguardServe({ kubeconfigPath, certDir: dir, namespace: 'rollguard-system', nodeArgs: [...snapshotArgs, ...nodeArgs], args: [`--max-restarts-per-second=${PACE}`, ...(WORKERS ? [`--workers=${WORKERS}`] : []), ...(MAX_WORKERS ? [`--max-workers=${MAX_WORKERS}`] : [])] });

    const t0 = performance.now();
    rg = await start();
    const rss = sampleRss(rg.child.pid!);
    const synced = await waitUntil('caches synced', 300_000, async () => Object.values((await rg!.status()).caches).every((c) => c.synced));
    const ready = await waitUntil('ready', 300_000, () => rg!.ready());
    const objects = Object.values((await rg.status()).caches).reduce((n, c) => n + c.objects, 0);
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const settled = rssOf(rg.child.pid!);
    const peakAtStart = peakRssOf(rg.child.pid!);
    const startPatches = watch.patches.length;
    console.log(`rollguard serve: caches synced ${secs(synced - t0)} after start, ready ${secs(ready - t0)} (${objects} objects cached; target ready <= 10 s)`);
    console.log(`  RSS peak ${mib(peakAtStart)}, ${mib(settled)} ${SETTLE_MS / 1000} s after ready; ${startPatches} patches at start`);
    console.log(`  ${SETTLE_MS / 1000} s after ready (the leader's first pass may still run): ${memoryLine(settled, await rg.memory())}`);
    // the leader's first pass over every set (its digests recorded), then the quiet in which rollguard gives back what it grew
    const passDone = await waitUntil('the first pass over every set', 300_000, async () => {
      const loop = ((await rg!.status()) as { reconcile?: { in_flight: number; queued: number } }).reconcile;
      return loop?.in_flight === 0 && loop.queued === 0;
    });
    await new Promise((r) => setTimeout(r, AFTER_PASS_MS));
    const afterPass = rssOf(rg.child.pid!);
    console.log(`  the first pass over every set ended ${secs(passDone - ready)} after ready; settled ${AFTER_PASS_MS / 1000} s later (target <= 150 MiB): ${memoryLine(afterPass, await rg.memory())}`);
    if (HEAP_SNAPSHOT_DIR) console.log(`  heap snapshot: ${await heapSnapshot(rg.child.pid!, HEAP_SNAPSHOT_DIR)}`);

    // what the loop still has to do when the storm starts: the storm's sets queue behind it
    const reconcileAtStorm = JSON.stringify(((await rg.status()) as { reconcile?: unknown }).reconcile);
    // the storm: one ConfigMap of each of STORM sets changes
    const rgMetrics = `http://127.0.0.1:${rg.adminPort}/metrics`;
    const [apiBefore, rgBefore] = await Promise.all([metricsAt(`${server}/metrics`, agentOptions), metricsAt(rgMetrics)]);
    const workerCounts: number[] = [];
    const workerSampler = setInterval(() => {
      metricsAt(rgMetrics)
        .then((m) => workerCounts.push(sumOf(m, 'rollguard_controller_workers', (l) => l.controller === 'restarter')))
        .catch(() => undefined);
    }, 1_000);
    const admission = reviewAtRate(rg.webhookPort, ADMISSION_RATE);
    const stormStarted = performance.now();
    const before = watch.patches.length;
    await inParallel(STORM, async (i) => {
      const n = Math.floor(i / SETS_PER_NAMESPACE);
      const k = i % SETS_PER_NAMESPACE;
      const res = await request('PATCH', `/api/v1/namespaces/${ns(n)}/configmaps/${cfg(k)}`, { data: { payload: `${PAYLOAD}-${Date.now()}` } }, 'application/merge-patch+json');
      if (res.status !== 200) throw new Error(`storm: PATCH ${ns(n)}/${cfg(k)}: HTTP ${res.status}`);
    });
    const written = performance.now();
    const budget = (STORM / PACE + 120) * 1000;
    // past the budget the figures below say how far it got
    const running = rg;
    await waitUntil(`${STORM} sets patched`, budget, async () => watch.patches.length - before >= STORM).catch(async (err: Error) => {
      console.log(`  ${err.message}; rollguard's /status says: ${JSON.stringify(((await running.status().catch(() => ({}))) as { reconcile?: unknown }).reconcile)}`);
      console.log(`  its TCP connections: ${connectionsOf(running.child.pid!)}`);
    });
    clearInterval(workerSampler);
    const [apiAfter, rgAfter] = await Promise.all([metricsAt(`${server}/metrics`, agentOptions), metricsAt(rgMetrics)]);
    // a little longer, to see any second patch
    await new Promise((r) => setTimeout(r, 5_000));
    await admission.stop();
    const storm = watch.patches.slice(before);
    const last = storm.length > 0 ? Math.max(...storm.map((p) => p.at)) : NaN;
    const perSet = new Map<string, number>();
    for (const p of storm) perSet.set(p.set, (perSet.get(p.set) ?? 0) + 1);
    const windows = new Map<number, number>();
    for (const p of storm) {
      const w = Math.floor((p.at - storm[0]!.at) / 1000);
      windows.set(w, (windows.get(w) ?? 0) + 1);
    }
    const maxWindow = Math.max(0, ...windows.values());
    console.log(`storm: ${STORM} ConfigMaps written in ${secs(written - stormStarted)}; last set patched ${secs(last - stormStarted)} after the first write (target <= ${STORM / PACE + 7} s: the 5 s debounce, ${STORM / PACE} s at the pace, 2 s slack)`);
    console.log(`  patches: ${storm.length} on ${perSet.size} sets (of ${STORM}), ${[...perSet.values()].filter((c) => c > 1).length} sets patched more than once`);
    const first = storm.length > 0 ? Math.min(...storm.map((p) => p.at)) : NaN;
    console.log(`  first set patched ${secs(first - stormStarted)} after the first write (--debounce 5 s); the loop at the storm's start: ${reconcileAtStorm}`);
    const seconds = storm.length > 1 ? (last - storm[0]!.at) / 1000 : NaN;
    console.log(`  most patches in one 1-s window: ${maxWindow} (limit ${PACE} + burst ${BURST} = ${PACE + BURST}); mean pace ${(storm.length / seconds).toFixed(1)}/s from the first patch`);
    for (const line of stormLatencies(apiBefore, apiAfter, rgBefore, rgAfter)) console.log(line);
    console.log(`  restarter workers (rollguard_controller_workers, sampled each second): most ${Math.max(0, ...workerCounts)}, least ${Math.min(...workerCounts)}${WORKERS ? ` (--workers=${WORKERS})` : ''}`);
    console.log(
      `  /mutate at ${ADMISSION_RATE}/s during the storm: p50 ${percentile(admission.latencies, 50).toFixed(2)} ms, p99 ${percentile(admission.latencies, 99).toFixed(2)} ms, p99.9 ${percentile(admission.latencies, 99.9).toFixed(2)} ms (${admission.latencies.length} reviews, ${admission.errors()} errors)`,
    );
    console.log(`  RSS peak over the run ${mib(peakRssOf(rg.child.pid!))} (target <= 200 MiB, with the restarted process's below), now ${mib(rssOf(rg.child.pid!))}`);
    console.log(`  after the storm: ${memoryLine(rssOf(rg.child.pid!), await rg.memory())}`);
    rss.stop();

    await rg.stop();
    const afterStop = watch.patches.length;
    const t1 = performance.now();
    rg = await start();
    const readyAgain = await waitUntil('ready after restart', 300_000, () => rg!.ready());
    await new Promise((r) => setTimeout(r, QUIET_AFTER_RESTART_MS));
    console.log(
      `restart after the storm: ready in ${secs(readyAgain - t1)}; ${watch.patches.length - afterStop} patches in the ${QUIET_AFTER_RESTART_MS / 1000} s after ready (want 0); RSS peak ${mib(peakRssOf(rg.child.pid!))}, now ${mib(rssOf(rg.child.pid!))}`,
    );
  } finally {
    watch.stop();
    await rg?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    await cp?.stop();
  }
}

await main();

/** Space-separated flags of an environment variable; none when unset. */
function words(value: string | undefined): string[] {
  return (value ?? '').split(' ').filter(Boolean);
}
