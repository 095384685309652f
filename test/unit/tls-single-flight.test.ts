import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SingleFlight } from '../../src/tls/single-flight.js';

describe('SingleFlight', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  function harness(outcomes: ('ok' | 'fail')[], maxDelayMs?: number) {
    const started: number[] = [];
    const failures: number[] = [];
    const failedAt: number[] = [];
    let release: (() => void) | undefined;
    const flight = new SingleFlight({
      run: () => {
        started.push(Date.now());
        const outcome = outcomes.shift() ?? 'ok';
        return new Promise<void>((resolve, reject) => {
          release = () => (outcome === 'ok' ? resolve() : reject(new Error('pass failed')));
        });
      },
      failed: (_err, retryInMs) => {
        failures.push(retryInMs);
        failedAt.push(Date.now());
      },
      initialRetryMs: 100,
      maxRetryMs: 400,
      ...(maxDelayMs !== undefined ? { maxDelayMs } : {}),
    });
    return { flight, started, failures, failedAt, finish: async () => {
      release?.();
      await vi.advanceTimersByTimeAsync(0);
    } };
  }

  it('runs nothing before start, and one pass at a time: triggers during a pass make one more after it', async () => {
    const h = harness([]);
    h.flight.trigger();
    expect(h.started).toHaveLength(0);
    h.flight.start(new AbortController().signal);
    h.flight.trigger();
    h.flight.trigger();
    h.flight.trigger();
    expect(h.started).toHaveLength(1);
    await h.finish();
    expect(h.started).toHaveLength(2);
    await h.finish();
    expect(h.started).toHaveLength(2);
  });

  it('retries a failed pass after 100, 200, 400, 400 ms, and a good pass resets the delay', async () => {
    const h = harness(['fail', 'fail', 'fail', 'fail', 'ok', 'fail']);
    h.flight.start(new AbortController().signal);
    h.flight.trigger();
    for (let i = 0; i < 5; i++) {
      await h.finish();
      await vi.advanceTimersByTimeAsync(400);
    }
    expect(h.failures).toEqual([100, 200, 400, 400]);
    // each retry starts its delay after the failure it retries
    expect(h.failedAt.map((at, i) => h.started[i + 1]! - at)).toEqual([100, 200, 400, 400]);
    h.flight.trigger();
    await h.finish();
    expect(h.failures.at(-1)).toBe(100);
  });

  it('a scheduled pass is replaced by a later schedule, capped at maxDelayMs, and nothing runs once the signal fired', async () => {
    const h = harness([], 1_000);
    const stop = new AbortController();
    h.flight.start(stop.signal);
    h.flight.schedule(5_000);
    h.flight.schedule(60_000);
    await vi.advanceTimersByTimeAsync(999);
    expect(h.started).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(h.started).toHaveLength(1);
    await h.finish();
    h.flight.schedule(10);
    stop.abort();
    h.flight.trigger();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(h.started).toHaveLength(1);
    await expect(h.flight.idle()).resolves.toBeUndefined();
  });
});
