import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { IDLE_SOCKET_MS, kept, tlsIdentity, type KubeAccess } from './kube-client.js';

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

interface ClusterEntry {
  server: string;
  /** a file (read on each request) or the PEM itself */
  ca?: { file: string } | { data: Buffer };
  insecure: boolean;
  tlsServerName?: string;
}

interface UserEntry {
  cert?: { file: string } | { data: Buffer };
  key?: { file: string } | { data: Buffer };
  token?: string;
  /** read on each request: a projected ServiceAccount token is rotated by the kubelet */
  tokenFile?: string;
  username?: string;
  password?: string;
}

/**
 * rollguard's own reading of a kubeconfig, for the cases a serving replica meets: in-cluster (the
 * pod's ServiceAccount token, re-read on every request, and CA) and a kubeconfig file written
 * as JSON with a client certificate, a token, a token file or basic credentials. client-node's
 * KubeConfig module imports its whole generated API and undici (about 75 MB of RSS together);
 * anything this does not read (YAML, exec plugins, auth providers, proxies, a KUBECONFIG list)
 * is handed to client-node's KubeConfig, loaded then (loadClusterAccess).
 */
export class ClusterAccess implements KubeAccess {
  private readonly agents = new Map<string, https.Agent>();

  constructor(
    private readonly cluster: ClusterEntry,
    private readonly user: UserEntry,
  ) {}

  getCurrentCluster(): { server: string } {
    return { server: this.cluster.server };
  }

  async applyToHTTPSOptions(opts: https.RequestOptions): Promise<void> {
    const { cluster, user } = this;
    if (cluster.ca) opts.ca = await read(cluster.ca);
    if (cluster.insecure) opts.rejectUnauthorized = false;
    if (cluster.tlsServerName) opts.servername = cluster.tlsServerName;
    if (user.cert) opts.cert = await read(user.cert);
    if (user.key) opts.key = await read(user.key);
    const token = user.tokenFile ? (await fs.promises.readFile(user.tokenFile, 'utf8')).trim() : user.token;
    const headers = opts.headers !== undefined && !Array.isArray(opts.headers) ? opts.headers : {};
    if (token) opts.headers = { ...headers, Authorization: `Bearer ${token}` };
    else if (user.username) opts.auth = `${user.username}:${user.password ?? ''}`;
  }

  /** One keep-alive agent per TLS identity, for raw-api.ts's requests with a deadline (as PooledKubeConfig lends). */
  keptAliveAgent(opts: https.RequestOptions): https.Agent | undefined {
    if (!this.cluster.server.startsWith('https:')) return undefined;
    return kept(this.agents, tlsIdentity(this.cluster.server, opts), () => new https.Agent({ keepAlive: true, timeout: IDLE_SOCKET_MS }), (stale) => stale.destroy());
  }
}

async function read(source: { file: string } | { data: Buffer }): Promise<Buffer> {
  return 'data' in source ? source.data : fs.promises.readFile(source.file);
}

/** The in-cluster access of a pod: KUBERNETES_SERVICE_HOST/PORT, the ServiceAccount's CA and token (files). */
export function inClusterAccess(dir = SERVICE_ACCOUNT_DIR, env: NodeJS.ProcessEnv = process.env): ClusterAccess | undefined {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  const tokenFile = path.join(dir, 'token');
  if (!host || !port || !fs.existsSync(tokenFile)) return undefined;
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return new ClusterAccess({ server, ca: { file: path.join(dir, 'ca.crt') }, insecure: false }, { tokenFile });
}

type Json = Record<string, unknown>;
const obj = (v: unknown): Json | undefined => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined);
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/** The keys of a cluster and a user this reads; any other key (exec, auth-provider, proxy-url...) is client-node's to read. */
const CLUSTER_KEYS = new Set(['server', 'certificate-authority', 'certificate-authority-data', 'insecure-skip-tls-verify', 'tls-server-name', 'extensions']);
const USER_KEYS = new Set(['client-certificate', 'client-certificate-data', 'client-key', 'client-key-data', 'token', 'tokenFile', 'username', 'password', 'extensions']);

/**
 * The current context's cluster and user of the kubeconfig `text` (at `file`: relative paths are
 * resolved from its folder), or undefined when it holds anything this does not read.
 */
export function parseKubeconfig(text: string, file: string): ClusterAccess | undefined {
  let config: Json | undefined;
  try {
    config = obj(JSON.parse(text));
  } catch {
    return undefined; // YAML: client-node reads it
  }
  if (!config) return undefined;
  const named = (list: unknown, name: string | undefined, key: string): Json | undefined => {
    if (!name || !Array.isArray(list)) return undefined;
    const entry = list.map(obj).find((e) => e?.name === name);
    return obj(entry?.[key]);
  };
  const context = named(config.contexts, str(config['current-context']), 'context');
  const cluster = named(config.clusters, str(context?.cluster), 'cluster');
  const user = named(config.users, str(context?.user), 'user') ?? {};
  if (!cluster || !str(cluster.server)) return undefined;
  if (Object.keys(cluster).some((k) => !CLUSTER_KEYS.has(k)) || Object.keys(user).some((k) => !USER_KEYS.has(k))) return undefined;
  const dir = path.dirname(file);
  const source = (fileKey: string, dataKey: string, from: Json): { file: string } | { data: Buffer } | undefined => {
    const data = str(from[dataKey]);
    if (data) return { data: Buffer.from(data, 'base64') };
    const at = str(from[fileKey]);
    return at ? { file: path.resolve(dir, at) } : undefined;
  };
  const tokenFile = str(user.tokenFile);
  return new ClusterAccess(
    {
      server: str(cluster.server)!,
      ca: source('certificate-authority', 'certificate-authority-data', cluster),
      insecure: cluster['insecure-skip-tls-verify'] === true,
      tlsServerName: str(cluster['tls-server-name']),
    },
    {
      cert: source('client-certificate', 'client-certificate-data', user),
      key: source('client-key', 'client-key-data', user),
      token: str(user.token),
      tokenFile: tokenFile ? path.resolve(dir, tokenFile) : undefined,
      username: str(user.username),
      password: str(user.password),
    },
  );
}

/**
 * The kubeconfig at `file`, or the default as client-node finds it ($KUBECONFIG, ~/.kube/config,
 * in-cluster): rollguard's own reading when it covers it, else client-node's KubeConfig
 * (PooledKubeConfig), loaded only then.
 */
export async function loadClusterAccess(file: string, env: NodeJS.ProcessEnv = process.env): Promise<KubeAccess> {
  const fallback = async (): Promise<KubeAccess> => (await import('./kubeconfig.js')).loadKubeConfig(file);
  const fromFile = (at: string): ClusterAccess | undefined => parseKubeconfig(fs.readFileSync(at, 'utf8'), at);
  if (file) return fromFile(file) ?? fallback();
  const listed = env.KUBECONFIG;
  if (listed) return listed.includes(path.delimiter) ? fallback() : (fromFile(listed) ?? fallback());
  const home = path.join(os.homedir(), '.kube', 'config');
  if (fs.existsSync(home)) return fromFile(home) ?? fallback();
  return inClusterAccess(SERVICE_ACCOUNT_DIR, env) ?? fallback();
}
