import { setTimeout as wait } from 'node:timers/promises';

/** Resolves after `ms`, or at once when `signal` aborts, so a loop waiting between attempts stops without delay. */
export async function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  try {
    await wait(ms, undefined, { signal });
  } catch (err) {
    if (!signal.aborted) throw err;
  }
}
