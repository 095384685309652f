import { createHash } from 'node:crypto';
import type https from 'node:https';
import { KubeConfig } from '@kubernetes/client-node';

type RequestContext = Parameters<KubeConfig['applySecurityAuthentication']>[0];
type Dispatcher = NonNullable<ReturnType<RequestContext['getDispatcher']>>;

/** Identities kept at once: a client certificate that rotates leaves one old pool behind, not one per rotation. */
const POOLS_KEPT = 2;

/**
 * A KubeConfig whose API clients keep their connections. client-node 2.0 builds a new
 * connection pool (an undici Agent) for every call, so every patch, Event and GET paid a TCP
 * connect, a TLS handshake and a new secure context, on rollguard's side and the API
 * server's. Here one pool serves every call made with the same TLS identity (server, CA,
 * client certificate and key, as read for this call); the credentials that rotate (tokens,
 * exec plugins) are still applied per call, as client-node does.
 */
export class PooledKubeConfig extends KubeConfig {
  private readonly pools = new Map<string, Dispatcher>();

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    const opts: https.RequestOptions = {};
    await this.applyToHTTPSOptions(opts);
    const identity = tlsIdentity(this.getCurrentCluster()?.server ?? '', opts);
    const pool = this.pools.get(identity);
    if (!pool) {
      await super.applySecurityAuthentication(context);
      const made = context.getDispatcher();
      if (made) this.keep(identity, made);
      return;
    }
    if (opts.auth) context.setHeaderParam('Authorization', `Basic ${Buffer.from(opts.auth).toString('base64')}`);
    const headers = opts.headers;
    if (headers && !Array.isArray(headers)) {
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) context.setHeaderParam(name, String(value));
    }
    context.setDispatcher(pool);
  }

  private keep(identity: string, pool: Dispatcher): void {
    this.pools.set(identity, pool);
    for (const [old, stale] of this.pools) {
      if (this.pools.size <= POOLS_KEPT) break;
      this.pools.delete(old);
      // calls still running on it finish; it closes after them
      stale.close().catch(() => undefined);
    }
  }
}

function tlsIdentity(server: string, opts: https.RequestOptions): string {
  const hash = createHash('sha256').update(server).update('\0');
  for (const part of [opts.ca, opts.cert, opts.key, opts.pfx]) {
    for (const piece of Array.isArray(part) ? part : [part]) hash.update(typeof piece === 'string' || Buffer.isBuffer(piece) ? piece : '-');
    hash.update('\0');
  }
  hash.update(`${String(opts.passphrase)}\0${String(opts.rejectUnauthorized)}\0${String(opts.servername)}`);
  return hash.digest('hex');
}

/** The kubeconfig at `path`, or the default (in-cluster, $KUBECONFIG, ~/.kube/config). */
export function loadKubeConfig(path: string): KubeConfig {
  const kc = new PooledKubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault();
  return kc;
}
