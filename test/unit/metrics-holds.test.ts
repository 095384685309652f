import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics.js';
import { rolloutHolds, type RolloutSummary } from '../../src/rollout/controller.js';

const base: RolloutSummary = { namespace: 'apps', name: 'web', partition: 1, replicas: 3, updateRevision: 'web-2' };
const handover = { from: 'db-0', to: 'db-1', attempt: 3, fallback: false, startedAt: '2026-01-01T00:00:00.000Z' };

describe('rolloutHolds', () => {
  it.each<[string, RolloutSummary, ReturnType<typeof rolloutHolds>]>([
    ['stepping: no hold', base, []],
    ['a pod not ready', { ...base, blockedBy: { pod: 'web-1', healthCheck: false }, blockedSince: '2026-01-01T00:00:10.000Z' }, [{ reason: 'unhealthy_pod', sinceMs: Date.parse('2026-01-01T00:00:10.000Z') }]],
    ['the health URL failing', { ...base, blockedBy: { pod: 'web-1', healthCheck: true } }, [{ reason: 'health_check' }]],
    ['a handover in flight is no hold', { ...base, handover: { ...handover, paused: false } }, []],
    ['a handover that gave up', { ...base, handover: { ...handover, paused: true, gaveUp: true } }, [{ reason: 'handover_gave_up', sinceMs: Date.parse(handover.startedAt) }]],
    ['a handover paused, and the scale-down it holds', { ...base, handover: { ...handover, paused: true }, wantedReplicas: 1 }, [{ reason: 'handover_paused', sinceMs: Date.parse(handover.startedAt) }, { reason: 'scale_down' }]],
  ])('%s', (_name, summary, holds) => {
    expect(rolloutHolds([summary])).toEqual(holds);
  });
});

describe('rollguard_rollouts_held and rollguard_rollout_held_longest_seconds', () => {
  it('count each reason and report the oldest hold of each, read at the scrape', async () => {
    const metrics = createMetrics();
    const now = Date.now();
    metrics.watchHolds(() => [
      { reason: 'unhealthy_pod', sinceMs: now - 30_000 },
      { reason: 'unhealthy_pod', sinceMs: now - 90_000 },
      { reason: 'scale_down' },
    ]);
    const text = await metrics.registry.metrics();
    expect(text).toContain('rollguard_rollouts_held{reason="unhealthy_pod"} 2');
    expect(text).toContain('rollguard_rollouts_held{reason="scale_down"} 1');
    expect(text).toContain('rollguard_rollouts_held{reason="handover_paused"} 0');
    const longest = Number(/rollguard_rollout_held_longest_seconds\{reason="unhealthy_pod"\} (\S+)/.exec(text)![1]);
    expect(longest).toBeGreaterThanOrEqual(90);
    expect(longest).toBeLessThan(100);
    expect(text).toContain('rollguard_rollout_held_longest_seconds{reason="health_check"} 0');
    expect(text).toContain('rollguard_data_check_failures_total{reason="read"} 0');
  });
});
