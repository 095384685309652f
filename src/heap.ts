import v8 from 'node:v8';
import vm from 'node:vm';

/**
 * What V8 holds once start-up is over, given back: start-up (loading some 300 modules, the first
 * lists) grows the young generation to its maximum (`--max-semi-space-size=16`: 32 MiB committed)
 * and V8 keeps it while the process is quiet, since it shrinks the young generation only in a
 * collection that runs while little is allocated, or one told to reduce memory, and an idle
 * replica runs almost none. This is V8's "last resort" collection (the one it runs before it
 * gives up on an allocation): full collections until nothing more is freed, the young generation
 * shrunk to its minimum, free pages given back. The young generation grows again under load, up
 * to the same maximum: admission throughput keeps its setting.
 *
 * V8 offers it to script only through its gc extension: `--expose-gc` set now gives it to a new,
 * throwaway context only, not to the process's global scope.
 */
export function trimHeap(): { beforeBytes: number; afterBytes: number; pauseMs: number } {
  const before = process.memoryUsage().rss;
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;
  const started = performance.now();
  gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  return { beforeBytes: before, afterBytes: process.memoryUsage().rss, pauseMs: performance.now() - started };
}

/** Reconciles since the last trim that make a burst worth giving back (a first pass, a storm). */
export const TRIM_AFTER_RECONCILES = 200;
/** How long the reconciles must have stopped before: a trim is a pause of its own (tens of ms at 100,000 cached objects). */
export const QUIET_BEFORE_TRIM_MS = 5_000;

/**
 * When to give back what a burst of reconciles grew: the leader's first pass over thousands of
 * sets, or a storm, grows the young generation to its maximum and leaves the old one full of
 * what it read, and a quiet process keeps both (see trimHeap). Due once the reconciles have
 * stopped for QUIET_BEFORE_TRIM_MS, after at least TRIM_AFTER_RECONCILES since the last trim.
 */
export class TrimAfterBursts {
  private trimmedAt = 0;
  private quietSince: number | undefined;

  /** Told each poll: how many reconciles have finished so far, and whether any waits or runs now; true: trim now. */
  due(now: number, reconciled: number, busy: boolean): boolean {
    if (busy) {
      this.quietSince = undefined;
      return false;
    }
    this.quietSince ??= now;
    if (reconciled - this.trimmedAt < TRIM_AFTER_RECONCILES || now - this.quietSince < QUIET_BEFORE_TRIM_MS) return false;
    this.trimmedAt = reconciled;
    return true;
  }
}
