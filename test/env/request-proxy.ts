import fs from 'node:fs';
import type http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import path from 'node:path';
import { createCertificateAuthority, createSignedCertificate } from '../../src/tls/certificates.js';

/**
 * An HTTPS proxy on loopback in front of the API server that sees each request (unlike
 * fault-proxy.ts, which passes TLS through untouched): it ends the client's TLS with a
 * certificate of its own CA, forwards each request with its headers (a bearer token passes as
 * it is; client certificates do not) and can hold the requests a rule picks: never forwarded,
 * never answered, as if the process that sent them died before they got anywhere. For a window
 * that is otherwise a matter of microseconds: after one write landed, before the next.
 */
export interface RequestProxy {
  /** https://127.0.0.1:PORT */
  url: string;
  /** Requests answered so far, in the order their answers came back from the API server. */
  answered(): SeenRequest[];
  /** Requests held so far. */
  held(): SeenRequest[];
  /** From now on, holds each request `rule` picks (it sees the requests answered before it). */
  holdWhen(rule: (request: SeenRequest, answered: readonly SeenRequest[]) => boolean): void;
  /** Forwards every request again; held ones are dropped (their connections reset). */
  release(): void;
  close(): Promise<void>;
}

export interface SeenRequest {
  method: string;
  /** the path and query */
  path: string;
  /** the API server's status code, once answered */
  status?: number;
}

export async function startRequestProxy(target: { url: string; caPem: string }): Promise<RequestProxy & { caPem: string }> {
  const ca = await createCertificateAuthority({ commonName: 'request-proxy-ca', validitySeconds: 3600, keyBits: 2048 });
  const serving = await createSignedCertificate(ca, { commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], validitySeconds: 3600, keyBits: 2048, usage: 'server' });
  const upstream = new URL(target.url);
  const agent = new https.Agent({ keepAlive: true, ca: target.caPem });
  const answered: SeenRequest[] = [];
  const held: { seen: SeenRequest; req: http.IncomingMessage }[] = [];
  let rule: ((request: SeenRequest, answered: readonly SeenRequest[]) => boolean) | undefined;
  const sockets = new Set<Duplex>();

  const server = https.createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
    const seen: SeenRequest = { method: req.method ?? 'GET', path: req.url ?? '/' };
    if (rule?.(seen, answered)) {
      held.push({ seen, req });
      return;
    }
    const forwarded = https.request(
      { protocol: 'https:', hostname: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: upstream.host }, agent },
      (answer) => {
        seen.status = answer.statusCode;
        answered.push(seen);
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forwarded.on('error', () => res.destroy());
    // a client gone (killed, or a watch it ended) ends its upstream request too
    res.on('close', () => forwarded.destroy());
    req.pipe(forwarded);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('request proxy: no TCP address');
  return {
    url: `https://127.0.0.1:${address.port}`,
    caPem: ca.certPem,
    answered: () => [...answered],
    held: () => held.map((h) => h.seen),
    holdWhen(r) {
      rule = r;
    },
    release() {
      rule = undefined;
      for (const { req } of held.splice(0)) req.socket.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        agent.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * A copy of a kubeconfig with a token (service-account.ts writes one, JSON) whose cluster is
 * reached through `proxy`, trusting its CA.
 */
export function kubeconfigThroughRequestProxy(proxy: { url: string; caPem: string }, kubeconfigPath: string, into: string): string {
  const config = JSON.parse(fs.readFileSync(kubeconfigPath, 'utf8')) as { clusters: { cluster: Record<string, string> }[] };
  for (const { cluster } of config.clusters) {
    cluster.server = proxy.url;
    cluster['certificate-authority-data'] = Buffer.from(proxy.caPem).toString('base64');
    delete cluster['certificate-authority'];
  }
  const out = path.join(into, `via-request-proxy-${new URL(proxy.url).port}.kubeconfig`);
  fs.writeFileSync(out, JSON.stringify(config, null, 2), { mode: 0o600 });
  return out;
}
