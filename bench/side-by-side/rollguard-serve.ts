import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { dockerfileNodeOptions } from '../../test/env/dockerfile-node-options.js';
import { freePort } from '../../test/env/ports.js';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** NODE_OPTIONS as the image sets them (the Dockerfile), one flag each: the deployed configuration. */
export function deployedNodeOptions(): string[] {
  return dockerfileNodeOptions().split(' ').filter(Boolean);
}

export interface RollguardServe {
  child: ChildProcess;
  webhookPort: number;
  adminPort: number;
  status(): Promise<{ ready: boolean; caches: Record<string, { synced: boolean; objects: number }> }>;
  ready(): Promise<boolean>;
  /** What of the RSS is V8's heap, read from rollguard's own /metrics (prom-client's process gauges). */
  memory(): Promise<MemoryFigures>;
  stop(): Promise<void>;
}

export interface MemoryFigures {
  /** V8 heap committed: old and new space, code, large objects, live and garbage alike */
  heapCommitted: number;
  heapUsed: number;
  /** the new space (the young generation) committed, part of heapCommitted */
  newSpaceCommitted: number;
  /** memory V8 was told of outside its heap: Buffers, TLS and zlib state */
  external: number;
}

function gauge(lines: readonly string[], name: string, labels = ''): number {
  const line = lines.find((l) => l.startsWith(`${name}${labels} `));
  if (!line) throw new Error(`rollguard's /metrics has no ${name}${labels}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

export const mib = (b: number): string => `${(b / 1024 / 1024).toFixed(0)} MiB`;

/** One line: the RSS, and how much of it is V8's heap, its young generation, external memory, and the rest. */
export function memoryLine(rss: number, m: MemoryFigures): string {
  const rest = rss - m.heapCommitted - m.external;
  return `RSS ${mib(rss)} = V8 heap committed ${mib(m.heapCommitted)} (used ${mib(m.heapUsed)}; young generation ${mib(m.newSpaceCommitted)}) + external ${mib(m.external)} + the rest ${mib(rest)} (code, malloc, stacks, the node binary)`;
}

/**
 * The product process, `rollguard serve` from the image's bundle (dist/image/cli.js), on loopback ports with the bench's
 * certificate files (no self-managed TLS, no caBundle to keep) and leader election off.
 */
export async function startRollguardServe(opts: {
  kubeconfigPath: string;
  /** folder with tls.crt and tls.key */
  certDir: string;
  namespace: string;
  watchNamespaces?: string[];
  args?: string[];
  nodeArgs?: string[];
}): Promise<RollguardServe> {
  // the image's bundle (rolldown.config.mjs), as deployed; BENCH_ROLLGUARD_CLI=dist/src/cli.js for the compiled modules
  const cli = process.env.BENCH_ROLLGUARD_CLI ?? path.join(REPO_ROOT, 'dist', 'image', 'cli.js');
  if (!fs.existsSync(cli)) throw new Error(`${cli} is missing: run npm run build:bench first`);
  const [webhookPort, adminPort] = [await freePort(), await freePort()];
  const child = spawn(
    process.execPath,
    [
      ...(opts.nodeArgs ?? []),
      cli,
      'serve',
      `--kubeconfig=${opts.kubeconfigPath}`,
      `--namespace=${opts.namespace}`,
      ...(opts.watchNamespaces ? [`--watch-namespaces=${opts.watchNamespaces.join(',')}`] : []),
      '--webhook-host=127.0.0.1',
      `--webhook-port=${webhookPort}`,
      '--admin-host=127.0.0.1',
      `--admin-port=${adminPort}`,
      `--tls-cert-file=${path.join(opts.certDir, 'tls.crt')}`,
      `--tls-key-file=${path.join(opts.certDir, 'tls.key')}`,
      '--webhook-configuration=',
      '--leader-election=false',
      '--log-level=warn',
      ...(opts.args ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const admin = `http://127.0.0.1:${adminPort}`;
  return {
    child,
    webhookPort,
    adminPort,
    async status() {
      if (child.exitCode !== null) throw new Error(`rollguard serve exited with ${child.exitCode}`);
      return (await (await fetch(`${admin}/status`, { signal: AbortSignal.timeout(5_000) })).json()) as Awaited<ReturnType<RollguardServe['status']>>;
    },
    async ready() {
      if (child.exitCode !== null) throw new Error(`rollguard serve exited with ${child.exitCode}`);
      return fetch(`${admin}/readyz`, { signal: AbortSignal.timeout(5_000) }).then((r) => r.ok, () => false);
    },
    async memory() {
      const metrics = (await (await fetch(`${admin}/metrics`, { signal: AbortSignal.timeout(5_000) })).text()).split('\n');
      return {
        heapCommitted: gauge(metrics, 'rollguard_nodejs_heap_size_total_bytes'),
        heapUsed: gauge(metrics, 'rollguard_nodejs_heap_size_used_bytes'),
        newSpaceCommitted: gauge(metrics, 'rollguard_nodejs_heap_space_size_total_bytes', '{space="new"}'),
        external: gauge(metrics, 'rollguard_nodejs_external_memory_bytes'),
      };
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
