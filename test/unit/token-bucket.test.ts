import { describe, expect, it } from 'vitest';
import { TokenBucket } from '../../src/kube/token-bucket.js';

describe('TokenBucket', () => {
  it('lets a burst through, then paces reservations in order', () => {
    let now = 0;
    const bucket = new TokenBucket(2, 2, () => now);
    expect([bucket.reserve(), bucket.reserve()]).toEqual([0, 0]);
    expect([bucket.reserve(), bucket.reserve(), bucket.reserve()]).toEqual([500, 1_000, 1_500]);
    now = 1_500;
    // Three tokens came in 1.5 s, all of them reserved already.
    expect(bucket.reserve()).toBe(500);
  });

  it('refills up to the burst only', () => {
    let now = 0;
    const bucket = new TokenBucket(1, 3, () => now);
    for (let i = 0; i < 3; i++) bucket.reserve();
    now = 60_000;
    expect([bucket.reserve(), bucket.reserve(), bucket.reserve(), bucket.reserve()]).toEqual([0, 0, 0, 1_000]);
  });

  it('takes back a token that was reserved but not used', () => {
    const bucket = new TokenBucket(1, 1, () => 0);
    bucket.reserve();
    expect(bucket.reserve()).toBe(1_000);
    bucket.cancel();
    expect(bucket.reserve()).toBe(1_000);
  });

  it('gives up the wait when aborted', async () => {
    const bucket = new TokenBucket(0.001, 1);
    await bucket.take(new AbortController().signal);
    const abort = new AbortController();
    const waiting = bucket.take(abort.signal);
    abort.abort();
    await expect(waiting).rejects.toThrow();
  });

  it('never waits when unlimited, and rejects nonsense', () => {
    const bucket = new TokenBucket(Infinity, 1);
    for (let i = 0; i < 1000; i++) expect(bucket.reserve()).toBe(0);
    expect(() => new TokenBucket(0, 1)).toThrow('rate must be above 0 per second, got 0');
    expect(() => new TokenBucket(1, 0)).toThrow('burst must be at least 1, got 0');
  });
});
