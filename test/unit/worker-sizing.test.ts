import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PUSHBACK_RECOVERY_MS, SIZING_HEADROOM, WorkerSizing } from '../../src/kube/worker-sizing.js';
import { propertyRuns } from '../env/property-runs.js';

describe('WorkerSizing', () => {
  it('keeps the floor until a paced reconcile has been timed, and with no pace to keep', () => {
    expect(new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100 }).limit()).toBe(4);
    const unpaced = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: Infinity });
    unpaced.observe(500);
    expect(unpaced.limit()).toBe(4);
  });

  it('covers rate × time of a paced reconcile, with headroom (Little’s law): 100/s at 60 ms is 9 in flight', () => {
    const sizing = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100 });
    sizing.observe(60);
    expect(sizing.limit()).toBe(Math.ceil(100 * 0.06 * SIZING_HEADROOM));
    expect(sizing.limit()).toBe(9);
  });

  it('halves at once when the API server pushes back, and doubles back after each quiet spell', () => {
    let now = 0;
    const sizing = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100, now: () => now });
    sizing.observe(200); // 30 wanted
    expect(sizing.limit()).toBe(30);
    sizing.pushedBack();
    expect(sizing.limit()).toBe(15);
    sizing.pushedBack();
    expect(sizing.limit()).toBe(7);
    now += PUSHBACK_RECOVERY_MS - 1;
    expect(sizing.limit()).toBe(7);
    now += 1;
    expect(sizing.limit()).toBe(14);
    now += PUSHBACK_RECOVERY_MS;
    expect(sizing.limit()).toBe(28);
    now += PUSHBACK_RECOVERY_MS;
    expect(sizing.limit()).toBe(30);
  });

  it('goes below the floor while pushed back, never below one', () => {
    const sizing = new WorkerSizing({ floor: 4, ceiling: 8, ratePerSecond: 5, now: () => 0 });
    for (let i = 0; i < 5; i++) sizing.pushedBack();
    expect(sizing.limit()).toBe(1);
  });

  it('refuses settings that size nothing', () => {
    expect(() => new WorkerSizing({ floor: 0, ceiling: 4, ratePerSecond: 1 })).toThrow(/floor/);
    expect(() => new WorkerSizing({ floor: 4, ceiling: 2, ratePerSecond: 1 })).toThrow(/ceiling/);
    expect(() => new WorkerSizing({ floor: 1, ceiling: 2, ratePerSecond: 0 })).toThrow(/rate/);
  });

  it('stays within [floor, ceiling] without push-back, grows with the time of a reconcile, and ignores nonsense times', () => {
    const time = fc.oneof(fc.double({ min: 0, max: 60_000, noNaN: true }), fc.constantFrom(Number.NaN, -1, Infinity));
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 16 }), fc.integer({ min: 0, max: 48 }), fc.double({ min: 0.01, max: 1_000, noNaN: true }), fc.array(time, { maxLength: 30 }), fc.double({ min: 0, max: 10_000, noNaN: true }), (floor, extra, rate, times, more) => {
        const sizing = new WorkerSizing({ floor, ceiling: floor + extra, ratePerSecond: rate });
        for (const t of times) sizing.observe(t);
        const limit = sizing.limit();
        expect(limit).toBeGreaterThanOrEqual(floor);
        expect(limit).toBeLessThanOrEqual(floor + extra);
        const smoothed = sizing.smoothedServiceMs();
        if (smoothed !== undefined) {
          expect(Number.isFinite(smoothed) && smoothed >= 0).toBe(true);
          expect(limit).toBeGreaterThanOrEqual(Math.min(floor + extra, Math.floor((rate * smoothed) / 1000)));
        }
        // a slower reconcile never means fewer workers
        sizing.observe((smoothed ?? 0) + more);
        expect(sizing.limit()).toBeGreaterThanOrEqual(limit);
      }),
      propertyRuns(2_000),
    );
  });
});
