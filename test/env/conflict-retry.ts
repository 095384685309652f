/**
 * `kubectl replace -f` of a manifest without a resourceVersion reads the live object's and sends
 * the PUT with it: a write in between (rollguard's records on the set) makes it a Conflict, and
 * a user runs the command again. Tests that replace as users do run it again the same way.
 */
export const REPLACE_ATTEMPTS = 5;

/** Whether `err` (a failed kubectl, with or without its stderr) reports an HTTP 409 Conflict. */
export function isKubectlConflict(err: unknown): boolean {
  const stderr = (err as { stderr?: unknown } | undefined)?.stderr;
  return `${typeof stderr === 'string' ? stderr : ''} ${err instanceof Error ? err.message : String(err)}`.includes('(Conflict)');
}

/** `write` again while it fails with a Conflict, at most `attempts` times in all. */
export async function againOnConflict<T>(write: () => T | Promise<T>, attempts = REPLACE_ATTEMPTS): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      if (attempt >= attempts || !isKubectlConflict(err)) throw err;
    }
  }
}
