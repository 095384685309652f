/**
 * The Pod restarter that Stackable's secret-operator relies on: a pod annotated
 * `restarter.stackable.tech/expires-at.<tag>: <RFC 3339 time>` (a certificate's end, say) is
 * evicted at the earliest of its times. Pure: what to do with one pod now.
 */

export const EXPIRES_AT_PREFIX = 'restarter.stackable.tech/expires-at.';

/** A 429 from the Eviction API (a PodDisruptionBudget allows no disruption now) is retried after this, doubling. */
export const EVICTION_RETRY_MIN_MS = 5_000;
/** ... up to this: a PDB that stays closed for an hour costs a dozen calls, not thousands. */
export const EVICTION_RETRY_MAX_MS = 5 * 60_000;
/** A far-off time is looked at again after at most this long (timers of weeks are not kept exact). */
const MAX_WAIT_MS = 6 * 3_600_000;

// date "T" time, fraction optional, "Z" or a numeric offset: RFC 3339 section 5.6 (lower-case t/z allowed)
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** Milliseconds since the epoch, or undefined when `value` is not an RFC 3339 date-time. */
export function parseRfc3339(value: string): number | undefined {
  if (!RFC3339.test(value.trim())) return undefined;
  const ms = Date.parse(value.trim().toUpperCase());
  return Number.isNaN(ms) ? undefined : ms;
}

export interface Expiry {
  /** The earliest valid time; undefined when the pod has none. */
  at?: number;
  /** The annotation key of that time. */
  key?: string;
  /** Annotations that are not RFC 3339: told in a Warning, not acted on. */
  invalid: { key: string; value: string }[];
}

export function expiryOf(annotations: Record<string, string> | null | undefined): Expiry {
  const expiry: Expiry = { invalid: [] };
  for (const [key, value] of Object.entries(annotations ?? {})) {
    if (!key.startsWith(EXPIRES_AT_PREFIX) || typeof value !== 'string') continue;
    const at = parseRfc3339(value);
    if (at === undefined) expiry.invalid.push({ key, value });
    else if (expiry.at === undefined || at < expiry.at) Object.assign(expiry, { at, key });
  }
  expiry.invalid.sort((a, b) => (a.key < b.key ? -1 : 1));
  return expiry;
}

export type ExpiryDecision = { kind: 'none' } | { kind: 'evict'; at: number; key: string } | { kind: 'wait'; ms: number };

/** Evict at the time, not before; a pod already terminating is left alone. */
export function expiryDecision(expiry: Expiry, nowMs: number, terminating: boolean): ExpiryDecision {
  if (terminating || expiry.at === undefined) return { kind: 'none' };
  if (nowMs >= expiry.at) return { kind: 'evict', at: expiry.at, key: expiry.key ?? '' };
  return { kind: 'wait', ms: Math.min(expiry.at - nowMs, MAX_WAIT_MS) };
}

/** The wait after the `attempt`-th refused eviction in a row (1, 2, ...). */
export function evictionRetryMs(attempt: number): number {
  return Math.min(EVICTION_RETRY_MAX_MS, EVICTION_RETRY_MIN_MS * 2 ** Math.max(0, attempt - 1));
}
