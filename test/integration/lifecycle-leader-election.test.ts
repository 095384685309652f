import { CoordinationV1Api, V1MicroTime } from '@kubernetes/client-node';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { LeaderElector } from '../../src/kube/leader-election.js';

/** Long enough that only a release explains a quick takeover, short enough for the expiry case. */
const LEASE_DURATION_MS = 6_000;
const RENEW_DEADLINE_MS = 4_000;
const RETRY_PERIOD_MS = 200;
/** Renewals watched while checking that leadership stays with one candidate. */
const RENEWALS_TO_WATCH = 5;

interface Candidate {
  identity: string;
  elector: LeaderElector;
  stop: AbortController;
  terms: number;
  /** leading terms running now; never more than one */
  running: number;
}

// Two LeaderElectors in this process on one Lease of the real API server: real resourceVersion
// conflicts, real MicroTime round trips.
describe('LeaderElector on a real Lease', () => {
  const { kc, core } = testCluster();
  const coordination = kc.makeApiClient(CoordinationV1Api);
  const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'silent' });
  let namespace: string;
  const candidates: Candidate[] = [];

  function candidate(identity: string, leaseName: string): Candidate {
    const c: Candidate = { identity, stop: new AbortController(), terms: 0, running: 0, elector: undefined as unknown as LeaderElector };
    c.elector = new LeaderElector({
      kubeConfig: kc,
      namespace,
      leaseName,
      identity,
      leaseDurationMs: LEASE_DURATION_MS,
      renewDeadlineMs: RENEW_DEADLINE_MS,
      retryPeriodMs: RETRY_PERIOD_MS,
      logger,
      onStartedLeading: () => {
        c.terms++;
        c.running++;
      },
      onStoppedLeading: async () => {
        c.running--;
      },
    });
    candidates.push(c);
    return c;
  }

  const lease = (name: string) => coordination.readNamespacedLease({ name, namespace });
  const leading = (): string[] => candidates.filter((c) => c.elector.status().leader).map((c) => c.identity);

  beforeAll(async () => {
    namespace = await createNamespace(core, 'lifecycle-election');
  });
  afterAll(async () => {
    for (const c of candidates) {
      c.stop.abort();
      await c.elector.stopped();
    }
    if (namespace) await core.deleteNamespace({ name: namespace }).catch(() => undefined);
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('lets exactly one of two candidates lead, and hands over at once when it stops', async () => {
    const a = candidate('a', 'handover');
    const b = candidate('b', 'handover');
    await Promise.all([a.elector.start(a.stop.signal), b.elector.start(b.stop.signal)]);
    const first = await waitFor('one leader', () => (leading().length === 1 ? leading()[0] : undefined));
    const [leader, other] = first === 'a' ? [a, b] : [b, a];
    expect((await lease('handover')).spec?.holderIdentity).toBe(leader.identity);

    const renewedFrom = (await lease('handover')).metadata!.resourceVersion!;
    let renewals = 0;
    let lastVersion = renewedFrom;
    await waitUntil(`${RENEWALS_TO_WATCH} renewals by ${leader.identity}, and no other leader meanwhile`, async () => {
      expect(leading()).toEqual([leader.identity]);
      const l = await lease('handover');
      expect(l.spec?.holderIdentity).toBe(leader.identity);
      if (l.metadata!.resourceVersion !== lastVersion) {
        renewals++;
        lastVersion = l.metadata!.resourceVersion!;
      }
      return renewals >= RENEWALS_TO_WATCH || `${renewals} renewals`;
    });
    expect(other.terms).toBe(0);

    const stoppedAt = Date.now();
    leader.stop.abort();
    await leader.elector.stopped();
    expect(leader.running).toBe(0);
    await waitUntil(`${other.identity} to lead`, () => other.elector.status().leader);
    expect(Date.now() - stoppedAt).toBeLessThan(LEASE_DURATION_MS / 3);
    const taken = await lease('handover');
    expect(taken.spec?.holderIdentity).toBe(other.identity);
    expect(taken.spec?.leaseTransitions).toBe(1);
    expect(other.terms).toBe(1);
  });

  it('takes a lease whose holder vanished without releasing it only after the lease duration', async () => {
    // a holder that crashed: it renewed a moment ago and will never again
    await coordination.createNamespacedLease({
      namespace,
      body: {
        metadata: { name: 'orphaned' },
        spec: { holderIdentity: 'crashed', leaseDurationSeconds: LEASE_DURATION_MS / 1000, renewTime: new V1MicroTime(Date.now()), acquireTime: new V1MicroTime(Date.now()), leaseTransitions: 0 },
      },
    });
    const createdAt = Date.now();
    const c = candidate('c', 'orphaned');
    await c.elector.start(c.stop.signal);
    await waitUntil('c leads', () => c.elector.status().leader, { timeoutMs: LEASE_DURATION_MS * 3 });
    expect(Date.now() - createdAt).toBeGreaterThanOrEqual(LEASE_DURATION_MS);
    const taken = await lease('orphaned');
    expect(taken.spec?.holderIdentity).toBe('c');
    expect(taken.spec?.leaseTransitions).toBe(1);
  });
});
