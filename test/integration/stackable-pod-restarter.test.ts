import { PolicyV1Api, type CoreV1Event, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EXPIRES_AT_PREFIX } from '../../src/compat/expiry.js';
import { REASON_EVICTION_BLOCKED, REASON_EXPIRED } from '../../src/compat/pod-restarter.js';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const { core, kc } = testCluster();

function pod(name: string, expiresAt: Date, labels?: Record<string, string>): V1Pod {
  return {
    metadata: { name, labels, annotations: { [`${EXPIRES_AT_PREFIX}tls`]: expiresAt.toISOString(), [`${EXPIRES_AT_PREFIX}later`]: new Date(expiresAt.getTime() + 3_600_000).toISOString() } },
    spec: { containers: [{ name: 'app', image: 'registry.example/app:1' }] },
  };
}

// The Pod restarter of --compat stackable against the real API server and its disruption controller.
describe('expires-at Pod restarter (--compat stackable)', () => {
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'pod-restarter', webhook: 'registered', compat: 'stackable', args: ['--log-level=debug'] });
    ns = fixture.ns;
  });
  afterAll(async () => {
    await fixture?.teardown();
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(fixture ? [fixture.rollguard] : []);
  });

  const events = async (name: string, reason: string): Promise<CoreV1Event[]> =>
    (await core.listNamespacedEvent({ namespace: ns })).items.filter((e) => e.involvedObject.name === name && e.reason === reason && e.source?.component === 'rollguard');
  const exists = async (name: string): Promise<boolean> =>
    core.readNamespacedPod({ name, namespace: ns }).then(
      (p) => !p.metadata?.deletionTimestamp,
      () => false,
    );
  async function podRestarterErrors(): Promise<number> {
    const text = await (await fetch(`${fixture.rollguard.adminUrl}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('rollguard_reconcile_errors_total{') && l.includes('controller="pod-restarter"'));
    return Number(line?.split(/\s+/).pop() ?? 0);
  }

  it('evicts a pod at the earliest of its expires-at times, not before, with an Event', async () => {
    const expiresAt = new Date(Date.now() + 6_000);
    await core.createNamespacedPod({ namespace: ns, body: pod('expiring', expiresAt) });
    await waitUntil('the pod is evicted', async () => !(await exists('expiring')) || 'still there', { timeoutMs: 60_000 });
    const goneAt = Date.now();
    expect(goneAt).toBeGreaterThanOrEqual(expiresAt.getTime());
    const expired = await waitFor('the Expired Event', async () => ((await events('expiring', REASON_EXPIRED)).length === 1 ? events('expiring', REASON_EXPIRED) : undefined));
    expect(expired[0]!.message).toContain(expiresAt.toISOString());
    expect(expired[0]!.message).toContain(`${EXPIRES_AT_PREFIX}tls`);
    // evicted within a few seconds of its time (the Event is stamped by rollguard when it evicted)
    const eventAt = new Date(expired[0]!.firstTimestamp ?? expired[0]!.eventTime ?? 0).getTime();
    expect(eventAt).toBeGreaterThanOrEqual(Math.floor(expiresAt.getTime() / 1000) * 1000);
  }, 90_000);

  it('waits on a PodDisruptionBudget that allows no disruption without an error storm, and evicts once it allows', async () => {
    const labels = { app: 'guarded' };
    const policy = kc.makeApiClient(PolicyV1Api);
    await policy.createNamespacedPodDisruptionBudget({ namespace: ns, body: { metadata: { name: 'guarded' }, spec: { minAvailable: 1, selector: { matchLabels: labels } } } });
    await core.createNamespacedPod({ namespace: ns, body: pod('guarded-0', new Date(Date.now() + 1_000), labels) });
    const blocked = await waitFor('the EvictionBlocked Event', async () => {
      const found = await events('guarded-0', REASON_EVICTION_BLOCKED);
      return found.length > 0 ? found : undefined;
    }, { timeoutMs: 60_000 });
    // a retry after the backoff, refused again: still there, told once, no reconcile errors
    await waitUntil('rollguard retried the refused eviction', () => {
      const retries = fixture.rollguard.logLines().filter((l) => String(l.msg ?? '').includes('guarded-0: eviction refused again')).length;
      return retries >= 1 || `retries logged: ${retries}`;
    }, { timeoutMs: 60_000 });
    expect(await exists('guarded-0')).toBe(true);
    expect((await events('guarded-0', REASON_EVICTION_BLOCKED)).reduce((n, e) => n + (e.count ?? 1), 0)).toBe(1);
    expect(blocked[0]!.message).toContain('retrying with backoff');
    expect(await podRestarterErrors()).toBe(0);
    const errorLines = fixture.rollguard.logLines().filter((l) => Number(l.level) >= 50 && String(l.msg ?? '').includes('guarded-0'));
    expect(errorLines).toEqual([]);

    await policy.deleteNamespacedPodDisruptionBudget({ name: 'guarded', namespace: ns });
    await waitUntil('the pod is evicted once the budget is gone', async () => !(await exists('guarded-0')) || 'still there', { timeoutMs: 90_000 });
    await waitFor('the Expired Event', async () => ((await events('guarded-0', REASON_EXPIRED)).length === 1 ? true : undefined));
  }, 180_000);
});
