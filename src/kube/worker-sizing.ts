/** Workers kept beyond rate × time per call, for the spread of that time. */
export const SIZING_HEADROOM = 1.5;
/** The weight of one new observation in the moving averages of a paced reconcile's times. */
export const SIZING_SMOOTHING = 0.2;
/** After the API server pushed back (429), the halved cap doubles once per this long without another. */
export const PUSHBACK_RECOVERY_MS = 10_000;
/** The count grows by this factor at most, once per GROWTH_INTERVAL_MS. */
export const GROWTH_STEP = 1.5;
export const GROWTH_INTERVAL_MS = 1_000;

export interface WorkerSizingOptions {
  /** `--workers`: never fewer, but while the API server pushes back. */
  floor: number;
  /** `--max-workers`: never more. */
  ceiling: number;
  /** The pace the workers serve (writes per second); not finite: no pace to keep, the floor. */
  ratePerSecond: number;
  /** ms on a monotonic clock; omitted: performance.now */
  now?: () => number;
}

/**
 * How many reconciles a paced controller keeps in flight. A reconcile that took a turn of the
 * pace spends the rest of its time waiting on the API server, so keeping the pace through a
 * storm takes rate × that time in flight (Little's law), with headroom for its spread: a fixed
 * count falls behind the pace whenever the API server answers slower than it was sized for.
 * The count only grows while the pace has turns to spare: once reconciles wait for their turns,
 * the pace limits the writes, and more workers would only wait in line too (and slow the API
 * server and rollguard, which would size still more). It grows by half at most each second: a
 * stall (of the API server, or of rollguard's own process) slows every reconcile in flight at
 * once, and one slow second says little about the next. It shrinks at once.
 * When the API server pushes back (429, priority and fairness), the count is halved at once and
 * grows back by doubling after each quiet spell, as TCP's window does.
 */
export class WorkerSizing {
  private serviceMs: number | undefined;
  private turnWaitMs = 0;
  private sized: number;
  private grownAt = -Infinity;
  private cap: number;
  private pushedAt = -Infinity;
  private readonly now: () => number;

  constructor(private readonly opts: WorkerSizingOptions) {
    if (!Number.isInteger(opts.floor) || opts.floor < 1) throw new Error(`worker floor must be a positive integer, got ${opts.floor}`);
    if (!Number.isInteger(opts.ceiling) || opts.ceiling < opts.floor) throw new Error(`worker ceiling must be an integer of at least the floor (${opts.floor}), got ${opts.ceiling}`);
    if (!(opts.ratePerSecond > 0)) throw new Error(`rate must be above 0 per second, got ${opts.ratePerSecond}`);
    // monotonic, as the other deadlines: a step of the wall clock neither stalls growth nor skips the push-back's spells
    this.now = opts.now ?? (() => performance.now());
    this.cap = opts.ceiling;
    this.sized = opts.floor;
  }

  /**
   * One reconcile that took a turn of the pace: its time without its wait for that turn, and that
   * wait (omitted: none).
   */
  observe(serviceMs: number, turnWaitMs = 0): void {
    if (!isTime(serviceMs)) return;
    this.serviceMs = smoothed(this.serviceMs, serviceMs);
    this.turnWaitMs = smoothed(this.turnWaitMs, isTime(turnWaitMs) ? turnWaitMs : 0);
    this.resize();
  }

  /** The API server answered 429: fewer in flight, at once. */
  pushedBack(): void {
    this.cap = Math.max(1, Math.floor(this.limit() / 2));
    this.pushedAt = this.now();
  }

  /** The smoothed time of a paced reconcile, ms; undefined before the first. */
  smoothedServiceMs(): number | undefined {
    return this.serviceMs;
  }

  /** The smoothed wait of a paced reconcile for its turn, ms. */
  smoothedTurnWaitMs(): number {
    return this.turnWaitMs;
  }

  /** rate × the smoothed time × headroom, within [floor, ceiling]: the count the pace calls for. */
  wanted(): number {
    const { floor, ceiling, ratePerSecond } = this.opts;
    if (this.serviceMs === undefined || !Number.isFinite(ratePerSecond)) return floor;
    return Math.min(ceiling, Math.max(floor, Math.ceil((ratePerSecond * this.serviceMs * SIZING_HEADROOM) / 1000)));
  }

  /** How many reconciles may be in flight now. */
  limit(): number {
    const quietSpells = Math.floor((this.now() - this.pushedAt) / PUSHBACK_RECOVERY_MS);
    const cap = quietSpells >= 30 ? this.opts.ceiling : Math.min(this.opts.ceiling, this.cap * 2 ** quietSpells);
    return Math.min(this.sized, cap);
  }

  private resize(): void {
    const wanted = this.wanted();
    if (wanted <= this.sized) {
      this.sized = wanted;
      return;
    }
    // a reconcile that waits a whole turn on average: someone is always in line for the pace
    if (this.turnWaitMs >= 1000 / this.opts.ratePerSecond) return;
    const now = this.now();
    if (now - this.grownAt < GROWTH_INTERVAL_MS) return;
    this.sized = Math.min(wanted, Math.ceil(this.sized * GROWTH_STEP));
    this.grownAt = now;
  }
}

const isTime = (ms: number): boolean => ms >= 0 && Number.isFinite(ms);

function smoothed(average: number | undefined, sample: number): number {
  return average === undefined ? sample : average + SIZING_SMOOTHING * (sample - average);
}
