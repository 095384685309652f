import { describe, expect, it } from 'vitest';
import { publicRollout } from '../../src/status.js';

describe('publicRollout', () => {
  const base = { namespace: 'shop', name: 'db', partition: 2, replicas: 3, updateRevision: 'db-2', lastStepAt: '2026-12-01T10:00:00.000Z' };
  it('names the blocking pod and never the health URL or its answer', () => {
    const blocked = publicRollout({
      ...base,
      blockedOn: 'Rollout blocked at partition 2: health check http://169.254.169.254/latest/meta-data failed (HTTP 200 body …), pod db-1 not replaced',
      blockedBy: { pod: 'db-1', healthCheck: true },
    });
    expect(blocked).toEqual({ namespace: 'shop', name: 'db', partition: 2, replicas: 3, update_revision: 'db-2', last_step_at: base.lastStepAt, blocked_by: 'health check (pod db-1)' });
    expect(JSON.stringify(blocked)).not.toContain('169.254');
  });
  it('says which pod holds a rollout', () => {
    expect(publicRollout({ ...base, blockedOn: 'Rollout blocked at partition 2: pod db-1 is not ready (CrashLoopBackOff)', blockedBy: { pod: 'db-1', healthCheck: false } }).blocked_by).toBe('pod db-1');
    expect(publicRollout(base).blocked_by).toBeUndefined();
  });
  it('shows the handover in flight: pods, attempt, since when, paused; never what the endpoint answered', () => {
    const handover = { from: 'db-0', to: 'db-2', attempt: 2, fallback: false, startedAt: '2026-12-01T10:00:05.000Z', paused: false };
    expect(publicRollout({ ...base, handover }).handover).toEqual({ from: 'db-0', to: 'db-2', attempt: 2, fallback: false, started_at: '2026-12-01T10:00:05.000Z', paused: false });
    expect(publicRollout(base).handover).toBeUndefined();
  });
});
