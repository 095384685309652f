import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { startControlPlane } from '../src/dev/control-plane.js';
import { createCertificateAuthority, createSignedCertificate } from '../src/tls/certificates.js';
import { certDir, rssOf, startPeer } from './side-by-side/peer.js';
import { deployedNodeOptions, memoryLine, startRollguardServe } from './side-by-side/rollguard-serve.js';

// What each dependency costs in memory, and rollguard's idle RSS beside the controller-runtime
// peer's, in one run.
//   npm run bench -- import-cost            (import costs, then idle RSS against a local API server)
//   npm run bench -- import-cost --imports  (import costs only; no control plane)
//   npm run bench -- import-cost --idle     (idle RSS only)
// Import cost: the RSS of a fresh Node process after it imported one module (and a full GC),
// minus that of the same process importing nothing; the median of IMPORT_RUNS. The modules are
// each product dependency, the client-node pieces rollguard could reach (its root, the KubeConfig
// module, the generated API), and rollguard's own start-up graph (dist/src/main.js: what `serve`
// imports before it connects). The image's bundle cannot be imported a module at a time: its
// idle process is measured below.
// Idle RSS: `rollguard serve` with nothing to watch (an empty namespace, file certificates, no
// leader election), SETTLE_MS after it is ready, beside the peer watching the same namespace;
// the image's bundle with the NODE_OPTIONS the image sets (read from the Dockerfile: the
// deployed configuration) and with none, and the compiled CLI with node_modules (unbundled)
// with the image's flags. Prints figures; asserts nothing.

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const IMPORT_RUNS = Number(process.env.BENCH_IMPORT_RUNS ?? 3);
const SETTLE_MS = Number(process.env.BENCH_SETTLE_MS ?? 20_000);
const TARGET_IDLE_MB = 80;

const MODULES = [
  '@kubernetes/client-node',
  '@kubernetes/client-node/dist/config.js',
  '@kubernetes/client-node/dist/gen/index.js',
  'undici',
  'fastify',
  'prom-client',
  'pino',
  'node-forge',
  'fast-json-patch',
  './dist/src/kube/kubeconfig.js',
  './dist/src/main.js',
];

const MB = 1024 * 1024;
const mb = (bytes: number): string => `${(bytes / MB).toFixed(1)} MB`;


const IMPORT_SCRIPT = `
  const collect = require('node:vm').runInNewContext('gc');
  (async () => {
    const spec = process.argv[1];
    if (spec) await import(spec.startsWith('./') ? require('node:url').pathToFileURL(require('node:path').resolve(spec)).href : spec);
    collect(); await new Promise((r) => setTimeout(r, 100)); collect();
    const m = process.memoryUsage();
    console.log(JSON.stringify({ rss: m.rss, heap: m.heapUsed }));
  })();`;

async function importedOnce(module: string, nodeArgs: string[]): Promise<{ rss: number; heap: number }> {
  const { stdout } = await promisify(execFile)(process.execPath, [...nodeArgs, '--expose-gc', '--input-type=commonjs', '-e', IMPORT_SCRIPT, module], { cwd: REPO });
  return JSON.parse(stdout) as { rss: number; heap: number };
}

async function imported(module: string, nodeArgs: string[]): Promise<{ rss: number; heap: number }> {
  const runs: { rss: number; heap: number }[] = [];
  for (let i = 0; i < IMPORT_RUNS; i++) runs.push(await importedOnce(module, nodeArgs));
  runs.sort((a, b) => a.rss - b.rss);
  return runs[Math.floor(runs.length / 2)]!;
}

async function importCosts(nodeArgs: string[]): Promise<void> {
  const bare = await imported('', nodeArgs);
  console.log(`import cost, each module alone in a fresh Node ${process.version}${nodeArgs.length ? ` (${nodeArgs.join(' ')})` : ''}; bare process RSS ${mb(bare.rss)}, heap ${mb(bare.heap)}`);
  console.log(`  ${'module'.padEnd(42)}${'RSS'.padStart(10)}${'+RSS'.padStart(10)}${'+heap'.padStart(10)}`);
  for (const module of MODULES) {
    const m = await imported(module, nodeArgs);
    console.log(`  ${module.padEnd(42)}${mb(m.rss).padStart(10)}${mb(m.rss - bare.rss).padStart(10)}${mb(m.heap - bare.heap).padStart(10)}`);
  }
}

/** `rollguard serve` with nothing to watch, SETTLE_MS after ready. */
async function rollguardIdle(kubeconfigPath: string, dir: string, namespace: string, nodeArgs: string[]): Promise<{ rss: number; line: string }> {
  const rg = await startRollguardServe({ kubeconfigPath, certDir: dir, namespace, watchNamespaces: [namespace], nodeArgs });
  try {
    for (const deadline = Date.now() + 60_000; !(await rg.ready()); await new Promise((r) => setTimeout(r, 200))) {
      if (Date.now() > deadline) throw new Error('rollguard serve not ready after 60 s');
    }
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const rss = rssOf(rg.child.pid!);
    return { rss, line: memoryLine(rss, await rg.memory()) };
  } finally {
    await rg.stop();
  }
}

async function peerIdle(kubeconfigPath: string, dir: string, namespace: string): Promise<number> {
  const peer = await startPeer({ certDir: dir, kubeconfig: kubeconfigPath, namespaces: [namespace] });
  try {
    for (const deadline = Date.now() + 60_000; !((await (await fetch(`http://127.0.0.1:${peer.adminPort}/synced`)).json()) as boolean); await new Promise((r) => setTimeout(r, 100))) {
      if (Date.now() > deadline) throw new Error('peer not synced after 60 s');
    }
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    return rssOf(peer.child.pid!);
  } finally {
    await peer.stop();
  }
}

async function main(): Promise<void> {
  const deployed = deployedNodeOptions();
  if (!process.argv.includes('--idle')) {
    await importCosts([]);
    await importCosts(deployed);
  }
  if (process.argv.includes('--imports')) return;

  const cp = await startControlPlane({ controllerManager: false });
  const ca = await createCertificateAuthority({ commonName: 'bench-ca', validitySeconds: 3600, keyBits: 2048 });
  const dir = certDir(await createSignedCertificate(ca, { commonName: 'bench', ipAddresses: ['127.0.0.1'], usage: 'server', validitySeconds: 3600, keyBits: 2048 }));
  try {
    const namespace = 'bench-idle';
    // an empty namespace: nothing to watch (kube-system and default are not watched: --watch-namespaces)
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    await kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: namespace } } });
    const peer = await peerIdle(cp.kubeconfigPath, dir, namespace);
    console.log(`\nidle RSS (nothing to watch, ${SETTLE_MS / 1000} s after ready/synced), ${new Date().toISOString()}; target <= ${TARGET_IDLE_MB} MB with the deployed flags`);
    console.log(`  controller-runtime peer                    ${mb(peer)}`);
    // BENCH_IDLE_VARIANTS: more flag sets to weigh, `;` between sets, e.g. "--max-semi-space-size=4;--max-semi-space-size=8"
    const variants = (process.env.BENCH_IDLE_VARIANTS ?? '').split(';').map((v) => v.split(' ').filter(Boolean)).filter((v) => v.length > 0);
    for (const [label, args] of [
      [`rollguard serve, deployed NODE_OPTIONS (${deployed.join(' ')})`, deployed],
      ['rollguard serve, no Node flags', []],
      ['rollguard serve unbundled (dist/src/cli.js), deployed NODE_OPTIONS', [`BENCH_ROLLGUARD_CLI=${path.join(REPO, 'dist', 'src', 'cli.js')}`, ...deployed]],
      ...variants.map((v) => [`rollguard serve, ${v.join(' ')}`, v] as const),
    ] as const) {
      // NAME=value in a set: an environment variable of that process (MALLOC_ARENA_MAX=2), not a flag
      const env = args.filter((a) => /^[A-Z_]+=/.test(a));
      const saved = { ...process.env };
      for (const e of env) process.env[e.slice(0, e.indexOf('='))] = e.slice(e.indexOf('=') + 1);
      const idle = await rollguardIdle(cp.kubeconfigPath, dir, namespace, args.filter((a) => !env.includes(a))).finally(() => {
        for (const e of env) {
          const name = e.slice(0, e.indexOf('='));
          if (saved[name] === undefined) delete process.env[name];
          else process.env[name] = saved[name];
        }
      });
      console.log(`  ${label.padEnd(42)} ${mb(idle.rss)}  (${(idle.rss / peer).toFixed(2)} x peer; ${idle.rss <= TARGET_IDLE_MB * MB ? 'meets' : 'misses'} ${TARGET_IDLE_MB} MB)`);
      console.log(`    ${idle.line}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await cp.stop();
  }
}

await main();
