import fs from 'node:fs';
import net from 'node:net';

/** Linux's default range of local ports for outgoing connections, when /proc does not say. */
const DEFAULT_EPHEMERAL_LOW = 32768;
/** The lowest port handed out: above the well-known and most registered service ports. */
const LOWEST_PORT = 10000;
const ATTEMPTS = 50;
/** Ports this process has handed out: never twice. */
const handedOut = new Set<number>();

/** The first port of the range Linux takes outgoing connections' local ports from; its default elsewhere. */
function ephemeralLow(): number {
  try {
    const low = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > LOWEST_PORT + ATTEMPTS) return low;
  } catch {
    // not Linux
  }
  return DEFAULT_EPHEMERAL_LOW;
}

/** A candidate port in [LOWEST_PORT, below), from a random number in [0, 1). */
export function candidatePort(random: number, below: number): number {
  return LOWEST_PORT + Math.floor(random * (below - LOWEST_PORT));
}

/**
 * A loopback port that was free a moment ago, below the ephemeral range: a port from that range
 * (what listening on port 0 hands out) can be taken, between this check and the real listen, as
 * the local port of any outgoing connection (the process's own to the API server, say), and the
 * listen fails with EADDRINUSE.
 */
export async function freePort(): Promise<number> {
  const below = ephemeralLow();
  for (let i = 0; i < ATTEMPTS; i++) {
    const port = candidatePort(Math.random(), below);
    // two picks that were both free a moment ago (a process's two ports, replicas started together) must differ
    if (handedOut.has(port)) continue;
    if (await portIsFree('127.0.0.1', port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free loopback port in ${ATTEMPTS} tries between ${LOWEST_PORT} and ${below}`);
}

/** Whether something could listen on host:port right now (false when another program holds it). */
export function portIsFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen({ host, port, exclusive: true }, () => srv.close(() => resolve(true)));
  });
}
