/** The HTTP status of a failed API call (404, 409, …), or undefined when the error is not one. */
export function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}
