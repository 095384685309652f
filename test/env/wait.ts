import { waitFor } from '../../src/dev/wait.js';

export { waitFor };

/** Lets the probe record what it saw, for the timeout message. */
export async function waitUntil(
  what: string,
  probe: () => Promise<boolean | string> | boolean | string,
  opts?: { timeoutMs?: number; intervalMs?: number },
): Promise<void> {
  let seen = '';
  await waitFor(
    what,
    async () => {
      const r = await probe();
      if (r === true) return true;
      seen = typeof r === 'string' ? r : 'false';
      throw new Error(seen);
    },
    opts,
  );
}
