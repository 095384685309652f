import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/**
 * A TCP proxy on loopback in front of the API server, for fault tests: a process whose
 * kubeconfig points here can be frozen (every byte held, connections left open: a watch that
 * silently stops delivering, a half-open connection) or cut off (connections reset, new ones
 * refused), and let through again. TLS passes through untouched, so the API server's
 * certificate (for 127.0.0.1) still verifies.
 */
export interface FaultProxy {
  /** https://127.0.0.1:PORT, to put into a kubeconfig in place of the API server's URL. */
  url: string;
  port: number;
  /** Holds every byte in both directions from now on; connections stay open. */
  freeze(): void;
  /**
   * Holds every byte of the connections open now, for good (as after a NAT or load balancer
   * lost them: half-open, silent); connections opened later pass. restore() lets them flow.
   */
  freezeOpenConnections(): void;
  /** Resets every connection and refuses new ones. */
  cut(): void;
  /** Forwards again: held bytes flow, new connections are accepted. */
  restore(): void;
  /** Connections open now. */
  connections(): number;
  /** Connections accepted since the proxy started: each one a TCP connect and a TLS handshake of the client's. */
  accepted(): number;
  close(): Promise<void>;
}

type Mode = 'open' | 'frozen' | 'cut';

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
  /** piped both ways; a frozen pair is unpiped and paused, so restore pipes it exactly once again */
  flowing: boolean;
}

export async function startFaultProxy(target: { host: string; port: number }): Promise<FaultProxy> {
  let mode: Mode = 'open';
  const pairs = new Set<Pair>();
  let accepted = 0;
  const flow = (pair: Pair): void => {
    if (pair.flowing) return;
    pair.flowing = true;
    pair.client.pipe(pair.upstream);
    pair.upstream.pipe(pair.client);
    pair.client.resume();
    pair.upstream.resume();
  };
  // unpiping stops the flow even of data already buffered in the readable side
  const hold = (pair: Pair): void => {
    pair.flowing = false;
    pair.client.unpipe(pair.upstream);
    pair.upstream.unpipe(pair.client);
    pair.client.pause();
    pair.upstream.pause();
  };
  const server = net.createServer((client) => {
    if (mode === 'cut') {
      client.destroy();
      return;
    }
    accepted++;
    const upstream = net.connect(target.port, target.host);
    const pair: Pair = { client, upstream, flowing: false };
    pairs.add(pair);
    const drop = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    if (mode === 'frozen') hold(pair);
    else flow(pair);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('fault proxy: no TCP address');
  const each = (fn: (pair: Pair) => void): void => {
    for (const pair of [...pairs]) fn(pair);
  };
  return {
    url: `https://127.0.0.1:${address.port}`,
    port: address.port,
    freeze() {
      mode = 'frozen';
      each(hold);
    },
    freezeOpenConnections() {
      each(hold);
    },
    cut() {
      mode = 'cut';
      each(({ client, upstream }) => {
        client.resetAndDestroy();
        upstream.destroy();
      });
    },
    restore() {
      mode = 'open';
      each(flow);
    },
    connections: () => pairs.size,
    accepted: () => accepted,
    close: () =>
      new Promise<void>((resolve) => {
        each(({ client, upstream }) => {
          client.destroy();
          upstream.destroy();
        });
        server.close(() => resolve());
      }),
  };
}

/** A copy of `kubeconfigPath` (JSON, as control-plane.ts writes it) whose cluster is reached through `proxy`. */
export function kubeconfigThrough(proxy: FaultProxy, kubeconfigPath: string, into: string): string {
  const config = JSON.parse(fs.readFileSync(kubeconfigPath, 'utf8')) as { clusters: { cluster: { server: string } }[] };
  for (const { cluster } of config.clusters) cluster.server = proxy.url;
  const out = path.join(into, `via-proxy-${proxy.port}.kubeconfig`);
  fs.writeFileSync(out, JSON.stringify(config, null, 2), { mode: 0o600 });
  return out;
}
