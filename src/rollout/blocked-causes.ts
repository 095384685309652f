const MS_PER_SECOND = 1000;

/** What keeps one set's rollout from stepping, since when, and whether its Event was recorded. */
export interface BlockedCause {
  pod: string;
  cause: string;
  message: string;
  /** When this cause was first seen (ms since the epoch). */
  since: number;
  recorded: boolean;
}

export interface BlockedCausesOptions {
  /**
   * A cause is reported only once it has lasted this long: a pod that the StatefulSet
   * controller is replacing is missing, then Pending, then not Ready for a moment at every
   * step, and that is progress, not a block. 0 reports at once.
   */
  reportAfterMs: number;
  /** How soon to look again at a reported block (the health URL may recover without any watch event). */
  recheckMs: number;
  /** Told the seconds that reported blocks lasted, as they pass. */
  onBlockedSeconds(seconds: number): void;
}

/** One step of the bookkeeping: record the RolloutBlocked Event now or not, and when to look again. */
export interface BlockedVerdict {
  record: boolean;
  recheckInMs: number;
}

/**
 * Remembers the cause that blocks each set, so that RolloutBlocked is recorded once per cause
 * (not on every requeue) and the time blocked is counted once. A new cause replaces the old one.
 */
export class BlockedCauses {
  private readonly bySet = new Map<string, BlockedCause & { countedUntil: number }>();

  constructor(private readonly opts: BlockedCausesOptions) {}

  observe(key: string, blocker: { pod: string; cause: string; message: string }, now: number): BlockedVerdict {
    let entry = this.bySet.get(key);
    if (!entry || entry.cause !== blocker.cause) {
      this.clear(key, now);
      entry = { ...blocker, since: now, recorded: false, countedUntil: now };
      this.bySet.set(key, entry);
    }
    entry.message = blocker.message;
    const age = now - entry.since;
    if (!entry.recorded && age < this.opts.reportAfterMs) {
      return { record: false, recheckInMs: this.opts.reportAfterMs - age };
    }
    // the grace counts as blocked time too, once the block turned out to be real
    this.count(entry, now);
    if (entry.recorded) return { record: false, recheckInMs: this.opts.recheckMs };
    entry.recorded = true;
    return { record: true, recheckInMs: this.opts.recheckMs };
  }

  /** The set is no longer blocked (or gone): the next cause is a new one. */
  clear(key: string, now: number): void {
    const entry = this.bySet.get(key);
    if (!entry) return;
    if (entry.recorded) this.count(entry, now);
    this.bySet.delete(key);
  }

  current(key: string): BlockedCause | undefined {
    const entry = this.bySet.get(key);
    if (!entry) return undefined;
    const { countedUntil: _countedUntil, ...cause } = entry;
    return cause;
  }

  private count(entry: { countedUntil: number }, now: number): void {
    const ms = now - entry.countedUntil;
    if (ms > 0) this.opts.onBlockedSeconds(ms / MS_PER_SECOND);
    entry.countedUntil = Math.max(entry.countedUntil, now);
  }
}
