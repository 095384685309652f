import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { VERSION } from '../version.js';

/**
 * What rollguard needs of a kubeconfig to reach the API server: the server, and the TLS options
 * and credentials of one request, asked for on every request (tokens and exec plugins rotate).
 * client-node's KubeConfig has this shape, and so has rollguard's own loader (cluster-access.ts).
 */
export interface KubeAccess {
  getCurrentCluster(): { readonly server: string; readonly proxyUrl?: string } | null;
  applyToHTTPSOptions(opts: https.RequestOptions): Promise<void>;
}

/**
 * The User-Agent of rollguard's API calls. The API server names the field manager of a write
 * without one by it (the part before the '/'), so every field rollguard writes is owned by
 * `rollguard` in managedFields, apart from any other tool's, and a user's server-side apply that
 * names one of them is told `conflict with "rollguard"`, not with client-node's
 * `kubernetes-client-javascript`, which every other program on client-node shares. Sent by this
 * client, by raw-api.ts's watches and lists, and by client-node's clients (PooledKubeConfig).
 */
export const USER_AGENT = `rollguard/${VERSION}`;

/** Identities kept at once: a client certificate that rotates leaves one old pool behind, not one per rotation. */
const POOLS_KEPT = 2;
/**
 * rollguard's writes and short reads (a patch, an Event, a Lease, a Secret): an answer that has
 * not come, whole, this long after the request is a dead connection (half-open after a NAT or
 * load balancer lost it), and the call fails and is retried by its caller. Watches and lists go
 * through `raw-api.ts`, not here.
 */
export const CALL_TIMEOUT_MS = 30_000;
/**
 * A kept-alive socket idle this long is closed: the next call opens a fresh one rather than
 * trust a connection a NAT or load balancer may have dropped meanwhile.
 */
export const IDLE_SOCKET_MS = 4_000;
/** Longest error body kept; a Status is far smaller, an HTML proxy page is not. */
const ERROR_BODY_LIMIT = 64 * 1024;

/**
 * A non-2xx answer. `code` and `body` (the Status as text) are where client-node's ApiException
 * has them, so api-status.ts reads both alike.
 */
export class KubeApiError extends Error {
  override readonly name = 'KubeApiError';
  constructor(
    readonly method: string,
    readonly path: string,
    readonly code: number,
    readonly body: string,
  ) {
    super(`${method} ${path}: HTTP ${code}${statusMessage(body)}`);
  }
}

function statusMessage(body: string): string {
  try {
    const status = JSON.parse(body) as { reason?: unknown; message?: unknown };
    const reason = typeof status.reason === 'string' && status.reason ? ` ${status.reason}` : '';
    return typeof status.message === 'string' ? `${reason}: ${status.message}` : reason;
  } catch {
    return body.trim() ? `: ${body.trim().slice(0, 200)}` : '';
  }
}

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface CallOptions {
  body?: unknown;
  /** of the body; application/json by default */
  contentType?: string;
  /** ends the call early (leader election bounds its lease calls together) */
  signal?: AbortSignal;
  timeoutMs?: number;
}

export const JSON_PATCH = 'application/json-patch+json';

/**
 * rollguard's own client for the handful of calls the serving process makes (get, create,
 * replace, JSON Patch, delete of a few kinds), over node:https with one keep-alive agent per TLS
 * identity. It stands in for client-node's generated API classes, which load every model of
 * every API group (and undici) when the first is imported: about 50 MB of RSS for a process
 * that makes a dozen kinds of call. Bodies go out as JSON.stringify writes them (a Date as its
 * ISO string) and come back as parsed JSON: a date field is the API server's string.
 */
export class KubeClient {
  private readonly agents = new Map<string, https.Agent>();

  constructor(private readonly access: KubeAccess) {}

  async call<T>(method: HttpMethod, path: string, opts: CallOptions = {}): Promise<T> {
    const cluster = this.access.getCurrentCluster();
    if (!cluster) throw new Error(`${method} ${path}: the kubeconfig has no current cluster`);
    const url = new URL(cluster.server.replace(/\/+$/, '') + path);
    const options: https.RequestOptions = {};
    await this.access.applyToHTTPSOptions(options);
    const given = options.headers;
    const inherited: http.OutgoingHttpHeaders = given !== undefined && !Array.isArray(given) ? (given as http.OutgoingHttpHeaders) : {};
    const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
    const headers: http.OutgoingHttpHeaders = {
      ...inherited,
      Accept: 'application/json',
      'User-Agent': USER_AGENT,
      ...(payload ? { 'Content-Type': opts.contentType ?? 'application/json', 'Content-Length': payload.length } : {}),
    };
    if (options.auth) {
      headers.Authorization = `Basic ${Buffer.from(options.auth).toString('base64')}`;
      delete options.auth;
    }
    const secure = url.protocol !== 'http:';
    // through a proxy, the kubeconfig's own agent (it knows the proxy); else one kept alive per identity
    if (secure && !cluster.proxyUrl) {
      options.agent = kept(this.agents, tlsIdentity(cluster.server, options), () => new https.Agent({ keepAlive: true, timeout: IDLE_SOCKET_MS }), (stale) => stale.destroy());
    }
    const timeoutMs = opts.timeoutMs ?? CALL_TIMEOUT_MS;
    const deadline = AbortSignal.timeout(timeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, deadline]) : deadline;
    const transport = secure ? https : http;
    try {
      const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const request = transport.request(url, { ...options, method, headers, signal }, (res) => {
          res.setEncoding('utf8');
          let body = '';
          res.on('data', (chunk: string) => {
            body += chunk;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          res.on('error', reject);
        });
        request.on('error', reject);
        request.end(payload);
      });
      if (status < 200 || status >= 300) throw new KubeApiError(method, path, status, body.slice(0, ERROR_BODY_LIMIT));
      return (body ? JSON.parse(body) : undefined) as T;
    } catch (err) {
      if (err instanceof KubeApiError) throw err;
      if (deadline.aborted && !opts.signal?.aborted) throw new Error(`${method} ${path}: no answer within ${timeoutMs} ms`, { cause: err });
      throw new Error(`${method} ${path}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }
}

const clients = new WeakMap<KubeAccess, KubeClient>();

/** The one client of `access`: its connections are shared by every part that calls through it. */
export function clientFor(access: KubeAccess): KubeClient {
  let client = clients.get(access);
  if (!client) {
    client = new KubeClient(access);
    clients.set(access, client);
  }
  return client;
}

/**
 * The pool kept for `identity`, made when there is none; the newest POOLS_KEPT stay, the
 * older ones are retired (a rotated client certificate leaves one behind, not one per rotation).
 */
export function kept<T>(pools: Map<string, T>, identity: string, make: () => T | undefined, retire: (stale: T) => void): T | undefined {
  const known = pools.get(identity);
  if (known) return known;
  const pool = make();
  if (pool === undefined) return undefined;
  pools.set(identity, pool);
  for (const [old, stale] of pools) {
    if (pools.size <= POOLS_KEPT) break;
    pools.delete(old);
    retire(stale);
  }
  return pool;
}

/** The TLS identity of a request: server, CA, client certificate and key as read for it. */
export function tlsIdentity(server: string, opts: https.RequestOptions): string {
  const hash = createHash('sha256').update(server).update('\0');
  for (const part of [opts.ca, opts.cert, opts.key, opts.pfx]) {
    for (const piece of Array.isArray(part) ? part : [part]) hash.update(typeof piece === 'string' || Buffer.isBuffer(piece) ? piece : '-');
    hash.update('\0');
  }
  hash.update(`${String(opts.passphrase)}\0${String(opts.rejectUnauthorized)}\0${String(opts.servername)}`);
  return hash.digest('hex');
}

/** A path segment, escaped. */
export const seg = (s: string): string => encodeURIComponent(s);

/**
 * A MicroTime as the API server parses it (RFC 3339 with exactly six fractional digits; a Date's
 * JSON has three, which a Lease's renewTime refuses).
 */
export function microTime(at: Date | number): string {
  return new Date(at).toISOString().replace(/Z$/, '000Z');
}
