import { describe, expect, it } from 'vitest';
import { EVICTION_RETRY_MAX_MS, EXPIRES_AT_PREFIX, evictionRetryMs, expiryDecision, expiryOf, parseRfc3339 } from '../../src/compat/expiry.js';

describe('parseRfc3339', () => {
  it.each([
    ['2026-12-01T12:00:00Z', Date.UTC(2026, 11, 1, 12)],
    ['2026-12-01T12:00:00.250Z', Date.UTC(2026, 11, 1, 12, 0, 0, 250)],
    ['2026-12-01T13:00:00+01:00', Date.UTC(2026, 11, 1, 12)],
    ['2026-12-01t12:00:00z', Date.UTC(2026, 11, 1, 12)],
  ])('%s', (value, want) => {
    expect(parseRfc3339(value)).toBe(want);
  });

  it.each([['2026-12-01'], ['2026-12-01 12:00:00Z'], ['2026-12-01T12:00:00'], ['tomorrow'], [''], ['2026-13-01T12:00:00Z'], ['1764590400']])('refuses %j', (value) => {
    expect(parseRfc3339(value)).toBeUndefined();
  });
});

describe('expiryOf', () => {
  it('takes the earliest of the expires-at annotations and tells the unreadable ones', () => {
    const expiry = expiryOf({
      [`${EXPIRES_AT_PREFIX}tls`]: '2026-12-01T12:00:00Z',
      [`${EXPIRES_AT_PREFIX}kerberos`]: '2026-12-01T11:00:00Z',
      [`${EXPIRES_AT_PREFIX}broken`]: 'soon',
      'restarter.stackable.tech/other': '2020-01-01T00:00:00Z',
    });
    expect(expiry).toEqual({ at: Date.UTC(2026, 11, 1, 11), key: `${EXPIRES_AT_PREFIX}kerberos`, invalid: [{ key: `${EXPIRES_AT_PREFIX}broken`, value: 'soon' }] });
  });

  it('has nothing for a pod without them', () => {
    expect(expiryOf(undefined)).toEqual({ invalid: [] });
    expect(expiryOf({ a: 'b' })).toEqual({ invalid: [] });
  });
});

describe('expiryDecision', () => {
  const at = Date.UTC(2026, 11, 1, 12);
  const expiry = { at, key: `${EXPIRES_AT_PREFIX}tls`, invalid: [] };
  it.each([
    { now: at - 1_000, terminating: false, want: { kind: 'wait', ms: 1_000 } },
    { now: at, terminating: false, want: { kind: 'evict', at, key: `${EXPIRES_AT_PREFIX}tls` } },
    { now: at + 60_000, terminating: false, want: { kind: 'evict', at, key: `${EXPIRES_AT_PREFIX}tls` } },
    { now: at + 60_000, terminating: true, want: { kind: 'none' } },
    { now: at - 30 * 24 * 3_600_000, terminating: false, want: { kind: 'wait', ms: 6 * 3_600_000 } },
  ])('now $now, terminating $terminating → $want.kind', ({ now, terminating, want }) => {
    expect(expiryDecision(expiry, now, terminating)).toEqual(want);
  });

  it('does nothing without a time', () => {
    expect(expiryDecision({ invalid: [] }, 0, false)).toEqual({ kind: 'none' });
  });
});

describe('evictionRetryMs', () => {
  it('doubles from 5 s and stops at the cap', () => {
    expect([1, 2, 3, 4].map(evictionRetryMs)).toEqual([5_000, 10_000, 20_000, 40_000]);
    expect(evictionRetryMs(30)).toBe(EVICTION_RETRY_MAX_MS);
  });
});
