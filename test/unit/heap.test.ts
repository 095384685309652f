import v8 from 'node:v8';
import { describe, expect, it } from 'vitest';
import { QUIET_BEFORE_TRIM_MS, TRIM_AFTER_RECONCILES, TrimAfterBursts, trimHeap } from '../../src/heap.js';

const newSpaceCommitted = (): number => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')!.space_size;

describe('trimHeap', () => {
  it('gives back the young generation that start-up grew, and says how much RSS that was', () => {
    // what start-up does: many short-lived objects, some surviving a while, the young generation grown
    let kept: unknown[] = [];
    for (let i = 0; i < 300_000; i++) {
      kept.push({ i, s: `x${i}`, a: [i, i] });
      if (kept.length > 50_000) kept = kept.slice(25_000);
    }
    kept = [];
    const grown = newSpaceCommitted();
    const { beforeBytes, afterBytes, pauseMs } = trimHeap();
    expect(newSpaceCommitted()).toBeLessThan(grown);
    expect(newSpaceCommitted()).toBeLessThanOrEqual(2 * 1024 * 1024);
    expect(afterBytes).toBeLessThan(beforeBytes);
    expect(pauseMs).toBeGreaterThan(0);
    expect(kept).toEqual([]);
    expect('gc' in globalThis, 'the gc function is not left in the global scope').toBe(false);
  });
});

describe('TrimAfterBursts', () => {
  it('is due once a burst of reconciles has been quiet long enough, and not again until the next burst', () => {
    const policy = new TrimAfterBursts();
    let now = 0;
    const poll = (reconciled: number, busy: boolean): boolean => policy.due((now += 1_000), reconciled, busy);
    // a small trickle is no burst
    expect(poll(TRIM_AFTER_RECONCILES - 1, false)).toBe(false);
    // the first pass: busy while it runs
    expect(poll(3_000, true)).toBe(false);
    expect(poll(5_000, true)).toBe(false);
    const quietPolls = QUIET_BEFORE_TRIM_MS / 1_000;
    const after: boolean[] = [];
    for (let i = 0; i <= quietPolls; i++) after.push(poll(5_000, false));
    expect(after.filter(Boolean)).toHaveLength(1);
    expect(after.at(-1)).toBe(true);
    // quiet on: nothing more
    for (let i = 0; i < 20; i++) expect(poll(5_000, false)).toBe(false);
    // a storm: work again, and quiet once more
    expect(poll(5_000 + TRIM_AFTER_RECONCILES, true)).toBe(false);
    const storm: boolean[] = [];
    for (let i = 0; i <= quietPolls; i++) storm.push(poll(5_000 + TRIM_AFTER_RECONCILES, false));
    expect(storm.filter(Boolean)).toHaveLength(1);
  });

  it('waits out the quiet again when work comes back before it', () => {
    const policy = new TrimAfterBursts();
    expect(policy.due(0, 1_000, false)).toBe(false);
    expect(policy.due(QUIET_BEFORE_TRIM_MS - 1, 1_000, false)).toBe(false);
    expect(policy.due(QUIET_BEFORE_TRIM_MS, 1_001, true)).toBe(false);
    expect(policy.due(QUIET_BEFORE_TRIM_MS + 1, 1_001, false)).toBe(false);
    expect(policy.due(2 * QUIET_BEFORE_TRIM_MS, 1_001, false)).toBe(false);
    expect(policy.due(2 * QUIET_BEFORE_TRIM_MS + 1, 1_001, false)).toBe(true);
  });
});
