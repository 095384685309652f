import type { Logger } from 'pino';
import type { Counter, Gauge, Histogram } from 'prom-client';
import type { Runnable } from '../manager.js';
import { ConflictError, statusCode } from './api-status.js';
import { WorkerSizing } from './worker-sizing.js';
import { WorkQueue } from './workqueue.js';

/** The controllers rollguard runs; a closed set, since it labels metrics. */
export type ControllerName = 'restarter' | 'rollout' | 'pod-restarter';

/** The metrics the controller machine moves, each labelled by controller (src/metrics.ts registers them). */
export interface ControllerMetrics {
  reconcileDuration: Histogram<'controller'>;
  reconcileErrors: Counter<'controller'>;
  queueDepth: Gauge<'controller'>;
  workers: Gauge<'controller'>;
}

export interface ReconcileResult {
  /** Look again after this long: no error, only not yet. */
  requeueAfterMs?: number;
  /** Set by a reconcile that took a turn of the controller's pace: how long it waited for it. */
  pacedMs?: number;
}

export interface Reconciler {
  /** Brings the object of `key` to what it should be. A ConflictError retries quietly; any other error backs off. */
  reconcile(key: string, signal: AbortSignal): Promise<ReconcileResult>;
}

/** A key an event wakes: at once, or at the end of the key's debounce window. */
export interface Wake {
  key: string;
  debounce?: boolean;
}

export interface Syncable {
  /** Resolves true once synced, false if `signal` aborts first. */
  whenSynced(signal: AbortSignal): Promise<boolean>;
}

/** One term of a controller: from a start (leadership won) to the abort of its signal (lost or stopping). */
export interface Term {
  readonly signal: AbortSignal;
  enqueue(wake: Wake): void;
}

/** What a term runs besides the workers. */
export interface TermParts {
  reconciler: Reconciler;
  /** Caches that live as long as the term: started with it, stopped with it. */
  runnables?: Runnable[];
  /** Waited for, with the controller's own, before the first full pass. */
  syncs?: Syncable[];
  /** Called once everything has synced, before every key is queued. */
  onSynced?(): void;
  /** Resolves once the term's own side work (checks in flight) has ended. */
  settled?(): Promise<void>;
}

export interface ControllerOptions {
  name: ControllerName;
  /** Reconciles in flight; with `pace`, the fewest. */
  workers: number;
  /**
   * The pace the reconciles' writes keep (they take turns of it themselves, and say so with
   * `pacedMs`): the workers are sized to keep it, from `workers` up to `maxWorkers`
   * (WorkerSizing). Omitted: always `workers`.
   */
  pace?: { ratePerSecond: number; maxWorkers: number };
  /** Window of a debounced wake; 0 wakes at once. */
  debounceMs: number;
  /** Every key is queued again this often, a guard against a missed event; 0: never. */
  resyncPeriodMs: number;
  /** Every key the controller owns now: queued when a term starts and at every resync. */
  keys(): string[];
  /** The long-lived caches the keys and the reconciler read. */
  syncs: Syncable[];
  /** Builds a term's reconciler and term-lived parts. */
  term(term: Term): TermParts;
  /** How a key reads in logs, e.g. "StatefulSet ns/name". */
  describe?(key: string): string;
  /** What the keys stand for, in the log line of the first pass: "StatefulSet" gives "reconciling every StatefulSet". */
  objects: string;
  logger: Logger;
  metrics: ControllerMetrics;
}

export interface ControllerStatus {
  /** Keys waiting: ready, debounced or backing off. */
  queued: number;
  inFlight: number;
  /** Worker loops running now (sized to the pace, when the controller has one). */
  workers: number;
}

interface RunningTerm extends Term {
  queue: WorkQueue;
  /** False until every cache synced and every key was queued once: events before that are covered by the full pass. */
  accepting: boolean;
  inFlight: number;
  /** Worker loops running; each ends when there are more than the sizing allows. */
  workers: number;
  done: Promise<void>;
}

function isAbortError(err: unknown): boolean {
  return err instanceof Error && err.name === 'AbortError';
}

/**
 * The one controller machine: sources wake keys, a deduplicating, debounced, rate-limited work
 * queue holds them, N workers call the reconciler. It runs in terms (leadership): each start
 * begins with a full pass over every key, so whatever changed while no term ran is caught.
 */
export class Controller implements Runnable {
  readonly name: string;
  private current: RunningTerm | undefined;
  private readonly log: Logger;
  private readonly sizing: WorkerSizing | undefined;
  /** Reconciles finished, over every term. */
  private reconciled = 0;

  constructor(private readonly opts: ControllerOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1) throw new Error(`${opts.name}: workers must be a positive integer, got ${opts.workers}`);
    if (!(opts.debounceMs >= 0)) throw new Error(`${opts.name}: debounceMs must be 0 or more, got ${opts.debounceMs}`);
    if (!(opts.resyncPeriodMs >= 0)) throw new Error(`${opts.name}: resyncPeriodMs must be 0 or more, got ${opts.resyncPeriodMs}`);
    this.name = `${opts.name}-controller`;
    this.log = opts.logger;
    const pace = opts.pace;
    this.sizing = pace && pace.maxWorkers > opts.workers && Number.isFinite(pace.ratePerSecond) ? new WorkerSizing({ floor: opts.workers, ceiling: pace.maxWorkers, ratePerSecond: pace.ratePerSecond }) : undefined;
  }

  /** Subscribes a source: every event it emits wakes the keys `wakes` maps it to (a pure function). */
  watches<E>(subscribe: (listener: (event: E) => void) => void, wakes: (event: E) => readonly Wake[]): this {
    subscribe((event) => {
      if (!this.current?.accepting) return;
      for (const wake of wakes(event)) this.enqueue(wake);
    });
    return this;
  }

  /** Queues a key in the running term; dropped when none runs or before its first full pass. */
  enqueue(wake: Wake): void {
    const term = this.current;
    if (!term?.accepting || term.signal.aborted) return;
    if (wake.debounce) term.queue.addDebounced(wake.key);
    else term.queue.add(wake.key);
  }

  /** A stopping term has nothing queued, but what is in flight is finishing, and counted. */
  status(): ControllerStatus {
    const term = this.current;
    return { queued: term && !term.signal.aborted ? term.queue.depth() : 0, inFlight: term?.inFlight ?? 0, workers: term?.workers ?? 0 };
  }

  /** How many reconciles have finished since the controller was made, over every term. */
  reconciledTotal(): number {
    return this.reconciled;
  }

  /** The running term's queue, map by map (keys queued, delayed, backing off); for /status (`memory`). */
  queueMemory(): { queued: number; delayed: number; failures: number } {
    return this.current?.queue.memory() ?? { queued: 0, delayed: 0, failures: 0 };
  }

  async start(signal: AbortSignal): Promise<void> {
    if (this.current && !this.current.signal.aborted) throw new Error(`${this.name} is already running`);
    // the previous term's caches must be gone before new ones watch
    await this.current?.done;
    const { metrics, name } = this.opts;
    const queue = new WorkQueue({ debounceMs: this.opts.debounceMs, onDepthChange: (depth) => metrics.queueDepth.set({ controller: name }, depth) });
    const term: RunningTerm = {
      signal,
      queue,
      accepting: false,
      inFlight: 0,
      workers: 0,
      done: Promise.resolve(),
      enqueue: (wake) => {
        if (this.current === term) this.enqueue(wake);
      },
    };
    signal.addEventListener('abort', () => queue.shutDown(), { once: true });
    this.current = term;
    const parts = this.opts.term(term);
    for (const runnable of parts.runnables ?? []) await runnable.start(signal);
    term.done = (async () => {
      try {
        await this.run(term, parts);
      } catch (err) {
        this.log.error({ err }, `${this.name}: workers failed`);
      } finally {
        await parts.settled?.();
        await Promise.all((parts.runnables ?? []).map((runnable) => runnable.stopped()));
      }
    })();
  }

  async stopped(): Promise<void> {
    await this.current?.done;
  }

  private async run(term: RunningTerm, parts: TermParts): Promise<void> {
    for (const cache of [...this.opts.syncs, ...(parts.syncs ?? [])]) if (!(await cache.whenSynced(term.signal))) return;
    parts.onSynced?.();
    // a key waiting for its debounce window or backoff keeps waiting
    const queueAll = (): void => {
      for (const key of this.opts.keys()) term.queue.addUnlessWaiting(key);
    };
    queueAll();
    term.accepting = true;
    const { pace, workers } = this.opts;
    this.log.info(
      { controller: this.opts.name, keys: term.queue.depth(), workers, ...(this.sizing && pace ? { maxWorkers: pace.maxWorkers } : {}) },
      `caches synced; reconciling every ${this.opts.objects}`,
    );
    const resync = this.opts.resyncPeriodMs > 0 ? setInterval(queueAll, this.opts.resyncPeriodMs) : undefined;
    const loops = new Set<Promise<void>>();
    const addWorkers = (): void => {
      const wanted = this.sizing?.limit() ?? workers;
      while (term.workers < wanted && !term.signal.aborted) {
        term.workers++;
        const loop: Promise<void> = this.work(term, parts.reconciler, addWorkers).finally(() => loops.delete(loop));
        loops.add(loop);
      }
      this.opts.metrics.workers.set({ controller: this.opts.name }, term.workers);
    };
    try {
      addWorkers();
      while (loops.size > 0) await Promise.all(loops);
    } finally {
      clearInterval(resync);
      this.opts.metrics.workers.set({ controller: this.opts.name }, 0);
    }
  }

  /** One worker loop: ends when the queue shuts down, or when the sizing wants fewer loops than run. */
  private async work(term: RunningTerm, reconciler: Reconciler, addWorkers: () => void): Promise<void> {
    const { metrics, name } = this.opts;
    for (;;) {
      if (this.sizing && term.workers > this.sizing.limit()) break;
      const key = await term.queue.get();
      if (key === undefined) break;
      term.inFlight++;
      const started = performance.now();
      const endTimer = metrics.reconcileDuration.startTimer({ controller: name });
      try {
        const result = await reconciler.reconcile(key, term.signal);
        term.queue.forget(key);
        if (result.requeueAfterMs !== undefined) term.queue.addAfter(key, result.requeueAfterMs);
        if (this.sizing && result.pacedMs !== undefined) {
          this.sizing.observe(performance.now() - started - result.pacedMs, result.pacedMs);
          addWorkers();
        }
      } catch (err) {
        // stopped while waiting for a turn: the next term starts with every key queued
        if (!(term.signal.aborted && isAbortError(err))) this.failed(term, key, err);
      } finally {
        endTimer();
        term.queue.done(key);
        term.inFlight--;
        this.reconciled++;
      }
    }
    term.workers--;
    this.opts.metrics.workers.set({ controller: name }, term.workers);
  }

  private failed(term: RunningTerm, key: string, err: unknown): void {
    if (statusCode(err) === 429) this.sizing?.pushedBack();
    const delayMs = term.queue.addRateLimited(key);
    const what = this.opts.describe?.(key) ?? key;
    if (err instanceof ConflictError) {
      this.log.debug({ controller: this.opts.name, key, delayMs, err: err.message }, 'conflict; requeued');
      return;
    }
    this.opts.metrics.reconcileErrors.inc({ controller: this.opts.name });
    this.log.warn({ controller: this.opts.name, key, delayMs, err }, `${this.opts.name}: reconcile of ${what} failed; retrying in ${delayMs} ms`);
  }
}
