import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UNCHECKED, healthAfterCheck, healthText, isUp, type HealthThresholds } from '../env/backend-health.js';
import { propertyRuns } from '../env/property-runs.js';

/**
 * The rule in runs of results, as an L4 balancer's manual states it: a DOWN backend comes UP after
 * `rise` passed checks in a row, an UP one goes DOWN after `fall` failed checks in a row, and a
 * result against the trend starts the count again.
 */
function modelState(results: boolean[], t: HealthThresholds): string {
  let up = false;
  let run = 0;
  for (const passed of results) {
    if (up) {
      run = passed ? 0 : run + 1;
      if (run === t.fall) [up, run] = [false, 0];
    } else {
      run = passed ? run + 1 : 0;
      if (run === t.rise) [up, run] = [true, 0];
    }
  }
  if (run === 0) return up ? 'UP' : 'DOWN';
  return up ? `UP ${t.fall - run}/${t.fall}` : `DOWN ${run}/${t.rise}`;
}

const thresholds = fc.record({ rise: fc.integer({ min: 1, max: 6 }), fall: fc.integer({ min: 1, max: 6 }) });
const results = fc.array(fc.boolean(), { maxLength: 60 });

const checked = (from: number, checks: boolean[], t: HealthThresholds): number => checks.reduce((h, passed) => healthAfterCheck(h, passed, t), from);

describe('backend health (fall/rise)', () => {
  it('follows the run-length rule after every check, and shows its state as UP, DOWN or UP k/fall, DOWN k/rise', () => {
    fc.assert(
      fc.property(thresholds, results, (t, checks) => {
        let health = UNCHECKED;
        for (let i = 0; i < checks.length; i++) {
          health = healthAfterCheck(health, checks[i]!, t);
          const expected = modelState(checks.slice(0, i + 1), t);
          expect(healthText(health, t)).toBe(expected);
          expect(isUp(health, t)).toBe(expected.startsWith('UP'));
          expect(health).toBeGreaterThanOrEqual(0);
          expect(health).toBeLessThanOrEqual(t.rise + t.fall - 1);
        }
      }),
      propertyRuns(1500),
    );
  });

  it('from any state, fall failures in a row take it DOWN and rise passes in a row bring it UP', () => {
    fc.assert(
      fc.property(thresholds, results, (t, history) => {
        const reached = checked(UNCHECKED, history, t);
        expect(healthText(checked(reached, Array<boolean>(t.fall).fill(false), t), t)).toBe('DOWN');
        expect(healthText(checked(reached, Array<boolean>(t.rise).fill(true), t), t)).toBe('UP');
      }),
      propertyRuns(1500),
    );
  });

  it('from fully UP, fewer than fall failures leave it UP; from DOWN, fewer than rise passes leave it DOWN', () => {
    fc.assert(
      fc.property(thresholds, fc.nat(), (t, k) => {
        const up = checked(UNCHECKED, Array<boolean>(t.rise).fill(true), t);
        const down = checked(up, Array<boolean>(t.fall).fill(false), t);
        expect(isUp(checked(up, Array<boolean>(k % t.fall).fill(false), t), t)).toBe(true);
        expect(isUp(checked(down, Array<boolean>(k % t.rise).fill(true), t), t)).toBe(false);
      }),
      propertyRuns(500),
    );
  });

  it('with the balancer’s rise 1, fall 2: unchecked is DOWN, one pass is UP, one lost check is "UP 1/2", two are DOWN', () => {
    const t = { rise: 1, fall: 2 };
    const states = [true, false, true, false, false, true].reduce<{ health: number; seen: string[] }>(
      ({ health, seen }, passed) => {
        const next = healthAfterCheck(health, passed, t);
        return { health: next, seen: [...seen, healthText(next, t)] };
      },
      { health: UNCHECKED, seen: [healthText(UNCHECKED, t)] },
    ).seen;
    expect(states).toEqual(['DOWN', 'UP', 'UP 1/2', 'UP', 'UP 1/2', 'DOWN', 'UP']);
  });
});
