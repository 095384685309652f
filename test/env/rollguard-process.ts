import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './ports.js';
import { onTestFailed } from 'vitest';
import { waitFor } from './wait.js';

/** The repository's root, also from the compiled copy in dist/test/env that a bench runs. */
function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, 'package.json')) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return dir;
}
const REPO_ROOT = repoRoot();
const CLI = path.join(REPO_ROOT, 'dist', 'src', 'cli.js');
/** The image's rollguard: the CLI bundled as the Dockerfile bundles it (rolldown.config.mjs). */
export const IMAGE_CLI = path.join(REPO_ROOT, 'dist', 'image', 'cli.js');

/** Compiles rollguard once so tests can run it as a real process, signals and all. */
export function buildRollguard(): void {
  execFileSync(process.execPath, [path.join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], {
    cwd: REPO_ROOT,
    stdio: 'inherit',
  });
}

/** Bundles the compiled CLI into dist/image as the image build does; needs buildRollguard's output. */
export function buildImageBundle(): void {
  execFileSync(process.execPath, [path.join(REPO_ROOT, 'node_modules', 'rolldown', 'bin', 'cli.mjs'), '-c', 'rolldown.config.mjs'], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

export interface RollguardProcess {
  name: string;
  child: ChildProcess;
  webhookPort: number;
  adminPort: number;
  adminUrl: string;
  logFile: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** the parsed JSON log lines so far */
  logLines(): Record<string, unknown>[];
  status(): Promise<Record<string, unknown>>;
  waitReady(timeoutMs?: number): Promise<void>;
  /** SIGKILL if still running; for afterAll/finally */
  kill(): Promise<void>;
}

export interface RollguardProcessOptions {
  name: string;
  kubeconfigPath: string;
  args?: string[];
  env?: Record<string, string>;
  /** The script to run; the compiled CLI (dist/src/cli.js) by default. */
  cli?: string;
  /** Ports of a replica started again behind a balancer that knows them; free ones by default. */
  webhookPort?: number;
  adminPort?: number;
}

/** `rollguard serve` as a child process on free loopback ports; its log goes to a file. */
export async function startRollguardProcess(opts: RollguardProcessOptions): Promise<RollguardProcess> {
  const cli = opts.cli ?? CLI;
  if (!fs.existsSync(cli)) throw new Error(`${cli} is missing: the integration global setup builds it`);
  const webhookPort = opts.webhookPort ?? (await freePort());
  const adminPort = opts.adminPort ?? (await freePort());
  const logFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-proc-')), `${opts.name}.log`);
  const fd = fs.openSync(logFile, 'a');
  const child = spawn(
    process.execPath,
    [
      cli,
      'serve',
      `--kubeconfig=${opts.kubeconfigPath}`,
      '--webhook-host=127.0.0.1',
      `--webhook-port=${webhookPort}`,
      '--admin-host=127.0.0.1',
      `--admin-port=${adminPort}`,
      '--tls-extra-ips=127.0.0.1',
      // the restart floor is off unless a test is about it: most roll one set more than once a minute
      '--min-restart-interval=0',
      // tests share one API server: a test that is about the eviction guard's configuration names its own
      '--eviction-webhook-configuration=',
      ...(opts.args ?? []),
    ],
    { stdio: ['ignore', fd, fd], env: { ...process.env, ...opts.env } },
  );
  fs.closeSync(fd);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  let done = false;
  void exited.then(() => (done = true));
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const logLines = (): Record<string, unknown>[] =>
    fs
      .readFileSync(logFile, 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const proc: RollguardProcess = {
    name: opts.name,
    child,
    webhookPort,
    adminPort,
    adminUrl,
    logFile,
    exited,
    logLines,
    async status() {
      const res = await fetch(`${adminUrl}/status`, { signal: AbortSignal.timeout(2_000) });
      return (await res.json()) as Record<string, unknown>;
    },
    async waitReady(timeoutMs = 60_000) {
      await waitFor(
        `${opts.name} /readyz`,
        async () => {
          if (done) throw new Error(`${opts.name} exited; log:\n${fs.readFileSync(logFile, 'utf8').slice(-3000)}`);
          const res = await fetch(`${adminUrl}/readyz`, { signal: AbortSignal.timeout(2_000) });
          if (res.ok) return true;
          throw new Error(`readyz ${res.status}: ${await res.text()}`);
        },
        { timeoutMs, intervalMs: 200 },
      );
    },
    async kill() {
      if (done) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
  return proc;
}

/** On failure, prints the last log lines of every rollguard process the test started. */
export function printProcessLogsOnFailure(processes: Iterable<RollguardProcess>, lines = 25): void {
  onTestFailed(() => {
    for (const proc of processes) {
      const tail = proc.logLines().slice(-lines).map((l) => JSON.stringify(l));
      console.error(`--- last log lines of ${proc.name} (pid ${proc.child.pid}) ---\n${tail.join('\n')}`);
    }
  });
}
