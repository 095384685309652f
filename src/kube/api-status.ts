/** The HTTP status of a failed client-node call (ApiException carries it as `code`); undefined for other errors. */
export function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/**
 * 409: a resourceVersion or precondition conflict; 422: a JSON Patch `test` failed. Either way the
 * object changed since it was read: decide again from the newer version.
 */
export function isConflict(err: unknown): boolean {
  const code = statusCode(err);
  return code === 409 || code === 422;
}

/**
 * A request that failed without an answer (the connection broke, a timeout) or with a 5xx may
 * have been carried out all the same: the API server can store a write whose answer is lost.
 */
export function isOutcomeUnknown(err: unknown): boolean {
  const code = statusCode(err);
  return code === undefined || code >= 500;
}

/** A write lost a race with another writer; the controller retries it quietly, with fresh state. */
export class ConflictError extends Error {
  override readonly name = 'ConflictError';
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
