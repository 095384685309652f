import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './ports.js';
import { waitFor } from './wait.js';

export interface Backend {
  name: string;
  /** where TLS traffic goes (passed through untouched, as a Service does) */
  port: number;
  /** plain-HTTP port whose GET /readyz decides whether the backend gets new connections, as endpoints do */
  checkPort: number;
}

/** A server's check state as haproxy reports it: UP, DOWN, or a transition such as "UP 1/2". */
export type ServerState = string;

export interface Balancer {
  port: number;
  /** What haproxy thinks of each backend now, by name: only an UP one gets new connections. */
  serverStates(): Promise<Record<string, ServerState>>;
  stop(): Promise<void>;
}

/**
 * How long a readiness check may take before it counts as failed. haproxy's default is `inter`
 * (100 ms here), so a replica whose event loop is busy for 100 ms on a loaded machine would be
 * taken out as if it were not ready; a kubelet probe waits a second by default.
 */
const CHECK_TIMEOUT = '1s';
/** Two failed checks in a row take a backend out, so one lost check does not; still well within a drain delay. */
const CHECK_FALL = 2;

/**
 * A real L4 balancer in front of rollguard replicas: new connections only go to replicas whose
 * /readyz answers 200, like a Service whose endpoints follow readiness. Needs haproxy on PATH
 * (.ci/run installs Debian's package).
 */
export async function startBalancer(backends: Backend[], checkIntervalMs = 100): Promise<Balancer> {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-haproxy-'));
  const cfg = [
    'global',
    '  maxconn 1000',
    `  stats socket ${path.join(dir, 'admin.sock')} mode 600 level admin`,
    'defaults',
    '  mode tcp',
    '  timeout connect 2s',
    '  timeout client 120s',
    '  timeout server 120s',
    `  timeout check ${CHECK_TIMEOUT}`,
    `frontend webhook`,
    `  bind 127.0.0.1:${port}`,
    '  default_backend rollguard',
    'backend rollguard',
    '  option httpchk GET /readyz',
    ...backends.map((b) => `  server ${b.name} 127.0.0.1:${b.port} check port ${b.checkPort} inter ${checkIntervalMs} fall ${CHECK_FALL} rise 1`),
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'haproxy.cfg'), `${cfg}\n`);
  const log = fs.openSync(path.join(dir, 'haproxy.log'), 'a');
  const child: ChildProcess = spawn('haproxy', ['-db', '-f', path.join(dir, 'haproxy.cfg')], { stdio: ['ignore', log, log] });
  fs.closeSync(log);
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  await waitFor('haproxy listening', async () => {
    const net = await import('node:net');
    return new Promise<true | undefined>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(undefined));
    });
  });
  return {
    port,
    async serverStates() {
      const csv = await statsCommand(path.join(dir, 'admin.sock'), 'show stat');
      const [header, ...rows] = csv.split('\n').filter((l) => l.length > 0);
      const columns = (header ?? '').replace(/^# /, '').split(',');
      const proxy = columns.indexOf('pxname');
      const server = columns.indexOf('svname');
      const status = columns.indexOf('status');
      const states: Record<string, ServerState> = {};
      for (const row of rows) {
        const fields = row.split(',');
        const name = fields[server] ?? '';
        if (fields[proxy] === 'rollguard' && name !== 'BACKEND') states[name] = fields[status] ?? '';
      }
      return states;
    },
    async stop() {
      child.kill('SIGTERM');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One command on haproxy's stats socket; haproxy answers and closes. */
async function statsCommand(socketPath: string, command: string): Promise<string> {
  const net = await import('node:net');
  return new Promise((resolve, reject) => {
    let out = '';
    const s = net.connect(socketPath, () => s.end(`${command}\n`));
    s.setEncoding('utf8');
    s.on('data', (chunk: string) => (out += chunk));
    s.on('end', () => resolve(out));
    s.on('error', reject);
  });
}
