import http from 'node:http';
import https from 'node:https';
import { CoreV1Api, Watch, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { statusCode } from '../kube/api-status.js';
import { createSignedCertificate, type KeyPairPem } from '../tls/certificates.js';

/**
 * How the next handover call is answered:
 * - 'ok': moves the primary label to the candidate, then answers 200;
 * - 'fail': answers 500 and moves nothing;
 * - '503-move': answers 503 "may still be in progress" (as Patroni does), then moves the label;
 * - '200-no-move': answers 200 and moves nothing;
 * - 'hang': never answers (until stop), moves nothing.
 */
export type HandoverMode = 'ok' | 'fail' | '503-move' | '200-no-move' | 'hang';

export interface HandoverCallRecord {
  /** the pod whose server was called */
  pod: string;
  method: string;
  path: string;
  body: string;
  authorization?: string;
  at: Date;
  answered: number | 'hang';
}

export interface FakeReplicatedAppOptions {
  /** the StatefulSet whose pods it plays */
  setName: string;
  /** every pod's server listens on its own status.podIP at this port */
  port: number;
  /** the label that names the role; `primary` on one pod, `replica` on the others */
  roleLabel?: string;
  /** answer 401 unless the Authorization header is this */
  authorization?: string;
  /** delay between answering 503 and moving the label */
  moveDelayMs?: number;
  /** delay between demoting the primary and promoting the candidate, when no pod holds the role (0) */
  promoteDelayMs?: number;
  /**
   * https instead of http: each pod's server presents a certificate that `ca` issues for the
   * pod's name under the set's headless Service, `<pod>.<serviceName>.<namespace>.svc`.
   */
  tls?: { ca: KeyPairPem; serviceName: string };
}

const JSON_CONTENT = { 'content-type': 'application/json' };
const DEFAULT_MOVE_DELAY_MS = 300;
const WATCH_RETRY_MS = 200;
const POD_KEY_BITS = 2048;
const POD_CERT_VALIDITY_SECONDS = 24 * 3600;

/**
 * A replicated application for tests and the demo: one small HTTP(S) server per pod of a set, on
 * the pod's own loopback address (the fake kubelet's `podIps: 'distinct'`), answering a
 * handover call the way Patroni's `POST /switchover` does and moving the role label through the
 * API. It also records every pod that was deleted while it held the primary label.
 */
export class FakeReplicatedApp {
  readonly calls: HandoverCallRecord[] = [];
  /** pods deleted (or marked for deletion) while labelled primary */
  readonly primaryDeletions: string[] = [];
  /** https: handshakes that failed before any request, e.g. the client did not trust the certificate */
  readonly tlsFailures: { pod: string; error: string }[] = [];
  private readonly core: CoreV1Api;
  private readonly roleLabel: string;
  private readonly pods = new Map<string, V1Pod>();
  private readonly servers = new Map<string, { ip: string; server: http.Server | https.Server }>();
  private readonly hanging = new Set<http.ServerResponse>();
  private modes: HandoverMode[] = [];
  private readonly pathModes = new Map<string, HandoverMode>();
  private mode: HandoverMode = 'ok';
  private watch: AbortController | undefined;
  private stopped = false;
  lastError: unknown;

  constructor(
    private readonly kc: KubeConfig,
    private readonly namespace: string,
    private readonly opts: FakeReplicatedAppOptions,
  ) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.roleLabel = opts.roleLabel ?? 'role';
  }

  /** How calls are answered from now on, after the queued ones. */
  setMode(mode: HandoverMode): void {
    this.mode = mode;
  }

  /** Calls of this path (e.g. a fallback's) are answered by `mode`, whatever the others get. */
  setPathMode(path: string, mode: HandoverMode): void {
    this.pathModes.set(path, mode);
  }

  /** The next calls are answered by these modes in turn, e.g. ['fail', 'fail'] then the mode. */
  queueModes(...modes: HandoverMode[]): void {
    this.modes.push(...modes);
  }

  async start(): Promise<this> {
    await this.listAndWatch();
    return this;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.watch?.abort();
    for (const res of this.hanging) res.destroy();
    await Promise.all([...this.servers.values()].map(({ server }) => close(server)));
    this.servers.clear();
  }

  /** Labels `podName` primary and every other pod of the set replica. */
  async makePrimary(podName: string): Promise<void> {
    for (const pod of this.setPods()) {
      const name = pod.metadata!.name!;
      if (name !== podName) await this.label(name, 'replica');
    }
    await this.label(podName, 'primary');
  }

  /** The pods whose server listens now (with https, once its certificate is issued). */
  listening(): string[] {
    return [...this.servers.entries()].filter(([, { server }]) => server.listening).map(([pod]) => pod).sort();
  }

  /** The pod labelled primary now, as the app last saw it. */
  primary(): string | undefined {
    return this.setPods().find((p) => p.metadata?.labels?.[this.roleLabel] === 'primary')?.metadata?.name;
  }

  private setPods(): V1Pod[] {
    return [...this.pods.values()]
      .filter((p) => p.metadata?.name?.startsWith(`${this.opts.setName}-`) && !p.metadata.deletionTimestamp)
      .sort((a, b) => ordinal(a) - ordinal(b));
  }

  private async listAndWatch(): Promise<void> {
    const list = await this.core.listNamespacedPod({ namespace: this.namespace });
    this.pods.clear();
    for (const pod of list.items) this.seen(pod);
    if (this.stopped) return;
    this.watch = await new Watch(this.kc).watch(
      `/api/v1/namespaces/${this.namespace}/pods`,
      { resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: false },
      (phase, pod: V1Pod) => {
        if (phase === 'DELETED') this.gone(pod);
        else if (phase === 'ADDED' || phase === 'MODIFIED') this.seen(pod);
      },
      (err) => {
        if (err) this.lastError = err;
        if (!this.stopped) setTimeout(() => void this.listAndWatch().catch((e: unknown) => (this.lastError = e)), WATCH_RETRY_MS);
      },
    );
  }

  private seen(pod: V1Pod): void {
    const name = pod.metadata?.name ?? '';
    if (!name.startsWith(`${this.opts.setName}-`)) return;
    if (pod.metadata?.deletionTimestamp) {
      this.gone(pod);
      return;
    }
    this.pods.set(name, pod);
    const ip = pod.status?.podIP;
    const current = this.servers.get(name);
    if (current && current.ip !== ip) {
      void close(current.server);
      this.servers.delete(name);
    }
    if (ip && !this.servers.has(name)) this.serve(name, ip);
  }

  private gone(pod: V1Pod): void {
    const name = pod.metadata?.name ?? '';
    if (!name.startsWith(`${this.opts.setName}-`)) return;
    if (pod.metadata?.labels?.[this.roleLabel] === 'primary' && this.pods.get(name)?.metadata?.uid === pod.metadata?.uid) {
      if (!this.primaryDeletions.includes(`${name} ${pod.metadata?.uid}`)) this.primaryDeletions.push(`${name} ${pod.metadata?.uid}`);
    }
    if (this.pods.get(name)?.metadata?.uid === pod.metadata?.uid) this.pods.delete(name);
    const current = this.servers.get(name);
    if (current) {
      void close(current.server);
      this.servers.delete(name);
    }
  }

  private serve(podName: string, ip: string): void {
    const handle = (req: http.IncomingMessage, res: http.ServerResponse): void => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => void this.answer(podName, req, res, Buffer.concat(chunks).toString('utf8')).catch((err: unknown) => (this.lastError = err)));
    };
    const tls = this.opts.tls;
    const server = tls ? https.createServer({}, handle) : http.createServer(handle);
    server.on('error', (err) => (this.lastError = err));
    if (server instanceof https.Server) {
      server.on('tlsClientError', (err: Error) => this.tlsFailures.push({ pod: podName, error: err.message }));
    }
    this.servers.set(podName, { ip, server });
    if (!tls) {
      server.listen(this.opts.port, ip);
      return;
    }
    // listens once its certificate is issued; a call before that is refused, as by a pod still starting
    const dnsName = `${podName}.${tls.serviceName}.${this.namespace}.svc`;
    createSignedCertificate(tls.ca, { commonName: dnsName, dnsNames: [dnsName], validitySeconds: POD_CERT_VALIDITY_SECONDS, keyBits: POD_KEY_BITS, usage: 'server' })
      .then((pair) => {
        if (this.servers.get(podName)?.server !== server) return;
        (server as https.Server).setSecureContext({ cert: pair.certPem, key: pair.keyPem });
        server.listen(this.opts.port, ip);
      })
      .catch((err: unknown) => (this.lastError = err));
  }

  private async answer(podName: string, req: http.IncomingMessage, res: http.ServerResponse, body: string): Promise<void> {
    const record: HandoverCallRecord = {
      pod: podName,
      method: req.method ?? '',
      path: req.url ?? '',
      body,
      ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
      at: new Date(),
      answered: 0,
    };
    this.calls.push(record);
    if (this.opts.authorization !== undefined && req.headers.authorization !== this.opts.authorization) {
      record.answered = 401;
      res.writeHead(401, JSON_CONTENT).end('{"error":"unauthorized"}');
      return;
    }
    const mode = this.pathModes.get(record.path) ?? this.modes.shift() ?? this.mode;
    const candidate = this.candidate(body);
    switch (mode) {
      case 'ok':
        // recorded before the move: the role's label can reach a watcher before the patch's own answer returns here
        record.answered = candidate ? 200 : 412;
        if (candidate) await this.moveTo(candidate);
        res.writeHead(record.answered, JSON_CONTENT).end(candidate ? `{"switched to":"${candidate}"}` : '{"error":"no good candidates"}');
        return;
      case 'fail':
        record.answered = 500;
        res.writeHead(500, JSON_CONTENT).end('{"error":"switchover failed"}');
        return;
      case '503-move':
        record.answered = 503;
        res.writeHead(503, JSON_CONTENT).end('{"error":"switchover status unknown, may still be in progress"}');
        if (candidate) setTimeout(() => void this.moveTo(candidate).catch((err: unknown) => (this.lastError = err)), this.opts.moveDelayMs ?? DEFAULT_MOVE_DELAY_MS);
        return;
      case '200-no-move':
        record.answered = 200;
        res.writeHead(200, JSON_CONTENT).end('{"ok":true}');
        return;
      case 'hang':
        record.answered = 'hang';
        this.hanging.add(res);
        return;
    }
  }

  /** The candidate the body names when it is a Ready replica, else the lowest Ready replica. */
  private candidate(body: string): string | undefined {
    const ready = this.setPods().filter(
      (p) => p.metadata?.labels?.[this.roleLabel] !== 'primary' && p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
    );
    let named: string | undefined;
    try {
      const parsed: unknown = JSON.parse(body);
      if (typeof parsed === 'object' && parsed !== null) {
        const value = (parsed as Record<string, unknown>).candidate;
        if (typeof value === 'string') named = value;
      }
    } catch {
      // not JSON: the app picks
    }
    return ready.find((p) => p.metadata?.name === named)?.metadata?.name ?? ready[0]?.metadata?.name;
  }

  /** Demotes the primary, then promotes `to`, each a label write as Patroni's leader key moves. */
  private async moveTo(to: string): Promise<void> {
    const from = this.primary();
    if (from && from !== to) {
      await this.label(from, 'replica');
      if (this.opts.promoteDelayMs) await new Promise((resolve) => setTimeout(resolve, this.opts.promoteDelayMs));
    }
    await this.label(to, 'primary');
  }

  private async label(podName: string, role: string): Promise<void> {
    const path = `/metadata/labels/${this.roleLabel.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    try {
      await this.core.patchNamespacedPod({ name: podName, namespace: this.namespace, body: [{ op: 'add', path, value: role }] });
    } catch (err) {
      if (statusCode(err) !== 404) throw err;
    }
  }
}

function ordinal(pod: V1Pod): number {
  return Number(/-(\d+)$/.exec(pod.metadata?.name ?? '')?.[1] ?? Number.MAX_SAFE_INTEGER);
}

async function close(server: http.Server | https.Server): Promise<void> {
  server.closeAllConnections();
  if (!server.listening) return;
  await new Promise((resolve) => server.close(resolve));
}
