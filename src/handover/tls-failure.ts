/** Node's codes for a server certificate that no CA it trusts issued. */
const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
]);
const OUT_OF_DATE: Record<string, string> = { CERT_HAS_EXPIRED: 'has expired', CERT_NOT_YET_VALID: 'is not valid yet' };
const WRONG_NAME = 'ERR_TLS_CERT_ALTNAME_INVALID';

export interface CertificateContext {
  pod: string;
  /** the name the certificate was checked for */
  host: string;
  /** the credentials Secret, when one is named */
  secret?: string;
  /** whether that Secret gave a ca.crt */
  hasCa: boolean;
}

/** Node's own text without its advice for Node users ("...; if the root CA is installed locally, try running Node.js with ..."). */
function ownWords(err: Error): string {
  return err.message.split(';')[0]!.trim();
}

/**
 * What an https call's error says about the pod's certificate, in words a user acts on (which
 * CA was asked, which name was checked), or undefined when the error is not about the certificate.
 */
export function certificateProblem(err: unknown, at: CertificateContext): string | undefined {
  if (!(err instanceof Error)) return undefined;
  const code = (err as NodeJS.ErrnoException).code ?? '';
  const certificate = `the certificate of pod ${at.pod} (${at.host})`;
  if (UNTRUSTED.has(code)) {
    const trusted = at.hasCa
      ? `ca.crt of Secret ${at.secret ?? ''}`
      : `Node.js's built-in CA list (${at.secret === undefined ? 'no rollguard.io/handover-credentials Secret gives a ca.crt' : `Secret ${at.secret} has no ca.crt`})`;
    return `${certificate} is not trusted by ${trusted} (${ownWords(err)})`;
  }
  if (code in OUT_OF_DATE) return `${certificate} ${OUT_OF_DATE[code]}`;
  if (code === WRONG_NAME) {
    const reason = (err as Error & { reason?: unknown }).reason;
    return `the certificate of pod ${at.pod} is not issued for ${at.host} (${typeof reason === 'string' ? reason : ownWords(err)})`;
  }
  return undefined;
}
