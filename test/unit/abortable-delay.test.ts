import { describe, expect, it } from 'vitest';
import { abortableDelay } from '../../src/kube/abortable-delay.js';

describe('abortableDelay', () => {
  it('waits the time given', async () => {
    const started = Date.now();
    await abortableDelay(50, new AbortController().signal);
    expect(Date.now() - started).toBeGreaterThanOrEqual(45);
  });

  it('resolves at once when the signal aborts meanwhile or had aborted before', async () => {
    const abort = new AbortController();
    const started = Date.now();
    const waiting = abortableDelay(60_000, abort.signal);
    abort.abort();
    await waiting;
    await abortableDelay(60_000, abort.signal);
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
