import { statusBody } from './api-status.js';

/** Event reason when an admission policy (rollguard's fence, or another) denied rollguard's own write. */
export const REASON_WRITE_DENIED = 'WriteDenied';

const FORBIDDEN = 403;
const UNPROCESSABLE = 422;
// "ValidatingAdmissionPolicy 'rollguard-fence-statefulsets' with binding '...' denied request: ..."
const POLICY_DENIAL = /ValidatingAdmissionPolicy '[^']+'( with binding '[^']+')? denied request/;

/**
 * The API server's message when a ValidatingAdmissionPolicy denied a write; undefined for any
 * other failure. It names the policy, so the Event built from it tells an admin which fence
 * to look at (e.g. another mutating webhook rewrote the object under rollguard's patch).
 */
export function policyDenial(err: unknown): string | undefined {
  const { code, body } = (err ?? {}) as { code?: unknown; body?: unknown };
  if (code !== FORBIDDEN && code !== UNPROCESSABLE) return undefined;
  const status = statusBody(err);
  const message = status ? status.message : body;
  return typeof message === 'string' && POLICY_DENIAL.test(message) ? message : undefined;
}
