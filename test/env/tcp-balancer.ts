import http from 'node:http';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { UNCHECKED, healthAfterCheck, healthText, isUp, type HealthThresholds } from './backend-health.js';
import { freePort } from './ports.js';

export interface Backend {
  name: string;
  /** where TLS traffic goes (passed through untouched, as a Service does) */
  port: number;
  /** plain-HTTP port whose GET /readyz decides whether the backend gets new connections, as endpoints do */
  checkPort: number;
}

/** A backend's check state: UP, DOWN, or a transition such as "UP 1/2" (backend-health.ts). */
export type ServerState = string;

export interface Balancer {
  port: number;
  /** What the balancer thinks of each backend now, by name: only an UP one gets new connections. */
  serverStates(): Promise<Record<string, ServerState>>;
  stop(): Promise<void>;
}

/**
 * How long a readiness check may take before it counts as failed: a replica whose event loop is
 * busy for one check interval on a loaded machine is not unready; a kubelet probe waits a second by default.
 */
const CHECK_TIMEOUT_MS = 1_000;
/** Two failed checks in a row take a backend out, so one lost check does not; still well within a drain delay. */
const THRESHOLDS: HealthThresholds = { rise: 1, fall: 2 };
/** A backend that does not accept a connection in this time has failed this attempt. */
const CONNECT_TIMEOUT_MS = 2_000;
/** Attempts after the first to connect to the chosen backend (an L4 balancer's usual default). */
const CONNECT_RETRIES = 3;
/** Pause before another attempt, so a backend that refuses is not hammered. */
const RETRY_PAUSE_MS = Math.min(CONNECT_TIMEOUT_MS, 1_000);
/** A connection with no traffic either way for this long is closed, as by an L4 balancer's idle timeout. */
const IDLE_TIMEOUT_MS = 120_000;

interface Member {
  backend: Backend;
  health: number;
}

/** Whether GET /readyz on the check port answers 2xx or 3xx in time, as an L4 balancer's HTTP check asks. */
function readyzPasses(checkPort: number, stopping: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get(
      // a fresh connection each time, as a health checker opens one
      { host: '127.0.0.1', port: checkPort, path: '/readyz', agent: false, signal: AbortSignal.any([stopping, AbortSignal.timeout(CHECK_TIMEOUT_MS)]) },
      (res) => {
        res.on('error', () => undefined);
        res.resume();
        const status = res.statusCode ?? 0;
        resolve(status >= 200 && status < 400);
      },
    );
    req.on('error', () => resolve(false));
  });
}

/** A connected socket to the backend, or undefined when it refused or did not answer in time. */
function connectTo(port: number): Promise<net.Socket | undefined> {
  return new Promise((resolve) => {
    const upstream = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true, noDelay: true });
    const fail = (): void => {
      clearTimeout(timer);
      upstream.destroy();
      resolve(undefined);
    };
    const timer = setTimeout(fail, CONNECT_TIMEOUT_MS);
    upstream.once('error', fail);
    upstream.once('connect', () => {
      clearTimeout(timer);
      upstream.off('error', fail);
      resolve(upstream);
    });
  });
}

/**
 * A real L4 balancer in front of rollguard replicas: new connections go round robin to the
 * replicas whose /readyz answers, like a Service whose endpoints follow readiness. Connections
 * already open stay where they are when their backend goes DOWN (as with kube-proxy
 * and L4 balancers by default): a draining replica finishes what it has and closes them itself.
 */
export async function startBalancer(backends: Backend[], checkIntervalMs = 100): Promise<Balancer> {
  const names = new Set(backends.map((b) => b.name));
  if (names.size !== backends.length) throw new Error(`balancer: backend names must differ, got ${backends.map((b) => b.name).join(', ')}`);
  const members: Member[] = backends.map((backend) => ({ backend, health: UNCHECKED }));
  const stopping = new AbortController();
  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket): void => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  };

  const checks = members.map(async (member) => {
    while (!stopping.signal.aborted) {
      const passed = await readyzPasses(member.backend.checkPort, stopping.signal);
      if (stopping.signal.aborted) return;
      member.health = healthAfterCheck(member.health, passed, THRESHOLDS);
      await delay(checkIntervalMs, undefined, { signal: stopping.signal }).catch(() => undefined);
    }
  });

  let next = 0;
  const pick = (): Member | undefined => {
    for (let i = 0; i < members.length; i++) {
      const member = members[(next + i) % members.length]!;
      if (isUp(member.health, THRESHOLDS)) {
        next = (next + i + 1) % members.length;
        return member;
      }
    }
    return undefined;
  };

  const splice = (client: net.Socket, upstream: net.Socket): void => {
    track(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
    };
    // a reset or a timeout on either side ends both; a FIN is passed on (pipe ends the other side), so a half-close stays one
    for (const socket of [client, upstream]) {
      socket.on('error', drop).on('close', drop).on('timeout', drop);
      socket.setTimeout(IDLE_TIMEOUT_MS);
    }
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
  };

  const forward = async (client: net.Socket): Promise<void> => {
    const member = pick();
    if (!member) {
      // no backend is ready: refuse at once, as a Service without ready endpoints does
      client.destroy();
      return;
    }
    // retries stay on the chosen backend (no redispatch to another), so a backend that
    // reports ready but refuses connections shows as failed requests rather than being hidden
    for (let attempt = 0; attempt <= CONNECT_RETRIES; attempt++) {
      if (attempt > 0) await delay(RETRY_PAUSE_MS, undefined, { signal: stopping.signal }).catch(() => undefined);
      if (client.destroyed || stopping.signal.aborted) break;
      const upstream = await connectTo(member.backend.port);
      if (upstream && !client.destroyed && !stopping.signal.aborted) {
        splice(client, upstream);
        return;
      }
      upstream?.destroy();
    }
    client.destroy();
  };

  const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, (client) => {
    track(client);
    // until spliced, an error only ends the client; splice() takes over from there
    client.on('error', () => client.destroy());
    void forward(client);
  });
  const port = await freePort();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });

  return {
    port,
    async serverStates() {
      return Object.fromEntries(members.map((m) => [m.backend.name, healthText(m.health, THRESHOLDS)]));
    },
    async stop() {
      stopping.abort();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await Promise.all([closed, ...checks]);
    },
  };
}
