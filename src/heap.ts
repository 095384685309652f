import v8 from 'node:v8';
import vm from 'node:vm';

/**
 * What V8 holds once start-up is over, given back: start-up (loading some 300 modules, the first
 * lists) grows the young generation to its maximum (`--max-semi-space-size=16`: 32 MiB committed)
 * and V8 keeps it while the process is quiet, since it shrinks the young generation only in a
 * collection that runs while little is allocated, or one told to reduce memory, and an idle
 * replica runs almost none. This is V8's "last resort" collection (the one it runs before it
 * gives up on an allocation): full collections until nothing more is freed, the young generation
 * shrunk to its minimum, free pages given back. The young generation grows again under load, up
 * to the same maximum: admission throughput keeps its setting.
 *
 * V8 offers it to script only through its gc extension: `--expose-gc` set now gives it to a new,
 * throwaway context only, not to the process's global scope.
 */
export function trimHeap(): { beforeBytes: number; afterBytes: number; pauseMs: number } {
  const before = process.memoryUsage().rss;
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;
  const started = performance.now();
  gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  return { beforeBytes: before, afterBytes: process.memoryUsage().rss, pauseMs: performance.now() - started };
}
