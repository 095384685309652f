import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultTiming, formatDuration, formatTiming, parseTiming, type Timing } from '../../src/restarter/timing.js';
import { parseDuration } from '../../src/config.js';
import { propertyRuns } from '../env/property-runs.js';

describe('the rollguard.io/timing record', () => {
  it('is the flags of rollguard, in their own syntax', () => {
    expect(formatTiming(defaultTiming())).toBe('debounce=5s min-restart-interval=1m max-restarts-per-second=5 rollout-min-step-interval=10s rollout-min-ready=10s');
  });

  it.each([
    [0, '0s'],
    [250, '250ms'],
    [5_000, '5s'],
    [90_000, '1m30s'],
    [3_600_000 + 1_500, '1h1s500ms'],
  ])('formats %d ms as %s, which the flag parser reads back', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
    expect(parseDuration(text)).toBe(ms);
  });

  it.each([
    ['absent', undefined, undefined],
    ['empty', '', undefined],
    ['only unknown flags', 'foo=1 bar=2s', undefined],
    ['one rule', 'debounce=30s', { debounceMs: 30_000 }],
    ['a later rollguard\'s extra rule and an unreadable value are left out', 'debounce=2s future-rule=9 min-restart-interval=soon max-restarts-per-second=0.5', { debounceMs: 2_000, maxRestartsPerSecond: 0.5 }],
    ['a negative or empty number', 'max-restarts-per-second=-1 rollout-min-ready=', undefined],
  ])('reads %s', (_name, value, want) => {
    expect(parseTiming(value)).toEqual(want);
  });

  it('reads back what it writes, for every rule set the flags allow', () => {
    const ms = fc.integer({ min: 0, max: 48 * 3_600_000 });
    fc.assert(
      fc.property(fc.record({ debounceMs: ms, minRestartIntervalMs: ms, maxRestartsPerSecond: fc.double({ min: 0.01, max: 10_000, noNaN: true }), rolloutMinStepIntervalMs: ms, rolloutMinReadyMs: ms }), (timing: Timing) => {
        expect(parseTiming(formatTiming(timing))).toEqual(timing);
      }),
      propertyRuns(3_000),
    );
  });
});
