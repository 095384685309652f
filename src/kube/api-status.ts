/** The HTTP status of a failed client-node call (ApiException carries it as `code`); undefined for other errors. */
export function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** A failed field of a 422's Status (`details.causes`), as the API server names it. */
export interface InvalidField {
  field: string;
  message: string;
}

/** The Status a failed call carried (client-node keeps its body as text), or undefined. */
export function statusBody(err: unknown): Record<string, unknown> | undefined {
  const body = (err as { body?: unknown } | null)?.body;
  if (typeof body === 'object' && body !== null) return body as Record<string, unknown>;
  if (typeof body !== 'string') return undefined;
  try {
    const parsed: unknown = JSON.parse(body);
    return typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The fields a 422 names: the object the write would make is invalid (an annotation map too
 * large, a value the API server refuses). Empty for any other error, and for the 422 of a failed
 * JSON Patch `test`, whose Status names no field.
 */
export function invalidFields(err: unknown): InvalidField[] {
  if (statusCode(err) !== 422) return [];
  const details = statusBody(err)?.details as { causes?: unknown } | undefined;
  const causes = Array.isArray(details?.causes) ? (details.causes as unknown[]) : [];
  return causes.flatMap((c) => {
    const cause = c as { field?: unknown; message?: unknown } | null;
    return typeof cause?.field === 'string' && cause.field !== '' ? [{ field: cause.field, message: typeof cause.message === 'string' ? cause.message : '' }] : [];
  });
}

/**
 * 409: a resourceVersion or precondition conflict; 422 naming no field: a JSON Patch `test`
 * failed. Either way the object changed since it was read: decide again from the newer version.
 * A 422 that names a field is no conflict: the same write would fail again (invalidFields).
 */
export function isConflict(err: unknown): boolean {
  const code = statusCode(err);
  return code === 409 || (code === 422 && invalidFields(err).length === 0);
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
