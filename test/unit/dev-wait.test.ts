import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { waitFor } from '../../src/dev/wait.js';

describe('waitFor', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  // CI of 1b8a04f: the wall clock stepped about 20 s (the VM paused), and two waits of 26 s
  // ended 5.8 s into their tests, as timed out.
  it('is not ended by a step of the wall clock: the deadline is on the monotonic clock', async () => {
    let calls = 0;
    const waiting = waitFor(
      'the third probe',
      () => {
        calls++;
        if (calls === 1) vi.setSystemTime(Date.now() + 60_000);
        return calls >= 3 ? 'done' : undefined;
      },
      { timeoutMs: 1_000, intervalMs: 100 },
    );
    const settled = waiting.then(
      (value) => ({ value }),
      (err: unknown) => ({ err: err instanceof Error ? err.message : String(err) }),
    );
    await vi.advanceTimersByTimeAsync(500);
    expect(await settled).toEqual({ value: 'done' });
  });

  it('times out once the monotonic clock passes the deadline, saying what the probe last saw', async () => {
    const settled = waitFor('never', () => {
      throw new Error('still 3 pods');
    }, { timeoutMs: 1_000, intervalMs: 100 }).catch((err: unknown) => (err instanceof Error ? err.message : String(err)));
    await vi.advanceTimersByTimeAsync(900);
    await vi.advanceTimersByTimeAsync(300);
    expect(await settled).toBe('timed out after 1000 ms waiting for never; last saw: still 3 pods');
  });
});
