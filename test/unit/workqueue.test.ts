import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WorkQueue } from '../../src/kube/workqueue.js';
import { propertyRuns } from '../env/property-runs.js';

/** A get() whose outcome the test can look at without waiting on it. */
function take(queue: WorkQueue): { settled: boolean; key: string | undefined } {
  const next = { settled: false, key: undefined as string | undefined };
  void queue.get().then((key) => {
    next.settled = true;
    next.key = key;
  });
  return next;
}

/** Lets settled promises run their callbacks. */
const flush = async (): Promise<void> => {
  await vi.advanceTimersByTimeAsync(0);
};

describe('WorkQueue', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('holds a key added twice once', async () => {
    const queue = new WorkQueue({ debounceMs: 0 });
    queue.add('a');
    queue.add('a');
    queue.add('b');
    expect(queue.depth()).toBe(2);
    expect(await queue.get()).toBe('a');
    expect(await queue.get()).toBe('b');
    expect(queue.depth()).toBe(0);
    expect(queue.inFlight()).toBe(2);
  });

  it('processes a key again after done when it was added while being processed', async () => {
    const queue = new WorkQueue({ debounceMs: 0 });
    queue.add('a');
    expect(await queue.get()).toBe('a');
    queue.add('a');
    queue.add('a');
    const second = take(queue);
    await flush();
    // Not handed to a second worker while the first holds it.
    expect(second.settled).toBe(false);
    queue.done('a');
    await flush();
    expect(second).toEqual({ settled: true, key: 'a' });
    queue.done('a');
    expect(queue.depth()).toBe(0);
  });

  it('wakes a waiting worker when a key arrives', async () => {
    const queue = new WorkQueue({ debounceMs: 0 });
    const next = queue.get();
    queue.add('x');
    await expect(next).resolves.toBe('x');
  });

  it('folds debounced adds within the window into one item at the end of the window', async () => {
    const queue = new WorkQueue({ debounceMs: 5_000 });
    queue.addDebounced('s');
    await vi.advanceTimersByTimeAsync(1_000);
    queue.addDebounced('s');
    await vi.advanceTimersByTimeAsync(3_000);
    queue.addDebounced('s');
    expect(queue.depth()).toBe(1);
    const next = take(queue);
    await vi.advanceTimersByTimeAsync(999);
    expect(next.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(next).toEqual({ settled: true, key: 's' });
    queue.done('s');
    expect(queue.depth()).toBe(0);
    // A change after the item ran opens a new window.
    queue.addDebounced('s');
    await vi.advanceTimersByTimeAsync(5_000);
    expect(await queue.get()).toBe('s');
  });

  it('debounces a key being processed, and adds nothing for a key already queued', async () => {
    const queue = new WorkQueue({ debounceMs: 1_000 });
    queue.add('k');
    queue.addDebounced('k');
    expect(queue.depth()).toBe(1);
    expect(await queue.get()).toBe('k');
    queue.addDebounced('k');
    queue.done('k');
    const next = take(queue);
    await vi.advanceTimersByTimeAsync(999);
    expect(next.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(next).toEqual({ settled: true, key: 'k' });
  });

  it('adds at once when the debounce window is 0', async () => {
    const queue = new WorkQueue({ debounceMs: 0 });
    queue.addDebounced('k');
    expect(await queue.get()).toBe('k');
  });

  it('lets an immediate add overtake a pending delayed one', async () => {
    const queue = new WorkQueue({ debounceMs: 5_000 });
    queue.addDebounced('k');
    queue.add('k');
    expect(await queue.get()).toBe('k');
    queue.done('k');
    await vi.advanceTimersByTimeAsync(5_000);
    expect(queue.depth()).toBe(0);
  });

  it('keeps the earlier of two delayed adds', async () => {
    const queue = new WorkQueue({ debounceMs: 0 });
    queue.addAfter('k', 10_000);
    queue.addAfter('k', 2_000);
    queue.addAfter('k', 8_000);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(await queue.get()).toBe('k');
  });

  it('backs off exponentially per key on failure, capped, until forgotten', async () => {
    const queue = new WorkQueue({ debounceMs: 0, retryBaseMs: 100, retryMaxMs: 1_000 });
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      delays.push(queue.addRateLimited('k'));
      const next = take(queue);
      await vi.advanceTimersByTimeAsync(delays[i]! - 1);
      expect(next.settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(next).toEqual({ settled: true, key: 'k' });
      queue.done('k');
    }
    expect(delays).toEqual([100, 200, 400, 800, 1_000, 1_000]);
    expect(queue.retries('k')).toBe(6);
    expect(queue.addRateLimited('other')).toBe(100);
    queue.forget('k');
    expect(queue.retries('k')).toBe(0);
    expect(queue.addRateLimited('k')).toBe(100);
  });

  it('reports its depth, delayed items included', async () => {
    const depths: number[] = [];
    const queue = new WorkQueue({ debounceMs: 1_000, onDepthChange: (d) => depths.push(d) });
    queue.addDebounced('a');
    queue.add('b');
    expect(queue.depth()).toBe(2);
    await queue.get();
    await vi.advanceTimersByTimeAsync(1_000);
    await queue.get();
    expect(depths).toEqual([1, 2, 1, 0]);
  });

  it('hands out a change before the keys of a full pass queued earlier', async () => {
    const queue = new WorkQueue({ debounceMs: 0 });
    for (const key of ['a', 'b', 'c']) queue.addUnlessWaiting(key);
    queue.add('z');
    expect(queue.depth()).toBe(4);
    expect([await queue.get(), await queue.get(), await queue.get(), await queue.get()]).toEqual(['z', 'a', 'b', 'c']);
  });

  it('moves a key of the full pass to the front when it changes: at once, or at the end of its debounce window', async () => {
    const queue = new WorkQueue({ debounceMs: 1_000 });
    for (const key of ['a', 'b', 'c', 'd']) queue.addUnlessWaiting(key);
    queue.add('c');
    queue.addDebounced('d');
    expect(queue.depth()).toBe(4);
    expect(await queue.get()).toBe('c');
    await vi.advanceTimersByTimeAsync(1_000);
    expect([await queue.get(), await queue.get(), await queue.get()]).toEqual(['d', 'a', 'b']);
    expect(queue.depth()).toBe(0);
  });

  it('a key the full pass adds while it is processed goes to the back line when done, a change to the front', async () => {
    const queue = new WorkQueue({ debounceMs: 0 });
    queue.add('a');
    expect(await queue.get()).toBe('a');
    queue.addUnlessWaiting('a');
    queue.addUnlessWaiting('b');
    queue.done('a');
    queue.add('z');
    expect([await queue.get(), await queue.get(), await queue.get()]).toEqual(['z', 'b', 'a']);
    queue.addUnlessWaiting('a');
    queue.add('a');
    queue.done('a');
    queue.addUnlessWaiting('c');
    expect([await queue.get(), await queue.get()]).toEqual(['a', 'c']);
  });

  it('hands out nothing after shutDown, and wakes waiting workers', async () => {
    const queue = new WorkQueue({ debounceMs: 1_000 });
    const waiting = queue.get();
    queue.addAfter('later', 500);
    queue.shutDown();
    await expect(waiting).resolves.toBeUndefined();
    queue.add('x');
    await vi.advanceTimersByTimeAsync(1_000);
    await expect(queue.get()).resolves.toBeUndefined();
    expect(queue.depth()).toBe(0);
    expect(queue.isShutDown()).toBe(true);
  });
});

// The two lines against a model of them: whatever the adds, passes and completions, each get
// hands out what the model says (the front line first, each in its order), never a key twice
// at once, and the depth is the number of keys queued.
describe('WorkQueue, two lines (fast-check)', () => {
  // with a window of 0 a debounced add is an add: `debounced` takes its path through the back line
  type Op = { op: 'add' | 'debounced' | 'pass' | 'done'; key: string } | { op: 'get' };
  const key = fc.constantFrom('a', 'b', 'c', 'd', 'e');
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ op: fc.constantFrom('add' as const, 'debounced' as const, 'pass' as const, 'done' as const), key }),
    fc.constant({ op: 'get' as const }),
  );

  it('hands out what a model of the two lines says', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 60 }), async (ops) => {
        const queue = new WorkQueue({ debounceMs: 0 });
        const front: string[] = [];
        const back: string[] = [];
        const processing = new Set<string>();
        const whenDone = new Map<string, 'front' | 'back'>();
        const queued = (k: string): boolean => front.includes(k) || back.includes(k);
        for (const o of ops) {
          if (o.op === 'add' || o.op === 'debounced') {
            if (o.op === 'add') queue.add(o.key);
            else queue.addDebounced(o.key);
            if (processing.has(o.key)) whenDone.set(o.key, 'front');
            else if (back.includes(o.key)) {
              back.splice(back.indexOf(o.key), 1);
              front.push(o.key);
            } else if (!queued(o.key)) front.push(o.key);
          } else if (o.op === 'pass') {
            queue.addUnlessWaiting(o.key);
            if (processing.has(o.key)) whenDone.set(o.key, whenDone.get(o.key) ?? 'back');
            else if (!queued(o.key)) back.push(o.key);
          } else if (o.op === 'done') {
            if (!processing.has(o.key)) continue;
            queue.done(o.key);
            processing.delete(o.key);
            const line = whenDone.get(o.key);
            whenDone.delete(o.key);
            if (line) (line === 'front' ? front : back).push(o.key);
          } else {
            const expected = front.shift() ?? back.shift();
            if (expected === undefined) continue;
            expect(processing.has(expected)).toBe(false);
            expect(await queue.get()).toBe(expected);
            processing.add(expected);
          }
          expect(queue.depth()).toBe(front.length + back.length);
        }
      }),
      { ...propertyRuns(3_000), endOnFailure: true },
    );
  });
});
