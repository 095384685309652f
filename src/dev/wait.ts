/**
 * Polls `probe` until it returns a value other than undefined, or the deadline passes.
 * On timeout the error says what the probe last saw, so a failure (a test, `rollguard dev`) explains itself.
 * The deadline is on the monotonic clock: a step of the wall clock (a VM resumed, NTP) neither ends
 * the wait at once nor stretches it.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  { timeoutMs = 30_000, intervalMs = 100 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
      last = 'probe returned undefined';
    } catch (err) {
      last = err instanceof Error ? err.message : err;
    }
    if (performance.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last saw: ${describe(last)}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

function describe(v: unknown): string {
  if (typeof v === 'string') return v;
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}
