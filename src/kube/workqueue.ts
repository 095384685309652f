/** Retry delays after a failed item: doubled per consecutive failure, capped (client-go's item backoff, slower start). */
export const RETRY_BASE_MS = 100;
export const RETRY_MAX_MS = 5 * 60_000;

export interface WorkQueueOptions {
  /**
   * A debounced add waits this long, and every further debounced add of the same key in that
   * window folds into it: a burst of changes becomes one item. 0 adds at once.
   */
  debounceMs: number;
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** Told the number of waiting items (ready plus delayed) whenever it changes. */
  onDepthChange?: (depth: number) => void;
}

/**
 * A deduplicating work queue of keys, after client-go's: a key queued twice is one item; a key
 * added while it is being processed is processed again once `done` is called for it. Items can
 * also be added after a delay, debounced, or with per-item exponential backoff.
 *
 * Two lines, handed out in turn of priority: `add` (a change, a retry, a delayed add) goes to
 * the front line; `addUnlessWaiting` (a full pass, a resync: every key at once) to the back
 * one. A change never waits behind a pass over thousands of keys; a key the pass queued that
 * then changes moves to the front line.
 */
export class WorkQueue {
  private ready: string[] = [];
  private head = 0;
  private later: string[] = [];
  private laterHead = 0;
  /** Queued keys whose place is in the back line (`later` may hold stale entries: moved to the front, or handed out). */
  private readonly behind = new Set<string>();
  /** Added to the back line while being processed: `done` queues them there. */
  private readonly behindWhenDone = new Set<string>();
  /** Queued and not yet handed out. */
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly delayed = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly failures = new Map<string, number>();
  private readonly getters: ((key: string | undefined) => void)[] = [];
  private shuttingDown = false;
  private lastDepth = 0;

  constructor(private readonly opts: WorkQueueOptions) {}

  add(key: string): void {
    this.enqueue(key, 'front');
  }

  /**
   * Adds `key` to the back line unless it already waits for a delayed add (a debounce window, a
   * backoff): a periodic pass over every key must not cut those short.
   */
  addUnlessWaiting(key: string): void {
    if (this.delayed.has(key)) return;
    this.enqueue(key, 'back');
  }

  private enqueue(key: string, line: 'front' | 'back'): void {
    if (this.shuttingDown) return;
    this.cancelDelay(key);
    if (this.dirty.has(key)) {
      if (line === 'front') this.behindWhenDone.delete(key);
      if (line === 'front' && this.behind.delete(key)) this.push(key, 'front');
      return;
    }
    this.dirty.add(key);
    // Being processed: `done` puts it back, so one worker never holds it twice.
    if (!this.processing.has(key)) this.push(key, line);
    else if (line === 'back') this.behindWhenDone.add(key);
    this.reportDepth();
  }

  /** Adds `key` once `delayMs` has passed; an earlier pending add of the key wins. */
  addAfter(key: string, delayMs: number): void {
    if (this.shuttingDown) return;
    if (delayMs <= 0) {
      this.add(key);
      return;
    }
    const at = Date.now() + delayMs;
    const pending = this.delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) clearTimeout(pending.timer);
    const timer = setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, delayMs);
    this.delayed.set(key, { at, timer });
    this.reportDepth();
  }

  /**
   * Adds `key` at the end of the debounce window that its first change opened; changes within
   * the window fold into that one item. A key already queued in the front line needs nothing:
   * it will read the newest state when it runs; one in the back line leaves it, for the front
   * line at the end of the window.
   */
  addDebounced(key: string): void {
    if (this.behind.delete(key)) this.dirty.delete(key);
    else if (this.dirty.has(key) && !this.processing.has(key)) return;
    this.addAfter(key, this.opts.debounceMs);
  }

  /** Adds `key` after its backoff, which doubles with each call until `forget`; returns the delay. */
  addRateLimited(key: string): number {
    const failures = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, failures);
    const base = this.opts.retryBaseMs ?? RETRY_BASE_MS;
    const max = this.opts.retryMaxMs ?? RETRY_MAX_MS;
    const delayMs = Math.min(max, base * 2 ** (failures - 1));
    this.addAfter(key, delayMs);
    return delayMs;
  }

  /** Clears the key's failure count, after it succeeded. */
  forget(key: string): void {
    this.failures.delete(key);
  }

  retries(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /** The next key to process, waiting for one; undefined once the queue shuts down. */
  get(): Promise<string | undefined> {
    if (this.shuttingDown) return Promise.resolve(undefined);
    const key = this.shift() ?? this.shiftLater();
    if (key !== undefined) return Promise.resolve(this.handOut(key));
    return new Promise((resolve) => this.getters.push(resolve));
  }

  /** Marks the key processed; if it was added meanwhile it is queued again. */
  done(key: string): void {
    this.processing.delete(key);
    const line = this.behindWhenDone.delete(key) ? 'back' : 'front';
    if (this.dirty.has(key) && !this.shuttingDown) {
      this.push(key, line);
      this.reportDepth();
    }
  }

  /** Hands out nothing more: pending getters get undefined, delayed adds are dropped. */
  shutDown(): void {
    this.shuttingDown = true;
    for (const { timer } of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
    for (const resolve of this.getters.splice(0)) resolve(undefined);
    this.reportDepth();
  }

  isShutDown(): boolean {
    return this.shuttingDown;
  }

  /** Items waiting: ready to hand out, or delayed (debounce, backoff). */
  depth(): number {
    return this.shuttingDown ? 0 : this.ready.length - this.head + this.behind.size + this.delayed.size;
  }

  inFlight(): number {
    return this.processing.size;
  }

  /** How many keys each of its per-key maps holds; for /status (`memory`). */
  memory(): { queued: number; delayed: number; failures: number } {
    return { queued: this.dirty.size, delayed: this.delayed.size, failures: this.failures.size };
  }

  private push(key: string, line: 'front' | 'back'): void {
    const getter = this.getters.shift();
    if (getter) {
      getter(this.handOut(key));
      return;
    }
    if (line === 'front') {
      this.ready.push(key);
      return;
    }
    this.behind.add(key);
    this.later.push(key);
  }

  private shift(): string | undefined {
    if (this.head >= this.ready.length) return undefined;
    const key = this.ready[this.head++];
    // Compact now and then, so the array does not grow without end.
    if (this.head > 1024 && this.head * 2 > this.ready.length) {
      this.ready = this.ready.slice(this.head);
      this.head = 0;
    }
    return key;
  }

  /** The next key of the back line that is still in it. */
  private shiftLater(): string | undefined {
    while (this.laterHead < this.later.length) {
      const key = this.later[this.laterHead++]!;
      if (this.laterHead > 1024 && this.laterHead * 2 > this.later.length) {
        this.later = this.later.slice(this.laterHead);
        this.laterHead = 0;
      }
      if (this.behind.has(key)) return key;
    }
    return undefined;
  }

  private handOut(key: string): string {
    this.behind.delete(key);
    this.dirty.delete(key);
    this.processing.add(key);
    this.reportDepth();
    return key;
  }

  private cancelDelay(key: string): void {
    const pending = this.delayed.get(key);
    if (!pending) return;
    clearTimeout(pending.timer);
    this.delayed.delete(key);
  }

  private reportDepth(): void {
    const depth = this.depth();
    if (depth === this.lastDepth) return;
    this.lastDepth = depth;
    this.opts.onDepthChange?.(depth);
  }
}
