import https from 'node:https';
import { KubeConfig, ServerConfiguration, createConfiguration, setHeaderMiddleware, type ApiConstructor, type ApiType } from '@kubernetes/client-node';
import { Agent } from 'undici';
import { IDLE_SOCKET_MS, USER_AGENT, kept, tlsIdentity } from './kube-client.js';

type RequestContext = Parameters<KubeConfig['applySecurityAuthentication']>[0];

/**
 * rollguard's calls through client-node are short (a patch, an Event, a Lease, a Secret): an
 * answer that has not begun, or a body that stalls, this long is a dead connection (half-open
 * after a NAT or load balancer lost it), and the call fails and is retried by its caller.
 * Watches and lists go through `raw-api.ts`, not here.
 */
const CALL_TIMEOUT_MS = 30_000;

/**
 * A KubeConfig whose API clients keep their connections. client-node 2.0 builds a new
 * connection pool (an undici Agent) for every call, so every patch, Event and GET paid a TCP
 * connect, a TLS handshake and a new secure context, on rollguard's side and the API
 * server's. Here one pool serves every call made with the same TLS identity (server, CA,
 * client certificate and key, as read for this call); the credentials that rotate (tokens,
 * exec plugins) are still applied per call, as client-node does.
 *
 * The pool speaks HTTP/1.1 with keep-alive, not undici's default HTTP/2: pooled over HTTP/2,
 * bench/cluster-scale (100,000 objects) stalled twice in its storm, after 1,014 and 833 of
 * 2,000 sets, four reconciles in flight for minutes and no error logged; over HTTP/1.1 all
 * 2,000 were patched. The cause is not pinned down (one stuck stream or an exhausted
 * flow-control window stalls everything multiplexed behind it; here it would hold one
 * socket). Through a proxy (HTTP or SOCKS) client-node's own per-call dispatcher is used.
 */
export class PooledKubeConfig extends KubeConfig {
  private readonly pools = new Map<string, Agent>();
  private readonly agents = new Map<string, https.Agent>();

  /**
   * For node:https requests with a deadline of their own (raw-api.ts: the data check's GETs, one
   * per changed object, which each paid a TCP and TLS handshake): one keep-alive agent per TLS
   * identity, for `opts` as applyToHTTPSOptions filled them. Undefined through a proxy or over
   * plain http. Lists and watches never use it: they have no deadline to bound a socket that
   * went half-open while it sat in the pool.
   */
  keptAliveAgent(opts: https.RequestOptions): https.Agent | undefined {
    const cluster = this.getCurrentCluster();
    if (cluster?.proxyUrl || !cluster?.server.startsWith('https:')) return undefined;
    return kept(this.agents, tlsIdentity(cluster.server, opts), () => new https.Agent({ keepAlive: true, timeout: IDLE_SOCKET_MS }), (stale) => stale.destroy());
  }

  /** API clients as client-node makes them, but that call themselves rollguard (USER_AGENT). */
  override makeApiClient<T extends ApiType>(apiClientType: ApiConstructor<T>): T {
    const cluster = this.getCurrentCluster();
    if (!cluster) throw new Error('No active cluster!');
    return new apiClientType(
      createConfiguration({ baseServer: new ServerConfiguration(cluster.server, {}), authMethods: { default: this }, middleware: [setHeaderMiddleware('User-Agent', USER_AGENT)] }),
    );
  }

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    const cluster = this.getCurrentCluster();
    if (cluster?.proxyUrl) return super.applySecurityAuthentication(context);
    const opts: https.RequestOptions = {};
    await this.applyToHTTPSOptions(opts);
    if (opts.auth) context.setHeaderParam('Authorization', `Basic ${Buffer.from(opts.auth).toString('base64')}`);
    const headers = opts.headers;
    if (headers && !Array.isArray(headers)) {
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) context.setHeaderParam(name, String(value));
    }
    const made = (): Agent | undefined => {
      const dispatcher = this.createDispatcherOptions(cluster, {
        ca: opts.ca,
        cert: opts.cert,
        key: opts.key,
        pfx: opts.pfx,
        passphrase: opts.passphrase,
        ...(opts.rejectUnauthorized !== undefined ? { rejectUnauthorized: opts.rejectUnauthorized } : {}),
        ...(opts.servername !== undefined ? { servername: opts.servername } : {}),
      });
      // 'none': plain http without TLS settings; fetch's global dispatcher serves it
      if (dispatcher.type !== 'agent') return undefined;
      return new Agent({ connect: dispatcher.connect, allowH2: false, headersTimeout: CALL_TIMEOUT_MS, bodyTimeout: CALL_TIMEOUT_MS });
    };
    // calls still running on a retired pool finish; it closes after them
    const pool = kept(this.pools, tlsIdentity(cluster?.server ?? '', opts), made, (stale) => stale.close().catch(() => undefined));
    if (pool) context.setDispatcher(pool);
  }
}

/** The kubeconfig at `path`, or the default (in-cluster, $KUBECONFIG, ~/.kube/config). */
export function loadKubeConfig(path: string): KubeConfig {
  const kc = new PooledKubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault();
  return kc;
}
