import v8 from 'node:v8';
import { describe, expect, it } from 'vitest';
import { trimHeap } from '../../src/heap.js';

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
