/**
 * Admission side by side: rollguard's /mutate, two controller-runtime peers (Go) and a bare
 * Fastify HTTPS route that answers `allowed: true`, each in its own process pinned to one core
 * (the same core, one under load at a time), driven by one client pinned to the other core:
 * the same ~11 KB StatefulSet review that gets a patch, keep-alive TLS with the same certificate,
 * runs interleaved (A B C D A B C D) so drift hits all of them. The peers are one binary: `c-r raw`
 * answers with PatchResponseFromRaw (marshal the patched object, diff it with the one sent),
 * `c-r direct` writes its JSON Patch from the annotations that change, as rollguard does.
 * Two more bare routes split rollguard's distance from the bare one into its parts: `bare+answer`
 * sends rollguard's own answer to this review, computed once (what writing the patch costs), and
 * `bare+handler` answers with rollguard's handler (what computing it costs); the rest, from
 * `bare+handler` to `rollguard`, is the webhook server's configuration (its hooks, logger, schema).
 * Throughput (closed loop) and p50/p99/p99.9 at fixed rates (open loop), client-side and
 * server-side (a histogram with 5 µs buckets inside each server). First checks that rollguard's
 * and both peers' patches, applied, give the same objects. Prints figures, ratios, each round's
 * throughput (the spread), each server's CPU time per review (from /proc: what other work on a
 * shared core leaves alone) and the targets; asserts nothing.
 *
 *   npm run bench -- admission [seconds per run]
 *   BENCH_ROUNDS (2), BENCH_RATES (500,1000,2000), BENCH_SERVER_NODE_OPTIONS, BENCH_MAX_REQUESTS_PER_CONNECTION,
 *   BENCH_SERVERS (rollguard,raw,direct,bare,bare+answer,bare+handler: a subset, e.g. rollguard,bare under a profiler)
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Fastify from 'fastify';
import { pino } from 'pino';
import { createMetrics } from '../src/metrics.js';
import { createAdmissionHandler } from '../src/restarter/admission-handler.js';
import { createWebhookServer } from '../src/server/webhook-server.js';
import { createCertificateAuthority, createSignedCertificate } from '../src/tls/certificates.js';
import { staticCertificateSource } from '../test/env/static-certificate-source.js';
import { checkPatchesAgree } from './side-by-side/patch-equivalence.js';
import { percentileOfCounts, readLatencyHistogram, serveLatencyHistogram } from './side-by-side/latency-histogram.js';
import { certDir, startBenchProcess, startPeer, type BenchProcess } from './side-by-side/peer.js';
import { staticLookup, writeVersionsFile, BENCH_VERSIONS } from './side-by-side/static-versions.js';
import { review } from './side-by-side/review.js';

const SECONDS = Number(process.argv[2] ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const RATES = (process.env.BENCH_RATES ?? '500,1000,2000').split(',').map(Number);
const CONCURRENCY = 16;
const CLIENT_CPU = '0';
const SERVER_CPU = '1';

type BareKind = 'bare' | 'bare+answer' | 'bare+handler';
type ServerKind = 'rollguard' | 'raw' | 'direct' | BareKind;
const ALL_SERVERS: readonly ServerKind[] = ['rollguard', 'raw', 'direct', 'bare', 'bare+answer', 'bare+handler'];
const SERVERS: readonly ServerKind[] = process.env.BENCH_SERVERS
  ? ALL_SERVERS.filter((s) => process.env.BENCH_SERVERS!.split(',').includes(s))
  : ALL_SERVERS;
const COLUMN: Record<ServerKind, string> = { rollguard: 'rollguard', raw: 'c-r raw', direct: 'c-r direct', bare: 'bare', 'bare+answer': 'bare+answer', 'bare+handler': 'bare+handler' };
/** the uid of the one review every run sends */
const REVIEW_UID = '3f1c2a40-0000-4000-8000-000000000001';
/** the ratios printed: rollguard's figure over each other server's */
const OTHERS = SERVERS.filter((s) => s !== 'rollguard');

/** What each bare route answers a review with: `allowed: true`; rollguard's answer to the bench's review, made once; rollguard's handler. */
function bareAnswer(kind: string, versionsFile: string): (body: { request: { uid: string } }) => unknown {
  if (kind === 'bare') return (body) => ({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: body.request.uid, allowed: true } });
  const handler = createAdmissionHandler({ cachesSynced: () => true, lookup: staticLookup(versionsFile), metrics: createMetrics() });
  if (kind === 'bare+handler') return (body) => (handler.handle(body) as { body: unknown }).body;
  const made = handler.handle(JSON.parse(review(REVIEW_UID)));
  if (made instanceof Promise || made.status !== 200) throw new Error('bench: rollguard did not answer the review at once with 200');
  const answer = made.body as { response: Record<string, unknown> };
  return (body) => ({ ...answer, response: { ...answer.response, uid: body.request.uid } });
}

/** A Node server child: `--serve rollguard|bare|bare+answer|bare+handler <webhookPort> <adminPort> <certDir> <versionsFile>`. */
async function serveInChild(kind: string, webhookPort: number, adminPort: number, dir: string, versionsFile: string): Promise<void> {
  const pair = { certPem: fs.readFileSync(path.join(dir, 'tls.crt'), 'utf8'), keyPem: fs.readFileSync(path.join(dir, 'tls.key'), 'utf8') };
  await serveLatencyHistogram(adminPort);
  if (kind === 'rollguard') {
    const logger = pino({ level: 'warn' });
    const metrics = createMetrics();
    const webhook = createWebhookServer({
      host: '127.0.0.1',
      port: webhookPort,
      certificates: staticCertificateSource({ ...pair, caPem: fs.readFileSync(path.join(dir, 'ca.crt'), 'utf8') }),
      routes: [{ path: '/mutate', ...createAdmissionHandler({ cachesSynced: () => true, lookup: staticLookup(versionsFile), metrics }) }],
      readiness: () => ({ ready: true, reasons: [] }),
      logger,
      ...(process.env.BENCH_MAX_REQUESTS_PER_CONNECTION ? { maxRequestsPerConnection: Number(process.env.BENCH_MAX_REQUESTS_PER_CONNECTION) } : {}),
    });
    await webhook.start(new AbortController().signal);
  } else {
    const answer = bareAnswer(kind, versionsFile);
    const bare = Fastify({ https: { cert: pair.certPem, key: pair.keyPem }, bodyLimit: 8 * 1024 * 1024 });
    bare.post('/mutate', async (req) => answer(req.body as { request: { uid: string } }));
    await bare.listen({ host: '127.0.0.1', port: webhookPort });
  }
}

interface Run {
  latencies: number[];
  serverCounts: number[];
  seconds: number;
  errors: number;
  /** open loop: reviews not sent because a second's worth was still unanswered */
  shed?: number;
  /** CPU time (user + system) the server process spent over the run */
  cpuSeconds: number;
}

/**
 * CPU time (user + system) a process has used, in seconds, from /proc: the server's cost per
 * review, which other work on a shared core does not change the way it changes throughput.
 */
function cpuSecondsOf(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  // the fields after the command name, which is in parentheses and may hold spaces
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [utime, stime] = [Number(fields[11]), Number(fields[12])];
  return (utime + stime) / CLOCK_TICKS_PER_SECOND;
}
/** USER_HZ: 100 on Linux on every architecture Node runs on */
const CLOCK_TICKS_PER_SECOND = 100;

const QUIET_WINDOW_MS = 300;
const QUIET_DEADLINE_MS = 15_000;

/**
 * Waits until no server process used more than one clock tick of CPU over QUIET_WINDOW_MS. A
 * process that was just under load goes on working for a while after it (most likely its
 * garbage collector), on the core the next run's server is pinned to: without this wait the
 * run after it got that work's delay in its tail latency. At QUIET_DEADLINE_MS it gives up and says so.
 */
async function quiet(servers: readonly BenchProcess[]): Promise<void> {
  const deadline = Date.now() + QUIET_DEADLINE_MS;
  const total = (): number => servers.reduce((sum, s) => sum + cpuSecondsOf(s.child.pid!), 0);
  for (;;) {
    const before = total();
    await new Promise((resolve) => setTimeout(resolve, QUIET_WINDOW_MS));
    if ((total() - before) * CLOCK_TICKS_PER_SECOND <= 1) return;
    if (Date.now() > deadline) {
      console.log(`  (the servers did not go quiet within ${QUIET_DEADLINE_MS / 1000} s; measuring anyway)`);
      return;
    }
  }
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

/** A fixed pool, its TLS handshakes done before the clock starts, as the API server keeps one. */
async function warmAgent(port: number, body: string): Promise<https.Agent> {
  const agent = new https.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  await Promise.all(Array.from({ length: CONCURRENCY * 4 }, () => post(agent, port, body)));
  return agent;
}

/** Closed loop: CONCURRENCY requests always in flight. */
async function closedLoop(server: BenchProcess, body: string, seconds: number): Promise<Run> {
  const agent = await warmAgent(server.webhookPort, body);
  await readLatencyHistogram(server.adminPort);
  const latencies: number[] = [];
  let errors = 0;
  const cpuBefore = cpuSecondsOf(server.child.pid!);
  const started = performance.now();
  const deadline = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < deadline) {
        try {
          latencies.push(await post(agent, server.webhookPort, body));
        } catch {
          errors++;
        }
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  const cpuSeconds = cpuSecondsOf(server.child.pid!) - cpuBefore;
  agent.destroy();
  return { latencies, serverCounts: await readLatencyHistogram(server.adminPort), seconds: elapsed, errors, cpuSeconds };
}

/** Open loop at a fixed rate, so latency is not hidden by the loop waiting on itself; one second of it first, unmeasured. */
async function openLoop(server: BenchProcess, body: string, rate: number, seconds: number): Promise<Run> {
  const agent = await warmAgent(server.webhookPort, body);
  const once = async (secs: number): Promise<Run> => {
    await readLatencyHistogram(server.adminPort);
    const latencies: number[] = [];
    let errors = 0;
    const total = rate * secs;
    const cpuBefore = cpuSecondsOf(server.child.pid!);
    const started = Date.now();
    const pending = new Set<Promise<void>>();
    let shed = 0;
    for (let i = 0; i < total; i++) {
      const wait = started + (i * 1000) / rate - Date.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      // a server that cannot keep the rate would queue without end: past a second's backlog, reviews are shed and counted
      if (pending.size >= rate) {
        shed++;
        continue;
      }
      const p: Promise<void> = post(agent, server.webhookPort, body)
        .then((ms) => void latencies.push(ms), () => void errors++)
        .finally(() => pending.delete(p));
      pending.add(p);
    }
    await Promise.all(pending);
    const cpuSeconds = cpuSecondsOf(server.child.pid!) - cpuBefore;
    return { latencies, serverCounts: await readLatencyHistogram(server.adminPort), seconds: (Date.now() - started) / 1000, errors, shed, cpuSeconds };
  };
  await once(1);
  const run = await once(seconds);
  agent.destroy();
  return run;
}

function merged(runs: Run[]): Run {
  return {
    latencies: runs.flatMap((r) => r.latencies).sort((a, b) => a - b),
    serverCounts: runs.reduce<number[]>((sum, r) => r.serverCounts.map((c, i) => c + (sum[i] ?? 0)), []),
    seconds: runs.reduce((s, r) => s + r.seconds, 0),
    errors: runs.reduce((s, r) => s + r.errors, 0),
    shed: runs.reduce((s, r) => s + (r.shed ?? 0), 0),
    cpuSeconds: runs.reduce((s, r) => s + r.cpuSeconds, 0),
  };
}

function clientPercentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

interface Figures {
  perSecond: number;
  client: [number, number, number];
  server: [number, number, number];
  requests: number;
  errors: number;
  shed: number;
  /** the server's CPU time per review answered, µs */
  cpuPerReview: number;
}

function figures(run: Run): Figures {
  const ps = [50, 99, 99.9] as const;
  return {
    perSecond: run.latencies.length / run.seconds,
    client: ps.map((p) => clientPercentile(run.latencies, p)) as [number, number, number],
    server: ps.map((p) => percentileOfCounts(run.serverCounts, p)) as [number, number, number],
    requests: run.latencies.length,
    errors: run.errors,
    shed: run.shed ?? 0,
    cpuPerReview: (run.cpuSeconds / run.latencies.length) * 1e6,
  };
}

function printTable(title: string, by: Partial<Record<ServerKind, Figures>>, rows: [string, (f: Figures) => number, number][]): void {
  // each column as wide as its heading and a space, at least 12
  const width = (heading: string): number => Math.max(12, heading.length + 1);
  const ratios = by.rollguard ? OTHERS : [];
  const ratioHeading = (s: ServerKind): string => `rg/${COLUMN[s]}`;
  console.log(`\n${title}`);
  console.log(`${''.padEnd(22)}${SERVERS.map((s) => COLUMN[s].padStart(width(COLUMN[s]))).join('')}${ratios.map((s) => ratioHeading(s).padStart(width(ratioHeading(s)))).join('')}`);
  for (const [label, pick, digits] of rows) {
    const value = (s: ServerKind): number => pick(by[s]!);
    const ratio = (s: ServerKind): string => (value('rollguard') / value(s)).toFixed(2).padStart(width(ratioHeading(s)));
    console.log(`${label.padEnd(22)}${SERVERS.map((s) => value(s).toFixed(digits).padStart(width(COLUMN[s]))).join('')}${ratios.map(ratio).join('')}`);
  }
  const counts = SERVERS.map((s) => `${COLUMN[s]} ${by[s]!.requests} requests, ${by[s]!.errors} errors${by[s]!.shed ? `, ${by[s]!.shed} shed` : ''}`).join('; ');
  console.log(`  (${counts})`);
}

const LATENCY_ROWS: [string, (f: Figures) => number, number][] = [
  ['client p50 ms', (f) => f.client[0], 3],
  ['client p99 ms', (f) => f.client[1], 3],
  ['client p99.9 ms', (f) => f.client[2], 3],
  ['server p50 ms', (f) => f.server[0], 3],
  ['server p99 ms', (f) => f.server[1], 3],
  ['server p99.9 ms', (f) => f.server[2], 3],
];

async function main(): Promise<void> {
  if (os.availableParallelism() >= 2) execFileSync('taskset', ['-p', '-c', CLIENT_CPU, String(process.pid)], { stdio: 'ignore' });
  const ca = await createCertificateAuthority({ commonName: 'bench-ca', validitySeconds: 3600, keyBits: 2048 });
  const pair = await createSignedCertificate(ca, { commonName: 'bench', ipAddresses: ['127.0.0.1'], usage: 'server', validitySeconds: 3600, keyBits: 2048 });
  const dir = certDir(pair);
  fs.writeFileSync(path.join(dir, 'ca.crt'), ca.certPem);
  const versionsFile = writeVersionsFile(dir, BENCH_VERSIONS);
  const execArgv = (process.env.BENCH_SERVER_NODE_OPTIONS ?? '').split(' ').filter(Boolean);
  const self = fileURLToPath(import.meta.url);
  const node = (kind: ServerKind) =>
    startBenchProcess(process.execPath, ({ webhookPort, adminPort }) => [...execArgv, self, '--serve', kind, String(webhookPort), String(adminPort), dir, versionsFile], {
      cpus: SERVER_CPU,
    });
  const started: BenchProcess[] = [];
  try {
    const servers = {} as Record<ServerKind, BenchProcess>;
    for (const kind of SERVERS) {
      servers[kind] = kind === 'raw' || kind === 'direct' ? await startPeer({ certDir: dir, cpus: SERVER_CPU, versionsFile, patch: kind }) : await node(kind);
      started.push(servers[kind]);
    }
    if (servers.rollguard) {
      for (const peer of (['raw', 'direct'] as const).filter((p) => servers[p])) {
        const cases = await checkPatchesAgree(servers.rollguard.webhookPort, servers[peer].webhookPort);
        console.log(`patch check: ${cases} reviews, rollguard's and the ${COLUMN[peer]} peer's patches give the same objects`);
      }
    }

    const body = review(REVIEW_UID);
    console.log(`review body: ${(Buffer.byteLength(body) / 1024).toFixed(1)} KB; ${SECONDS} s per run, ${ROUNDS} rounds interleaved; servers pinned to cpu ${SERVER_CPU}, client to cpu ${CLIENT_CPU}`);
    for (const kind of SERVERS) await closedLoop(servers[kind], body, 2); // warm-up: JIT and TLS sessions

    const loads: { title: string; run: (s: BenchProcess) => Promise<Run> }[] = [
      { title: `max throughput (closed loop, ${CONCURRENCY} in flight)`, run: (s) => closedLoop(s, body, SECONDS) },
      ...RATES.map((rate) => ({ title: `at ${rate} reviews/s (open loop)`, run: (s: BenchProcess) => openLoop(s, body, rate, SECONDS) })),
    ];
    const runs = loads.map(() => Object.fromEntries(SERVERS.map((s) => [s, [] as Run[]])) as Record<ServerKind, Run[]>);
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, load] of loads.entries()) {
        for (const kind of SERVERS) {
          await quiet(started);
          runs[i]![kind].push(await load.run(servers[kind]));
        }
      }
    }
    const byLoad = loads.map((_, i) => Object.fromEntries(SERVERS.map((s) => [s, figures(merged(runs[i]![s]))])) as Record<ServerKind, Figures>);
    for (const [i, load] of loads.entries()) printTable(load.title, byLoad[i]!, [['reviews/s', (f) => f.perSecond, 0], ['server CPU µs/review', (f) => f.cpuPerReview, 0], ...LATENCY_ROWS]);

    // the spread: each round's closed-loop throughput, and rollguard's ratios within that round
    console.log('\nmax throughput by round, reviews/s (ratios within the round)');
    for (let round = 0; round < ROUNDS; round++) {
      const inRound = (s: ServerKind): Figures => figures(runs[0]![s][round]!);
      const ratios = servers.rollguard ? OTHERS.map((s) => `rg/${COLUMN[s]} ${(inRound('rollguard').perSecond / inRound(s).perSecond).toFixed(2)}`).join(', ') : '';
      console.log(`  round ${round + 1}: ${SERVERS.map((s) => `${COLUMN[s]} ${inRound(s).perSecond.toFixed(0)} (${inRound(s).cpuPerReview.toFixed(0)} µs CPU each)`).join(', ')}${ratios ? `; ${ratios}` : ''}`);
    }
    if (servers.rollguard && servers.bare) {
      const throughput = byLoad[0]!;
      const at1000 = RATES.indexOf(1000);
      const p99 = at1000 < 0 ? undefined : byLoad[at1000 + 1]!;
      console.log('\ntargets');
      console.log(`  throughput rollguard / bare: ${(throughput.rollguard.perSecond / throughput.bare.perSecond).toFixed(2)} (target >= 0.85)`);
      console.log(`  server CPU per review bare / rollguard: ${(throughput.bare.cpuPerReview / throughput.rollguard.cpuPerReview).toFixed(2)} (the throughput ratio each would have on a core of its own)`);
      if (p99) console.log(`  client p99 at 1000/s rollguard / bare: ${(p99.rollguard.client[1] / p99.bare.client[1]).toFixed(2)} (target <= 1.5)`);
      for (const peer of (['raw', 'direct'] as const).filter((p) => servers[p])) {
        console.log(`  throughput rollguard / ${COLUMN[peer]}: ${(throughput.rollguard.perSecond / throughput[peer].perSecond).toFixed(2)} (target >= 1: ${peer === 'raw' ? 'still ahead of the peer' : 'the anchor to beat'})`);
      }
    }
    const [answered, handled] = [servers['bare+answer'], servers['bare+handler']];
    if (servers.rollguard && servers.bare && answered && handled) {
      const cpu = (s: ServerKind): number => byLoad[0]![s].cpuPerReview;
      const part = (label: string, from: ServerKind, to: ServerKind): string =>
        `  ${label.padEnd(52)}${(cpu(to) - cpu(from)).toFixed(0).padStart(5)} µs  (${COLUMN[to]} − ${COLUMN[from]})`;
      console.log(`
rollguard's CPU per review beyond the bare route's (${(cpu('rollguard') - cpu('bare')).toFixed(0)} µs at max throughput), part by part`);
      console.log(part("sending rollguard's answer instead of allowed: true", 'bare', 'bare+answer'));
      console.log(part('computing it (the handler)', 'bare+answer', 'bare+handler'));
      console.log(part("the webhook server's configuration", 'bare+handler', 'rollguard'));
      console.log(`  a Fastify route that sends this answer at no cost: ${(byLoad[0]!['bare+answer'].perSecond / byLoad[0]!.bare.perSecond).toFixed(2)} of the bare route's throughput`);
    }
  } finally {
    for (const p of started.reverse()) await p.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--serve') {
  const [, , , kind, webhookPort, adminPort, dir, versionsFile] = process.argv;
  // an orderly exit, so that --cpu-prof or --heap-prof in BENCH_SERVER_NODE_OPTIONS write their files
  process.once('SIGTERM', () => process.exit(0));
  await serveInChild(kind!, Number(webhookPort), Number(adminPort), dir!, versionsFile!);
} else {
  await main();
}
