import { describe, expect, it } from 'vitest';
import { BlockedCauses } from '../../src/rollout/blocked-causes.js';

const REPORT_AFTER_MS = 1_000;
const RECHECK_MS = 300;
const crashLoop = { pod: 'web-0', cause: 'web-0:CrashLoopBackOff', message: 'Rollout blocked at partition 3: pod web-0 is not ready (CrashLoopBackOff)' };
const missing = { pod: 'web-2', cause: 'web-2:missing', message: 'Rollout blocked at partition 2: pod web-2 is missing' };

function tracker(): { causes: BlockedCauses; seconds: number[] } {
  const seconds: number[] = [];
  return { causes: new BlockedCauses({ reportAfterMs: REPORT_AFTER_MS, recheckMs: RECHECK_MS, onBlockedSeconds: (s) => seconds.push(s) }), seconds };
}

describe('BlockedCauses', () => {
  it('reports a cause once it has lasted reportAfterMs, and only once however often it is seen', () => {
    const { causes, seconds } = tracker();
    expect(causes.observe('shop/web', crashLoop, 0)).toEqual({ record: false, recheckInMs: 1_000 });
    expect(causes.observe('shop/web', crashLoop, 400)).toEqual({ record: false, recheckInMs: 600 });
    expect(causes.observe('shop/web', crashLoop, 1_000)).toEqual({ record: true, recheckInMs: RECHECK_MS });
    expect(causes.observe('shop/web', crashLoop, 1_300)).toEqual({ record: false, recheckInMs: RECHECK_MS });
    expect(causes.observe('shop/web', crashLoop, 5_000)).toEqual({ record: false, recheckInMs: RECHECK_MS });
    // the grace counts once the block turned out real, then the time as it passes
    expect(seconds).toEqual([1, 0.3, 3.7]);
    expect(causes.current('shop/web')).toMatchObject({ pod: 'web-0', cause: crashLoop.cause, since: 0, recorded: true });
  });

  it('never reports nor counts a cause that clears within the grace (a pod being replaced)', () => {
    const { causes, seconds } = tracker();
    causes.observe('shop/web', missing, 0);
    causes.clear('shop/web', 800);
    expect(seconds).toEqual([]);
    expect(causes.current('shop/web')).toBeUndefined();
  });

  it('reports again when the cause changes, and again for a cause that comes back after clearing', () => {
    const { causes, seconds } = tracker();
    causes.observe('shop/web', crashLoop, 0);
    expect(causes.observe('shop/web', crashLoop, 1_000).record).toBe(true);
    expect(causes.observe('shop/web', missing, 2_000)).toEqual({ record: false, recheckInMs: 1_000 });
    expect(seconds).toEqual([1, 1]);
    expect(causes.observe('shop/web', missing, 3_000).record).toBe(true);
    causes.clear('shop/web', 3_500);
    causes.observe('shop/web', crashLoop, 4_000);
    expect(causes.observe('shop/web', crashLoop, 5_000).record).toBe(true);
  });

  it('keeps sets apart', () => {
    const { causes } = tracker();
    causes.observe('shop/web', crashLoop, 0);
    causes.observe('shop/db', crashLoop, 900);
    expect(causes.observe('shop/web', crashLoop, 1_000).record).toBe(true);
    expect(causes.observe('shop/db', crashLoop, 1_000).record).toBe(false);
  });

  it('reports at once with no grace', () => {
    const causes = new BlockedCauses({ reportAfterMs: 0, recheckMs: RECHECK_MS, onBlockedSeconds: () => undefined });
    expect(causes.observe('shop/web', crashLoop, 0)).toEqual({ record: true, recheckInMs: RECHECK_MS });
  });
});
