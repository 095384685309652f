import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { GROWTH_INTERVAL_MS, GROWTH_STEP, PUSHBACK_RECOVERY_MS, SIZING_HEADROOM, WorkerSizing } from '../../src/kube/worker-sizing.js';
import { propertyRuns } from '../env/property-runs.js';

describe('WorkerSizing', () => {
  it('keeps the floor until a paced reconcile has been timed, and with no pace to keep', () => {
    expect(new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100 }).limit()).toBe(4);
    const unpaced = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: Infinity });
    unpaced.observe(500);
    expect(unpaced.limit()).toBe(4);
  });

  it('covers rate × time of a paced reconcile, with headroom (Little’s law): 100/s at 60 ms is 9 in flight, reached by half at most each second', () => {
    let now = 0;
    const sizing = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100, now: () => now });
    sizing.observe(60);
    expect(sizing.wanted()).toBe(Math.ceil(100 * 0.06 * SIZING_HEADROOM));
    expect(sizing.wanted()).toBe(9);
    expect(sizing.limit()).toBe(6);
    now += GROWTH_INTERVAL_MS - 1;
    sizing.observe(60);
    expect(sizing.limit()).toBe(6);
    now += 1;
    sizing.observe(60);
    expect(sizing.limit()).toBe(9);
    now += GROWTH_INTERVAL_MS;
    sizing.observe(60);
    expect(sizing.limit()).toBe(9);
  });

  it('shrinks at once when reconciles get faster', () => {
    let now = 0;
    const sizing = new WorkerSizing({ floor: 2, ceiling: 32, ratePerSecond: 100, now: () => now });
    for (let i = 0; i < 10; i++, now += GROWTH_INTERVAL_MS) sizing.observe(100);
    expect(sizing.limit()).toBe(15);
    for (let i = 0; i < 20; i++) sizing.observe(10);
    expect(sizing.limit()).toBe(sizing.wanted());
    expect(sizing.limit()).toBeLessThanOrEqual(3);
  });

  // The cluster-scale storm (2,000 sets at 100/s, 4 workers enough): one second in which every
  // reconcile in flight took 90–140 ms sized 31 and 32 workers at once, while reconciles were
  // waiting 20–30 ms for their turns, and the API server answered twice as slowly with them.
  it('adds no workers for a slow second while reconciles wait for their turns of the pace', () => {
    let now = 0;
    const sizing = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100, now: () => now });
    for (let i = 0; i < 50; i++, now += 10) sizing.observe(15, 25);
    expect(sizing.limit()).toBe(4);
    // 100/s × 200 ms × 1.5 would be 30
    for (let i = 0; i < 100; i++, now += 10) sizing.observe(200, 25);
    expect(sizing.limit()).toBe(4);
  });

  it('grows by half at most each second after a stall, while the pace has turns to spare', () => {
    let now = 0;
    const sizing = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100, now: () => now });
    // 100/s × 1 s × 1.5 would be the ceiling
    for (let i = 0; i < 20; i++, now += 10) sizing.observe(1_000);
    expect(sizing.limit()).toBe(6);
    for (let i = 0; i < 20; i++, now += 10) sizing.observe(15);
    expect(sizing.limit()).toBe(4);
  });

  it('halves at once when the API server pushes back, and doubles back after each quiet spell', () => {
    let now = 0;
    const sizing = new WorkerSizing({ floor: 4, ceiling: 32, ratePerSecond: 100, now: () => now });
    // 30 wanted: 4, 6, 9, 14, 21, 30, a second apart
    for (let i = 0; i < 6; i++, now += GROWTH_INTERVAL_MS) sizing.observe(200);
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

  it('stays within [floor, ceiling] and under what the pace calls for, grows by half at most once a second and never while reconciles queue for turns, and ignores nonsense times', () => {
    const time = fc.oneof(fc.double({ min: 0, max: 60_000, noNaN: true }), fc.constantFrom(Number.NaN, -1, Infinity));
    const step = fc.record({ service: time, wait: time, after: fc.integer({ min: 0, max: 3 * GROWTH_INTERVAL_MS }) });
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 16 }), fc.integer({ min: 0, max: 48 }), fc.double({ min: 0.01, max: 1_000, noNaN: true }), fc.array(step, { maxLength: 40 }), fc.double({ min: 0, max: 10_000, noNaN: true }), (floor, extra, rate, steps, more) => {
        let now = 0;
        const sizing = new WorkerSizing({ floor, ceiling: floor + extra, ratePerSecond: rate, now: () => now });
        let grownAt = -Infinity;
        for (const { service, wait, after } of steps) {
          now += after;
          const [before, smoothedBefore] = [sizing.limit(), sizing.smoothedServiceMs()];
          sizing.observe(service, wait);
          const limit = sizing.limit();
          expect(limit).toBeGreaterThanOrEqual(floor);
          expect(limit).toBeLessThanOrEqual(Math.min(floor + extra, sizing.wanted()));
          if (!(service >= 0 && Number.isFinite(service))) {
            expect([limit, sizing.smoothedServiceMs()]).toEqual([before, smoothedBefore]);
            continue;
          }
          if (limit > before) {
            expect(limit).toBeLessThanOrEqual(Math.ceil(before * GROWTH_STEP));
            expect(now - grownAt).toBeGreaterThanOrEqual(GROWTH_INTERVAL_MS);
            expect(sizing.smoothedTurnWaitMs()).toBeLessThan(1000 / rate);
            grownAt = now;
          }
        }
        // a slower reconcile never means fewer workers
        const limit = sizing.limit();
        sizing.observe((sizing.smoothedServiceMs() ?? 0) + more, 0);
        expect(sizing.limit()).toBeGreaterThanOrEqual(limit);
      }),
      propertyRuns(2_000),
    );
  });

  it('reaches what the pace calls for within a few seconds while no reconcile waits for a turn', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 16 }), fc.integer({ min: 0, max: 48 }), fc.double({ min: 0.01, max: 1_000, noNaN: true }), fc.double({ min: 0, max: 60_000, noNaN: true }), (floor, extra, rate, service) => {
        let now = 0;
        const sizing = new WorkerSizing({ floor, ceiling: floor + extra, ratePerSecond: rate, now: () => now });
        // 1.5^10 > 48: ten steps from any floor to any ceiling
        for (let i = 0; i < 10; i++, now += GROWTH_INTERVAL_MS) sizing.observe(service, 0);
        expect(sizing.limit()).toBe(sizing.wanted());
        expect(sizing.limit()).toBe(Math.min(floor + extra, Math.max(floor, Math.ceil((rate * service * SIZING_HEADROOM) / 1000))));
      }),
      propertyRuns(2_000),
    );
  });
});
