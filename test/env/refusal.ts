import { ApiException } from '@kubernetes/client-node';

/** The API server's answer to a write: undefined when it went through, else its code and message. */
export async function refusal(write: () => Promise<unknown>): Promise<string | undefined> {
  try {
    await write();
    return undefined;
  } catch (err) {
    if (!(err instanceof ApiException)) throw err;
    const body = err.body as unknown;
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    try {
      return `${err.code} ${(JSON.parse(text) as { message?: string }).message ?? text}`;
    } catch {
      return `${err.code} ${text}`;
    }
  }
}
