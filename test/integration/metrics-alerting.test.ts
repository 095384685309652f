import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

// The metrics the alerts of deploy/prometheus are written on, read from rollguard's real /metrics
// while the state they tell of is real: the leader and readiness, a rollout held by a crash loop.

/** `name{labels}` → value, for every sample of a Prometheus text exposition. */
export function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

describe('the metrics the alerts need, from rollguard\'s /metrics', () => {
  const { core, apps } = testCluster();
  let fixture: RollguardFixture;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'alerting', webhook: 'registered', args: ['--debounce=1s', '--min-restart-interval=0s', '--rollout-min-step-interval=0s', '--rollout-min-ready=0s'] });
  });
  afterAll(async () => {
    await fixture?.teardown();
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  async function metrics(): Promise<Map<string, number>> {
    const res = await fetch(`${fixture.rollguard.adminUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
    if (!res.ok) throw new Error(`GET /metrics: HTTP ${res.status}`);
    return samples(await res.text());
  }

  it('a ready leader says so; every hold reason and data check failure has its series from the start, at 0', async () => {
    const m = await waitFor('the leader gauge', async () => {
      const now = await metrics();
      return now.get('rollguard_leader') === 1 ? now : undefined;
    });
    expect(m.get('rollguard_ready')).toBe(1);
    for (const reason of ['unhealthy_pod', 'health_check', 'handover_paused', 'scale_down']) expect(m.get(`rollguard_rollouts_held{reason="${reason}"}`), reason).toBe(0);
    for (const reason of ['unhealthy_pod', 'health_check', 'handover_paused']) expect(m.get(`rollguard_rollout_held_longest_seconds{reason="${reason}"}`), reason).toBe(0);
    expect(m.has('rollguard_rollout_held_longest_seconds{reason="scale_down"}')).toBe(false);
    for (const reason of ['key', 'read']) expect(m.get(`rollguard_data_check_failures_total{reason="${reason}"}`), reason).toBe(0);
    // the serving certificate's notAfter, a time in the future
    expect(m.get('rollguard_certificate_expiry_timestamp_seconds{certificate="serving"}')! * 1000).toBeGreaterThan(Date.now());
  });

  it('a rollout held by a crash-looping pod counts as held for unhealthy_pod, and its longest hold grows; released, both go back to 0', async () => {
    await core.createNamespacedConfigMap({ namespace: fixture.ns, body: { metadata: { name: 'gated-config' }, data: { a: '1' } } });
    const gated = statefulSet('gated', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE } });
    gated.spec!.podManagementPolicy = 'Parallel';
    gated.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'gated-config' } }];
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body: gated });
    const readSet = () => apps.readNamespacedStatefulSet({ name: 'gated', namespace: fixture.ns });
    await waitUntil('gated at rest', async () => {
      const s = await readSet();
      return (s.status?.readyReplicas === 2 && s.spec?.updateStrategy?.rollingUpdate?.partition === 2) || `ready ${s.status?.readyReplicas}`;
    });
    fixture.kubelet.setBehaviour('gated-1', 'crashloop');
    await core.patchNamespacedConfigMap({ name: 'gated-config', namespace: fixture.ns, body: [{ op: 'replace', path: '/data', value: { a: '2' } }] });

    const first = await waitFor('one rollout held for an unhealthy pod', async () => {
      const m = await metrics();
      return m.get('rollguard_rollouts_held{reason="unhealthy_pod"}') === 1 ? m : undefined;
    }, { timeoutMs: 60_000 });
    const longest = first.get('rollguard_rollout_held_longest_seconds{reason="unhealthy_pod"}')!;
    expect(longest).toBeGreaterThanOrEqual(0);
    await waitUntil('the longest hold grows', async () => {
      const now = (await metrics()).get('rollguard_rollout_held_longest_seconds{reason="unhealthy_pod"}')!;
      return now >= longest + 2 || `${now} s`;
    }, { timeoutMs: 20_000 });
    expect(first.get('rollguard_rollouts_held{reason="handover_paused"}')).toBe(0);

    fixture.kubelet.setBehaviour('gated-1', 'ready');
    await waitUntil('the hold released', async () => {
      const m = await metrics();
      const held = m.get('rollguard_rollouts_held{reason="unhealthy_pod"}');
      return (held === 0 && m.get('rollguard_rollout_held_longest_seconds{reason="unhealthy_pod"}') === 0) || `held ${held}`;
    }, { timeoutMs: 60_000 });
  });
});
