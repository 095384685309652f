import { FLAGS, parseDuration, type Config } from '../config.js';

/**
 * Annotation on a workload (outside its pod template, so writing it rolls nothing): the rules
 * that decide when rollguard acts on it, as `flag=value` pairs of rollguard's own flags, e.g.
 * `debounce=5s min-restart-interval=1m max-restarts-per-second=5 rollout-min-step-interval=10s rollout-min-ready=10s`.
 * Every deadline of a workload is one of these rules counted from a time already on the objects
 * (a referenced object's last write, `rollguard.io/last-restart-at`, `rollguard.io/last-step-at`),
 * so with this record a reader with get and list (`rollguard why`) tells what the leader will
 * do and when, from what its memory alone held before. It is never a reason to write: the
 * webhook puts it into a workload's CREATE, and the loop refreshes it in the writes of the
 * workload's annotations it makes anyway (a restart, digest records, the restart reason).
 */
export const TIMING_ANNOTATION = 'rollguard.io/timing';

/** The flags of the record, in the order it is written. */
export const TIMING_FLAGS = ['debounce', 'min-restart-interval', 'max-restarts-per-second', 'rollout-min-step-interval', 'rollout-min-ready'] as const;
export type TimingFlag = (typeof TIMING_FLAGS)[number];

/** Durations in milliseconds; max-restarts-per-second per second. */
export interface Timing {
  debounceMs: number;
  minRestartIntervalMs: number;
  maxRestartsPerSecond: number;
  rolloutMinStepIntervalMs: number;
  rolloutMinReadyMs: number;
}

const FIELD: Record<TimingFlag, keyof Timing> = {
  debounce: 'debounceMs',
  'min-restart-interval': 'minRestartIntervalMs',
  'max-restarts-per-second': 'maxRestartsPerSecond',
  'rollout-min-step-interval': 'rolloutMinStepIntervalMs',
  'rollout-min-ready': 'rolloutMinReadyMs',
};

function isDuration(flag: TimingFlag): boolean {
  return flag !== 'max-restarts-per-second';
}

/** The rules of a running rollguard, from its flags. */
export function timingOf(config: Pick<Config, 'debounce' | 'minRestartInterval' | 'maxRestartsPerSecond' | 'rolloutMinStepInterval' | 'rolloutMinReady'>): Timing {
  return {
    debounceMs: config.debounce,
    minRestartIntervalMs: config.minRestartInterval,
    maxRestartsPerSecond: config.maxRestartsPerSecond,
    rolloutMinStepIntervalMs: config.rolloutMinStepInterval,
    rolloutMinReadyMs: config.rolloutMinReady,
  };
}

/** The rules of a rollguard run with the default of every flag. */
export function defaultTiming(): Timing {
  const entries = TIMING_FLAGS.map((flag) => {
    const raw = FLAGS.find((f) => f.name === flag)?.default ?? '0';
    return [FIELD[flag], isDuration(flag) ? (parseDuration(raw) ?? 0) : Number(raw)] as const;
  });
  return Object.fromEntries(entries) as unknown as Timing;
}

const UNITS: readonly [string, number][] = [
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1_000],
  ['ms', 1],
];

/** Milliseconds in the flags' own syntax: 90000 → "1m30s", 250 → "250ms", 0 → "0s". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms <= 0) return '0s';
  let rest = Math.round(ms);
  let text = '';
  for (const [unit, size] of UNITS) {
    const n = Math.floor(rest / size);
    if (n > 0) text += `${n}${unit}`;
    rest -= n * size;
  }
  return text;
}

/** The annotation's value: every flag, in TIMING_FLAGS order. */
export function formatTiming(timing: Timing): string {
  return TIMING_FLAGS.map((flag) => {
    const value = timing[FIELD[flag]];
    return `${flag}=${isDuration(flag) ? formatDuration(value) : String(value)}`;
  }).join(' ');
}

/**
 * The record read back; undefined when it is absent or names none of the flags. A pair that
 * cannot be read is left out (its rule is then unknown), so that a record of a later rollguard
 * with more rules is read for the ones this one knows.
 */
export function parseTiming(value: string | undefined): Partial<Timing> | undefined {
  if (value === undefined) return undefined;
  const timing: Partial<Timing> = {};
  for (const pair of value.trim().split(/\s+/)) {
    const eq = pair.indexOf('=');
    const flag = pair.slice(0, eq) as TimingFlag;
    if (eq <= 0 || !(TIMING_FLAGS as readonly string[]).includes(flag)) continue;
    const raw = pair.slice(eq + 1);
    const n = isDuration(flag) ? parseDuration(raw) : raw.trim() === '' ? NaN : Number(raw);
    if (n !== undefined && Number.isFinite(n) && n >= 0) timing[FIELD[flag]] = n;
  }
  return Object.keys(timing).length > 0 ? timing : undefined;
}
