import net from 'node:net';

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
  /** Resets every connection and refuses new ones. */
  cut(): void;
  /** Forwards again: held bytes flow, new connections are accepted. */
  restore(): void;
  /** Connections open now. */
  connections(): number;
  close(): Promise<void>;
}

type Mode = 'open' | 'frozen' | 'cut';

export async function startFaultProxy(target: { host: string; port: number }): Promise<FaultProxy> {
  let mode: Mode = 'open';
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  const server = net.createServer((client) => {
    if (mode === 'cut') {
      client.destroy();
      return;
    }
    const upstream = net.connect(target.port, target.host);
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
    if (mode === 'frozen') {
      client.pause();
      upstream.pause();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('fault proxy: no TCP address');
  const each = (fn: (pair: { client: net.Socket; upstream: net.Socket }) => void): void => {
    for (const pair of [...pairs]) fn(pair);
  };
  return {
    url: `https://127.0.0.1:${address.port}`,
    port: address.port,
    freeze() {
      mode = 'frozen';
      // unpiping stops the flow even of data already buffered in the readable side
      each(({ client, upstream }) => {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      });
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
      each(({ client, upstream }) => {
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
        upstream.resume();
      });
    },
    connections: () => pairs.size,
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
