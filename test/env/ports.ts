import fs from 'node:fs';
import net from 'node:net';

/** Linux's default range of ports for outgoing connections, when /proc does not say. */
const DEFAULT_EPHEMERAL = { low: 32768, high: 60999 };
/** The lowest port handed out: above the well-known and most registered service ports. */
const LOWEST = 10000;
const ATTEMPTS = 50;

function ephemeralRange(): { low: number; high: number } {
  try {
    const [low, high] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (low !== undefined && high !== undefined && low > LOWEST + 1000 && high >= low) return { low, high };
  } catch {
    // not Linux: fall back to its default
  }
  return DEFAULT_EPHEMERAL;
}

function listenable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A loopback port that was free a moment ago, below the ephemeral range: a port from that range
 * can be taken, between this check and the listen, as the local port of any outgoing connection
 * (the process's own to the API server, say), and the listen fails with EADDRINUSE.
 */
export async function freePort(): Promise<number> {
  const { low } = ephemeralRange();
  for (let i = 0; i < ATTEMPTS; i++) {
    const port = LOWEST + Math.floor(Math.random() * (low - LOWEST));
    if (await listenable(port)) return port;
  }
  throw new Error(`no free loopback port found in ${ATTEMPTS} tries between ${LOWEST} and ${low}`);
}
