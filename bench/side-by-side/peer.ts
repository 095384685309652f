import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/env/ports.js';
import type { KeyPairPem } from '../../src/tls/certificates.js';

const REPO_ROOT = findRepoRoot(path.dirname(fileURLToPath(import.meta.url)));

function findRepoRoot(from: string): string {
  let dir = from;
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`no package.json above ${from}`);
    dir = up;
  }
  return dir;
}

/** The controller-runtime peer's binary, built once from the Go module proxy (bench/peer-controller-runtime/build.sh). */
export function peerBinary(): string {
  const script = path.join(REPO_ROOT, 'bench', 'peer-controller-runtime', 'build.sh');
  return execFileSync('bash', [script], { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' }).trim().split('\n').pop()!;
}

/** A folder with tls.crt and tls.key, as controller-runtime's webhook server reads them. */
export function certDir(pair: KeyPairPem): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-bench-certs-'));
  fs.writeFileSync(path.join(dir, 'tls.crt'), pair.certPem);
  fs.writeFileSync(path.join(dir, 'tls.key'), pair.keyPem, { mode: 0o600 });
  return dir;
}

export interface BenchProcess {
  child: ChildProcess;
  webhookPort: number;
  adminPort: number;
  /** everything it printed on stdout so far */
  output(): string;
  stop(): Promise<void>;
}

export interface PeerOptions {
  certDir: string;
  /** `taskset -c` list; unpinned when absent */
  cpus?: string;
  kubeconfig?: string;
  namespaces?: string[];
  versionsFile?: string;
  /**
   * How the webhook writes its patch: `raw` (the default) marshals the patched object and diffs it
   * with the one sent (`admission.PatchResponseFromRaw`); `direct` writes the operations itself.
   */
  patch?: 'raw' | 'direct';
}

/** Starts a process on fresh loopback ports; `args` gets them. Resolves once its admin port answers. */
export async function startBenchProcess(
  command: string,
  args: (ports: { webhookPort: number; adminPort: number }) => string[],
  opts: { cpus?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<BenchProcess> {
  const webhookPort = await freePort();
  const adminPort = await freePort();
  const argv = [command, ...args({ webhookPort, adminPort })];
  const [file, ...rest] = opts.cpus ? ['taskset', '-c', opts.cpus, ...argv] : argv;
  const child = spawn(file!, rest, { stdio: ['ignore', 'pipe', 'inherit'], env: opts.env ?? process.env });
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${command} exited with ${child.exitCode} before it listened`);
    try {
      await fetch(`http://127.0.0.1:${adminPort}/latency`);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`${command}: admin port ${adminPort} not answering after 60 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  while (!(await accepts(webhookPort))) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${command}: webhook port ${webhookPort} not listening`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    child,
    webhookPort,
    adminPort,
    output: () => out,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

export function startPeer(opts: PeerOptions): Promise<BenchProcess> {
  return startBenchProcess(
    peerBinary(),
    ({ webhookPort, adminPort }) => [
      `--port=${webhookPort}`,
      `--admin-port=${adminPort}`,
      `--cert-dir=${opts.certDir}`,
      ...(opts.kubeconfig ? ['--cache', `--kubeconfig=${opts.kubeconfig}`] : []),
      ...(opts.namespaces ? [`--namespaces=${opts.namespaces.join(',')}`] : []),
      ...(opts.versionsFile ? [`--versions=${opts.versionsFile}`] : []),
      `--patch=${opts.patch ?? 'raw'}`,
    ],
    { cpus: opts.cpus },
  );
}

/** Resident set size of a process, from /proc. */
export function rssOf(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = /^VmRSS:\s+(\d+) kB/m.exec(status)?.[1];
  if (!kb) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(kb) * 1024;
}

/** Peak resident set size of a process, from /proc. */
export function peakRssOf(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN) * 1024;
}
