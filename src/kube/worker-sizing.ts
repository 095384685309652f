/** Workers kept beyond rate × time per call, for the spread of that time. */
export const SIZING_HEADROOM = 1.5;
/** The weight of one new observation in the moving average of a paced reconcile's time. */
export const SIZING_SMOOTHING = 0.2;
/** After the API server pushed back (429), the halved cap doubles once per this long without another. */
export const PUSHBACK_RECOVERY_MS = 10_000;

export interface WorkerSizingOptions {
  /** `--workers`: never fewer, but while the API server pushes back. */
  floor: number;
  /** `--max-workers`: never more. */
  ceiling: number;
  /** The pace the workers serve (writes per second); not finite: no pace to keep, the floor. */
  ratePerSecond: number;
  now?: () => number;
}

/**
 * How many reconciles a paced controller keeps in flight. A reconcile that took a turn of the
 * pace spends the rest of its time waiting on the API server, so keeping the pace through a
 * storm takes rate × that time in flight (Little's law), with headroom for its spread: a fixed
 * count falls behind the pace whenever the API server answers slower than it was sized for.
 * When the API server pushes back (429, priority and fairness), the count is halved at once and
 * grows back by doubling after each quiet spell, as TCP's window does.
 */
export class WorkerSizing {
  private serviceMs: number | undefined;
  private cap: number;
  private pushedAt = -Infinity;
  private readonly now: () => number;

  constructor(private readonly opts: WorkerSizingOptions) {
    if (!Number.isInteger(opts.floor) || opts.floor < 1) throw new Error(`worker floor must be a positive integer, got ${opts.floor}`);
    if (!Number.isInteger(opts.ceiling) || opts.ceiling < opts.floor) throw new Error(`worker ceiling must be an integer of at least the floor (${opts.floor}), got ${opts.ceiling}`);
    if (!(opts.ratePerSecond > 0)) throw new Error(`rate must be above 0 per second, got ${opts.ratePerSecond}`);
    this.now = opts.now ?? Date.now;
    this.cap = opts.ceiling;
  }

  /** The time of one reconcile that took a turn of the pace, without its wait for that turn. */
  observe(serviceMs: number): void {
    if (!(serviceMs >= 0) || !Number.isFinite(serviceMs)) return;
    this.serviceMs = this.serviceMs === undefined ? serviceMs : this.serviceMs + SIZING_SMOOTHING * (serviceMs - this.serviceMs);
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

  /** How many reconciles may be in flight now. */
  limit(): number {
    const { floor, ceiling, ratePerSecond } = this.opts;
    const wanted = this.serviceMs === undefined || !Number.isFinite(ratePerSecond) ? floor : Math.ceil((ratePerSecond * this.serviceMs * SIZING_HEADROOM) / 1000);
    const quietSpells = Math.floor((this.now() - this.pushedAt) / PUSHBACK_RECOVERY_MS);
    const cap = quietSpells >= 30 ? ceiling : Math.min(ceiling, this.cap * 2 ** quietSpells);
    return Math.min(Math.max(wanted, floor), cap);
  }
}
