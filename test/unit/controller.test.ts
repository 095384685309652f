import pino from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ConflictError } from '../../src/kube/api-status.js';
import { Controller, type ControllerOptions, type ReconcileResult, type Syncable, type Term } from '../../src/kube/controller.js';
import { createMetrics } from '../../src/metrics.js';
import { waitUntil } from '../env/wait.js';

const logger = pino({ level: 'silent' });

/** A store that emits events to whoever subscribed, like ObjectStore.onEvent. */
class Source<E> {
  private readonly listeners: ((event: E) => void)[] = [];
  subscribe = (listener: (event: E) => void): void => {
    this.listeners.push(listener);
  };
  emit(event: E): void {
    for (const listener of this.listeners) listener(event);
  }
}

class Gate implements Syncable {
  private open = false;
  private readonly waiters: (() => void)[] = [];
  whenSynced(signal: AbortSignal): Promise<boolean> {
    if (this.open) return Promise.resolve(true);
    return new Promise((resolve) => {
      this.waiters.push(() => resolve(true));
      signal.addEventListener('abort', () => resolve(false), { once: true });
    });
  }
  release(): void {
    this.open = true;
    for (const wake of this.waiters.splice(0)) wake();
  }
}

/** A reconciler that takes `ms` a key and counts how many run at once; `after` answers as the API server would (it may throw). */
function timedReconciler(ms: number, after: () => void = () => undefined) {
  let inFlight = 0;
  let most = 0;
  const term = () => ({
    reconciler: {
      reconcile: async (): Promise<ReconcileResult> => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((resolve) => setTimeout(resolve, ms));
        inFlight--;
        after();
        return { pacedMs: 0 };
      },
    },
  });
  return { term, most: () => most };
}

function harness(overrides: Partial<ControllerOptions> = {}, answer: (key: string, calls: number) => ReconcileResult | Error = () => ({})) {
  const metrics = createMetrics(new Registry());
  const reconciled: string[] = [];
  const terms: Term[] = [];
  const gate = new Gate();
  let keys = ['ns/a', 'ns/b'];
  const controller = new Controller({
    name: 'restarter',
    workers: 2,
    debounceMs: 0,
    resyncPeriodMs: 0,
    keys: () => keys,
    syncs: [gate],
    objects: 'thing',
    term: (term) => {
      terms.push(term);
      return {
        reconciler: {
          reconcile: async (key) => {
            reconciled.push(key);
            const result = answer(key, reconciled.filter((k) => k === key).length);
            if (result instanceof Error) throw result;
            return result;
          },
        },
      };
    },
    logger,
    metrics,
    ...overrides,
  });
  return {
    controller,
    metrics,
    reconciled,
    terms,
    gate,
    setKeys: (next: string[]) => {
      keys = next;
    },
  };
}

describe('Controller', () => {
  it('waits for its caches, then reconciles every key once, and only then takes events', async () => {
    const h = harness();
    const source = new Source<string>();
    h.controller.watches(source.subscribe, (key) => [{ key }]);
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    source.emit('ns/early');
    await new Promise((r) => setImmediate(r));
    expect(h.reconciled).toEqual([]);
    h.gate.release();
    await waitUntil('the full pass', () => h.reconciled.length === 2);
    expect([...h.reconciled].sort()).toEqual(['ns/a', 'ns/b']);
    source.emit('ns/late');
    await waitUntil('the event', () => h.reconciled.includes('ns/late'));
    // the event before the full pass was dropped: the pass covered it
    expect(h.reconciled).not.toContain('ns/early');
    abort.abort();
    await h.controller.stopped();
  });

  it('folds debounced wakes of one key into one reconcile', async () => {
    const h = harness({ debounceMs: 50 });
    h.gate.release();
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    await waitUntil('the full pass', () => h.reconciled.length === 2);
    for (let i = 0; i < 10; i++) h.controller.enqueue({ key: 'ns/a', debounce: true });
    await waitUntil('the debounced reconcile', () => h.reconciled.filter((k) => k === 'ns/a').length === 2);
    // nothing left waiting: the ten wakes were one item
    expect(h.controller.status()).toEqual({ queued: 0, inFlight: 0, workers: 2 });
    expect(h.reconciled.filter((k) => k === 'ns/a')).toHaveLength(2);
    abort.abort();
    await h.controller.stopped();
  });

  it('does not cut a debounce window short with a resync', async () => {
    let passes = 0;
    let armed = false;
    const h = harness();
    const counted = new Controller({
      name: 'restarter',
      workers: 1,
      debounceMs: 60_000,
      resyncPeriodMs: 10,
      // the first pass and, once armed, every resync queue the key
      keys: () => (passes++ === 0 || armed ? ['ns/a'] : []),
      syncs: [h.gate],
      objects: 'thing',
      term: () => ({ reconciler: { reconcile: async (key) => (h.reconciled.push(key), {}) } }),
      logger,
      metrics: h.metrics,
    });
    h.gate.release();
    const abort = new AbortController();
    await counted.start(abort.signal);
    await waitUntil('the full pass', () => h.reconciled.length === 1, { timeoutMs: 2_000 });
    counted.enqueue({ key: 'ns/a', debounce: true });
    armed = true;
    const before = passes;
    await waitUntil('three resyncs', () => passes >= before + 3, { timeoutMs: 2_000 });
    // still waiting for its window: the resyncs did not run it early
    expect(h.reconciled).toEqual(['ns/a']);
    expect(counted.status().queued).toBe(1);
    abort.abort();
    await counted.stopped();
  });

  it('requeues after the asked delay, backs off on errors, and counts conflicts apart', async () => {
    const h = harness({}, (key, calls) => {
      if (key === 'ns/a') return calls < 3 ? { requeueAfterMs: 10 } : {};
      if (calls === 1) return new ConflictError('changed meanwhile');
      return calls === 2 ? new Error('API down') : {};
    });
    h.gate.release();
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    await waitUntil('three reconciles of each', () => h.reconciled.filter((k) => k === 'ns/a').length === 3 && h.reconciled.filter((k) => k === 'ns/b').length === 3);
    const errors = await h.metrics.reconcileErrors.get();
    expect(errors.values).toEqual([{ labels: { controller: 'restarter' }, value: 1 }]);
    abort.abort();
    await h.controller.stopped();
  });

  it('runs again after a stop, with a fresh term that starts with every key', async () => {
    const h = harness();
    h.gate.release();
    const first = new AbortController();
    await h.controller.start(first.signal);
    await waitUntil('the first pass', () => h.reconciled.length === 2);
    first.abort();
    await h.controller.stopped();
    h.controller.enqueue({ key: 'ns/a' });
    expect(h.controller.status()).toEqual({ queued: 0, inFlight: 0, workers: 0 });
    h.setKeys(['ns/c']);
    const second = new AbortController();
    await h.controller.start(second.signal);
    await waitUntil('the second pass', () => h.reconciled.includes('ns/c'));
    expect(h.terms).toHaveLength(2);
    expect(h.terms[0]!.signal.aborted).toBe(true);
    second.abort();
    await h.controller.stopped();
  });

  it('counts a reconcile in flight while its term stops, and nothing queued', async () => {
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const h = harness({
      term: () => ({ reconciler: { reconcile: async () => (await held, {}) } }),
      keys: () => ['ns/a', 'ns/b'],
      workers: 1,
    });
    h.gate.release();
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    await waitUntil('one in flight', () => h.controller.status().inFlight === 1);
    abort.abort();
    expect(h.controller.status()).toEqual({ queued: 0, inFlight: 1, workers: 1 });
    release();
    await h.controller.stopped();
    expect(h.controller.status()).toEqual({ queued: 0, inFlight: 0, workers: 0 });
  });

  it('refuses a second start while running, and bad settings', async () => {
    const h = harness();
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    await expect(h.controller.start(new AbortController().signal)).rejects.toThrow('restarter-controller is already running');
    abort.abort();
    await h.controller.stopped();
    expect(() => harness({ workers: 0 })).toThrow('restarter: workers must be a positive integer, got 0');
    expect(() => harness({ debounceMs: -1 })).toThrow('debounceMs must be 0 or more');
  });

  it('with a pace, adds workers past its floor until rate × time of a paced reconcile is in flight, and halves them when the API server answers 429', async () => {
    let throttled = false;
    const keys = Array.from({ length: 400 }, (_, i) => `ns/k${i}`);
    // the API server's answers: 40 ms for each paced write
    const timed = timedReconciler(40, () => {
      if (throttled) throw Object.assign(new Error('HTTP 429'), { code: 429 });
    });
    const h = harness({ workers: 2, pace: { ratePerSecond: 100, maxWorkers: 16 }, keys: () => keys, term: timed.term });
    h.gate.release();
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    try {
      // 100/s × 40 ms × 1.5 headroom: 6 in flight
      await waitUntil('more workers than the floor of 2', () => h.controller.status().workers >= 6 || `${h.controller.status().workers} workers`);
      const gauge = await h.metrics.workers.get();
      expect(gauge.values[0]?.value).toBeGreaterThanOrEqual(6);
      throttled = true;
      await waitUntil('workers halved after the 429s', () => h.controller.status().workers <= 3 || `${h.controller.status().workers} workers`);
    } finally {
      abort.abort();
      await h.controller.stopped();
    }
    expect(timed.most()).toBeGreaterThanOrEqual(6);
    expect(timed.most()).toBeLessThanOrEqual(16);
  });

  it('without a pace, keeps exactly its workers', async () => {
    const keys = Array.from({ length: 50 }, (_, i) => `ns/k${i}`);
    const timed = timedReconciler(20);
    const h = harness({ workers: 3, keys: () => keys, term: timed.term });
    h.gate.release();
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    await waitUntil('the queue drained', () => h.controller.status().queued === 0 && h.controller.status().inFlight === 0);
    expect(h.controller.status().workers).toBe(3);
    abort.abort();
    await h.controller.stopped();
    expect(timed.most()).toBe(3);
  });

  it('starts and stops term-lived parts with the term, and waits for their side work', async () => {
    const order: string[] = [];
    const h = harness({
      term: () => ({
        reconciler: { reconcile: async () => ({}) },
        runnables: [
          {
            name: 'pod-cache',
            start: async (signal) => {
              order.push('start');
              signal.addEventListener('abort', () => order.push('abort'), { once: true });
            },
            stopped: async () => {
              order.push('stopped');
            },
          },
        ],
        onSynced: () => order.push('synced'),
        settled: async () => {
          order.push('settled');
        },
      }),
    });
    h.gate.release();
    const abort = new AbortController();
    await h.controller.start(abort.signal);
    await waitUntil('synced', () => order.includes('synced'));
    abort.abort();
    await h.controller.stopped();
    expect(order).toEqual(['start', 'synced', 'abort', 'settled', 'stopped']);
  });
});
