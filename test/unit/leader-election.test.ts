import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LeaderElector } from '../../src/kube/leader-election.js';
import { waitFor, waitUntil } from '../env/wait.js';

const NAMESPACE = 'rollguard-system';
const LEASE = 'rollguard-leader';
const LEASE_PATH = `/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases`;
const LEASE_DURATION_MS = 3_000;
const RENEW_DEADLINE_MS = 1_500;
const RETRY_PERIOD_MS = 100;
/** Renewals observed while checking that leadership stays put; several retry periods. */
const RENEWALS_TO_WATCH = 8;
/** The expiry test renews for longer than a lease lasts, then waits one out. */
const EXPIRY_TEST_TIMEOUT_MS = 30_000;

interface StoredLease {
  metadata: { name: string; namespace: string; resourceVersion: string };
  spec: { holderIdentity?: string; leaseDurationSeconds?: number; renewTime?: string; acquireTime?: string; leaseTransitions?: number };
}

/**
 * The Lease endpoints of an API server, in memory, with its optimistic concurrency: a write must
 * carry the resourceVersion it read. It can be told to fail or to never answer.
 */
class FakeLeaseApi {
  lease: StoredLease | undefined;
  mode: 'ok' | 'fail' | 'hang' = 'ok';
  /** GETs of the lease answered. */
  reads = 0;
  /** Successful writes, in order: which identity the lease named afterwards. */
  readonly writes: string[] = [];
  /** When the last successful write was answered. */
  lastWriteAt = 0;
  private version = 1;
  private readonly server = http.createServer((req, res) => void this.handle(req, res));
  private readonly hung: http.ServerResponse[] = [];

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const res of this.hung) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Another replica writes the lease (renews it, or takes it). */
  writeAs(holderIdentity: string): void {
    const spec = this.lease?.spec ?? {};
    this.store({ ...spec, holderIdentity, leaseDurationSeconds: LEASE_DURATION_MS / 1000, renewTime: new Date().toISOString() });
  }

  private store(spec: StoredLease['spec']): StoredLease {
    this.lease = { metadata: { name: LEASE, namespace: NAMESPACE, resourceVersion: String(++this.version) }, spec };
    this.writes.push(spec.holderIdentity ?? '');
    this.lastWriteAt = Date.now();
    return this.lease;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of req) text += String(chunk);
    if (this.mode === 'hang') {
      this.hung.push(res);
      return;
    }
    if (this.mode === 'fail') return this.status(res, 500, 'InternalError');
    const named = req.url?.startsWith(`${LEASE_PATH}/${LEASE}`) ?? false;
    if (req.method === 'GET' && named) {
      this.reads++;
      return this.lease ? this.send(res, 200, this.lease) : this.status(res, 404, 'NotFound');
    }
    if (req.method === 'POST' && !named) {
      if (this.lease) return this.status(res, 409, 'AlreadyExists');
      return this.send(res, 201, this.store((JSON.parse(text) as StoredLease).spec));
    }
    if (req.method === 'PUT' && named) {
      const body = JSON.parse(text) as StoredLease;
      if (!this.lease) return this.status(res, 404, 'NotFound');
      if (body.metadata.resourceVersion !== this.lease.metadata.resourceVersion) return this.status(res, 409, 'Conflict');
      return this.send(res, 200, this.store(body.spec));
    }
    this.status(res, 405, 'MethodNotAllowed');
  }

  private send(res: http.ServerResponse, code: number, body: unknown): void {
    res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  }

  private status(res: http.ServerResponse, code: number, reason: string): void {
    this.send(res, code, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, code });
  }
}

interface Candidate {
  elector: LeaderElector;
  stop: AbortController;
  /** What the callbacks saw, in order. */
  journal: string[];
  /** The signal of the current (or last) term as leader. */
  term(): AbortSignal | undefined;
}

describe('LeaderElector against a Lease API with optimistic concurrency', () => {
  let api: FakeLeaseApi;
  let kubeConfig: KubeConfig;
  const candidates: Candidate[] = [];

  beforeEach(async () => {
    api = new FakeLeaseApi();
    const server = await api.listen();
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [{ name: 'fake', server, skipTLSVerify: true }],
      users: [{ name: 'test' }],
      contexts: [{ name: 'fake', cluster: 'fake', user: 'test' }],
      currentContext: 'fake',
    });
  });

  afterEach(async () => {
    api.mode = 'ok';
    for (const c of candidates.splice(0)) {
      c.stop.abort();
      await c.elector.stopped();
    }
    await api.close();
  });

  async function candidate(identity: string, leaseDurationMs = LEASE_DURATION_MS): Promise<Candidate> {
    const journal: string[] = [];
    let term: AbortSignal | undefined;
    const elector = new LeaderElector({
      kubeConfig,
      namespace: NAMESPACE,
      leaseName: LEASE,
      identity,
      leaseDurationMs,
      renewDeadlineMs: RENEW_DEADLINE_MS,
      retryPeriodMs: RETRY_PERIOD_MS,
      logger: pino({ level: 'silent' }),
      onStartedLeading: (signal) => {
        term = signal;
        journal.push('started leading');
      },
      onStoppedLeading: async () => {
        journal.push(`stopped leading (lease names ${api.lease?.spec.holderIdentity ?? 'nobody'})`);
      },
    });
    const stop = new AbortController();
    await elector.start(stop.signal);
    const c: Candidate = { elector, stop, journal, term: () => term };
    candidates.push(c);
    return c;
  }

  const leaders = (): string[] => candidates.filter((c) => c.elector.status().leader).map((c) => c.elector.status().identity);

  it('lets exactly one of two candidates lead, and keeps it so while it renews', async () => {
    await candidate('a');
    await candidate('b');
    const leader = await waitFor('one leader', () => (leaders().length === 1 ? leaders()[0] : undefined));
    expect(api.lease?.spec.holderIdentity).toBe(leader);
    const seen = api.writes.length;
    await waitUntil(`${RENEWALS_TO_WATCH} renewals, with one leader throughout`, () => {
      expect(leaders()).toEqual([leader]);
      return api.writes.length >= seen + RENEWALS_TO_WATCH || `${api.writes.length - seen} renewals`;
    });
    expect(new Set(api.writes)).toEqual(new Set([leader]));
    expect(api.lease?.spec.leaseTransitions).toBe(0);
  });

  it('on stop, stops its work, then releases the lease, and the other takes over at once', async () => {
    // a long lease: only the release can explain a quick takeover
    const longLeaseMs = 30_000;
    const a = await candidate('a', longLeaseMs);
    await waitUntil('a leads', () => a.elector.status().leader);
    const b = await candidate('b', longLeaseMs);
    await waitUntil('b has seen the lease', () => b.elector.status().holder === 'a');

    const stoppedAt = Date.now();
    a.stop.abort();
    await a.elector.stopped();
    expect(a.term()?.aborted).toBe(true);
    // the work stopped while the lease still named a, so nobody else could start meanwhile
    expect(a.journal).toEqual(['started leading', 'stopped leading (lease names a)']);
    expect(a.elector.status().leader).toBe(false);
    await waitUntil('b leads', () => b.elector.status().leader);
    expect(Date.now() - stoppedAt).toBeLessThan(longLeaseMs / 3);
    expect(api.writes).toContain('');
    expect(api.lease?.spec.holderIdentity).toBe('b');
    // a handover through a released lease is a change of leader too
    expect(api.lease?.spec.leaseTransitions).toBe(1);
    expect(b.journal).toEqual(['started leading']);
  });

  it('steps down by its renew deadline when the API server fails every request', async () => {
    const a = await candidate('a');
    await waitUntil('a leads', () => a.elector.status().leader);
    api.mode = 'fail';
    await waitUntil('a stepped down', () => a.term()?.aborted === true && !a.elector.status().leader, { timeoutMs: 10_000 });
    // before the lease it last wrote can have run out for anybody else
    expect(Date.now() - api.lastWriteAt).toBeLessThan(LEASE_DURATION_MS);
    expect(a.journal).toEqual(['started leading', 'stopped leading (lease names a)']);
  });

  it('steps down by its renew deadline when a request never gets an answer', async () => {
    const a = await candidate('a');
    await waitUntil('a leads', () => a.elector.status().leader);
    api.mode = 'hang';
    await waitUntil('a stepped down', () => a.term()?.aborted === true && !a.elector.status().leader, { timeoutMs: 10_000 });
    expect(Date.now() - api.lastWriteAt).toBeLessThan(LEASE_DURATION_MS);
  });

  it('does not take a lease that its holder renews, and takes it once the holder stops renewing for the lease duration', async () => {
    api.writeAs('other');
    const a = await candidate('a');
    await waitUntil('a has seen the lease', () => a.elector.status().holder === 'other');
    // renewed after each look of a's, for longer than the lease lasts: a must never take it
    const renewingSince = Date.now();
    let renewedAt = renewingSince;
    while (Date.now() - renewingSince < 1.5 * LEASE_DURATION_MS) {
      api.writeAs('other');
      renewedAt = Date.now();
      const reads = api.reads;
      await waitUntil('a looked at the renewed lease', () => api.reads > reads);
      expect(a.elector.status().leader).toBe(false);
    }
    await waitUntil('a leads', () => a.elector.status().leader, { timeoutMs: 10_000 });
    expect(Date.now() - renewedAt).toBeGreaterThanOrEqual(LEASE_DURATION_MS);
    expect(api.lease?.spec.holderIdentity).toBe('a');
    expect(api.lease?.spec.leaseTransitions).toBe(1);
  }, EXPIRY_TEST_TIMEOUT_MS);

  it('steps down when another replica has taken the lease', async () => {
    const a = await candidate('a');
    await waitUntil('a leads', () => a.elector.status().leader);
    api.writeAs('intruder');
    await waitUntil('a stepped down', () => !a.elector.status().leader);
    expect(a.term()?.aborted).toBe(true);
    expect(a.elector.status().holder).toBe('intruder');
    expect(a.journal).toEqual(['started leading', 'stopped leading (lease names intruder)']);
  });
});
