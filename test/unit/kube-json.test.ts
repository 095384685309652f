import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { nestedDeeperThan } from '../../src/kube/json.js';
import { propertyRuns } from '../env/property-runs.js';

/** The definition, plainly: the deepest chain of objects and arrays, the outermost at depth 1. */
function depth(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + Math.max(0, ...children.map(depth));
}

describe('nestedDeeperThan', () => {
  it('counts objects and arrays, not scalars', () => {
    expect(nestedDeeperThan('text', 0)).toBe(false);
    expect(nestedDeeperThan({}, 0)).toBe(true);
    expect(nestedDeeperThan({}, 1)).toBe(false);
    expect(nestedDeeperThan({ a: [{ b: 1 }] }, 2)).toBe(true);
    expect(nestedDeeperThan({ a: [{ b: 1 }] }, 3)).toBe(false);
    expect(nestedDeeperThan(JSON.parse('{"__proto__": {"x": {}}}'), 2)).toBe(true);
  });

  it('stops at the bound: a chain far deeper than it costs no deeper calls', () => {
    let chain: unknown = {};
    for (let i = 0; i < 100_000; i++) chain = [chain];
    expect(nestedDeeperThan(chain, 100)).toBe(true);
  });

  it('agrees with the depth of any JSON value (fast-check)', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), fc.integer({ min: 0, max: 8 }), (value, max) => {
        expect(nestedDeeperThan(value, max)).toBe(depth(value) > max);
      }),
      propertyRuns(3_000),
    );
  });
});
