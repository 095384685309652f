import { describe, expect, it } from 'vitest';
import { readiness } from '../../src/server/readiness.js';

describe('readiness', () => {
  const all = { listening: true, shuttingDown: false, certificateReady: true, cachesSynced: true };
  it('is ready only when every input is', () => {
    expect(readiness(all)).toEqual({ ready: true, reasons: [] });
  });
  it.each([
    [{ listening: false }, 'starting: the webhook server is not listening yet'],
    [{ shuttingDown: true }, 'shutting down'],
    [{ certificateReady: false }, 'certificate not loaded or caBundle without its CA'],
    [{ cachesSynced: false }, 'caches not synced'],
  ])('%j: not ready, "%s"', (change, reason) => {
    expect(readiness({ ...all, ...change })).toEqual({ ready: false, reasons: [reason] });
  });
});
