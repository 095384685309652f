import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { Manager, type Runnable } from '../../src/manager.js';

const silent = pino({ level: 'silent' });

interface Recorded extends Runnable {
  /** The signal start() was given. */
  signal(): AbortSignal | undefined;
  /** Lets a runnable whose stop was held back finish stopping. */
  finishStopping(): void;
}

interface RecordedOptions {
  failStart?: Error;
  failStop?: Error;
  /** stopped() waits for finishStopping() instead of resolving as soon as the signal fires */
  holdStop?: boolean;
}

/** A runnable that writes what happens to it into a shared journal, in the order it happens. */
function recorded(name: string, journal: string[], opts: RecordedOptions = {}): Recorded {
  let given: AbortSignal | undefined;
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  let stopped: Promise<void> = Promise.resolve();
  return {
    name,
    async start(signal) {
      given = signal;
      journal.push(`start ${name}`);
      stopped = new Promise<void>((resolve, reject) => {
        signal.addEventListener(
          'abort',
          () => {
            journal.push(`abort ${name}`);
            void (opts.holdStop ? released : Promise.resolve()).then(() => {
              journal.push(`stopped ${name}`);
              if (opts.failStop) reject(opts.failStop);
              else resolve();
            });
          },
          { once: true },
        );
      });
      // an awaited tick, so a start is really asynchronous
      await Promise.resolve();
      if (opts.failStart) throw opts.failStart;
      journal.push(`running ${name}`);
    },
    stopped: () => stopped,
    signal: () => given,
    finishStopping: () => release(),
  };
}

describe('Manager', () => {
  it('starts runnables one after another in the order given', async () => {
    const journal: string[] = [];
    const manager = new Manager(['admin', 'caches', 'webhook'].map((n) => recorded(n, journal)), silent);
    await manager.start();
    expect(journal).toEqual(['start admin', 'running admin', 'start caches', 'running caches', 'start webhook', 'running webhook']);
    await manager.stop();
  });

  it('stops in reverse order, each one stopped before the next is told to stop', async () => {
    const journal: string[] = [];
    const manager = new Manager(['admin', 'caches', 'webhook'].map((n) => recorded(n, journal)), silent);
    await manager.start();
    journal.length = 0;
    await manager.stop();
    expect(journal).toEqual(['abort webhook', 'stopped webhook', 'abort caches', 'stopped caches', 'abort admin', 'stopped admin']);
  });

  it('waits for a runnable to finish its in-flight work before stopping the one before it', async () => {
    const journal: string[] = [];
    const first = recorded('first', journal);
    const slow = recorded('slow', journal, { holdStop: true });
    const manager = new Manager([first, slow], silent);
    await manager.start();
    const stopping = manager.stop();
    await Promise.resolve();
    expect(slow.signal()?.aborted).toBe(true);
    expect(first.signal()?.aborted).toBe(false);
    slow.finishStopping();
    await stopping;
    expect(first.signal()?.aborted).toBe(true);
    expect(journal.slice(-4)).toEqual(['abort slow', 'stopped slow', 'abort first', 'stopped first']);
  });

  it('stops what started, in reverse, when a start fails, and never starts the rest', async () => {
    const journal: string[] = [];
    const failure = new Error('cannot listen on 127.0.0.1:9443');
    const manager = new Manager(
      [recorded('admin', journal), recorded('caches', journal), recorded('webhook', journal, { failStart: failure }), recorded('never', journal)],
      silent,
    );
    await expect(manager.start()).rejects.toBe(failure);
    expect(journal).toEqual([
      'start admin',
      'running admin',
      'start caches',
      'running caches',
      'start webhook',
      // the failing part may have started pieces of itself: it is told to stop too
      'abort webhook',
      'stopped webhook',
      'abort caches',
      'stopped caches',
      'abort admin',
      'stopped admin',
    ]);
  });

  it('is idempotent: a second stop returns the same promise and stops nothing twice', async () => {
    const journal: string[] = [];
    const manager = new Manager([recorded('a', journal), recorded('b', journal)], silent);
    await manager.start();
    journal.length = 0;
    const one = manager.stop();
    const two = manager.stop();
    expect(two).toBe(one);
    await Promise.all([one, two]);
    expect(journal).toEqual(['abort b', 'stopped b', 'abort a', 'stopped a']);
  });

  it('goes on stopping the others when one fails to stop', async () => {
    const journal: string[] = [];
    const manager = new Manager([recorded('a', journal), recorded('b', journal, { failStop: new Error('boom') }), recorded('c', journal)], silent);
    await manager.start();
    journal.length = 0;
    await expect(manager.stop()).resolves.toBeUndefined();
    expect(journal).toEqual(['abort c', 'stopped c', 'abort b', 'stopped b', 'abort a', 'stopped a']);
  });

  it('starts nothing more once stop was called during start, and stops what had started', async () => {
    const journal: string[] = [];
    let stopping: Promise<void> | undefined;
    // stop() arrives (as a signal would) while the second part is starting
    const second: Runnable = {
      name: 'second',
      async start(signal) {
        journal.push('start second');
        stopping = manager.stop();
        await Promise.resolve();
        journal.push(`second saw abort: ${signal.aborted}`);
      },
      stopped: () => Promise.resolve(),
    };
    const manager = new Manager([recorded('first', journal), second, recorded('third', journal)], silent);
    await expect(manager.start()).rejects.toThrow(/stopped while starting; third/);
    await stopping;
    expect(journal).toContain('stopped first');
    expect(journal).toContain('second saw abort: true');
    expect(journal.some((l) => l.includes('third'))).toBe(false);
  });
});
