export interface SingleFlightOptions {
  /** One pass; a rejection is retried after a delay that doubles from initialRetryMs up to maxRetryMs. */
  run(): Promise<void>;
  /** Told of a failed pass, and how long until the retry. */
  failed(err: unknown, retryInMs: number): void;
  initialRetryMs: number;
  maxRetryMs: number;
  /** A scheduled pass is never further off than this; omitted: as asked. */
  maxDelayMs?: number;
}

/**
 * One pass at a time, for a part that brings something in line with what it last heard (the
 * rotator with the Secret, an injector with its webhook configuration): a trigger during a pass
 * makes one more pass after it, a failed pass is retried with backoff, a good one resets it.
 * Idle until start(signal); nothing runs or is scheduled once the signal fires.
 */
export class SingleFlight {
  private running: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private retryMs: number;
  private signal: AbortSignal | undefined;

  constructor(private readonly opts: SingleFlightOptions) {
    this.retryMs = opts.initialRetryMs;
  }

  start(signal: AbortSignal): void {
    this.signal = signal;
    signal.addEventListener('abort', () => clearTimeout(this.timer), { once: true });
  }

  /** A pass soon: now, or right after the one under way. */
  trigger(): void {
    if (!this.signal || this.signal.aborted) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.running = this.opts
      .run()
      .then(() => {
        this.retryMs = this.opts.initialRetryMs;
      })
      .catch((err: unknown) => {
        this.opts.failed(err, this.retryMs);
        this.schedule(this.retryMs);
        this.retryMs = Math.min(this.retryMs * 2, this.opts.maxRetryMs);
      })
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.trigger();
        }
      });
  }

  /** A pass after `delayMs`, unless a trigger comes first; replaces the one scheduled before. */
  schedule(delayMs: number): void {
    if (!this.signal || this.signal.aborted) return;
    clearTimeout(this.timer);
    const capped = this.opts.maxDelayMs === undefined ? delayMs : Math.min(delayMs, this.opts.maxDelayMs);
    this.timer = setTimeout(() => this.trigger(), Math.max(0, capped));
  }

  /** Resolves once the pass under way, if any, has ended. */
  idle(): Promise<void> {
    return this.running ?? Promise.resolve();
  }
}
