import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A token bucket that paces an action to `ratePerSecond`, allowing bursts of `burst`. Takers
 * reserve their token up front (the balance goes negative), so waiters are served in order and
 * the pace holds however many wait.
 */
export class TokenBucket {
  private tokens: number;
  private updatedAt: number;

  constructor(
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    if (!(ratePerSecond > 0)) throw new Error(`rate must be above 0 per second, got ${ratePerSecond}`);
    if (!(burst >= 1)) throw new Error(`burst must be at least 1, got ${burst}`);
    this.tokens = burst;
    this.updatedAt = now();
  }

  /** Reserves a token; returns how many ms until it may be used (0: now). */
  reserve(): number {
    if (this.ratePerSecond === Infinity) return 0;
    this.refill();
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens / this.ratePerSecond) * 1000);
  }

  /** Gives back a reserved token that was not used. */
  cancel(): void {
    if (this.ratePerSecond === Infinity) return;
    this.refill();
    this.tokens = Math.min(this.burst, this.tokens + 1);
  }

  /** Waits for a token; rejects with the signal's reason, returning the token, when it aborts first. */
  async take(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    const waitMs = this.reserve();
    if (waitMs === 0) return;
    try {
      await sleep(waitMs, undefined, { signal });
    } catch (err) {
      this.cancel();
      throw err;
    }
  }

  private refill(): void {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.updatedAt) / 1000) * this.ratePerSecond);
    this.updatedAt = now;
  }
}
