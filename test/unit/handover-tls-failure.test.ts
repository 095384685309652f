import { describe, expect, it } from 'vitest';
import { certificateProblem } from '../../src/handover/tls-failure.js';

const error = (code: string, message: string, extra: Record<string, unknown> = {}): Error => Object.assign(new Error(message), { code, ...extra });
const at = { pod: 'db-0', host: 'db-0.db.shop.svc', secret: 'db-api', hasCa: true };

describe('certificateProblem', () => {
  it('an unknown issuer names the CA that was asked, without Node.js advice', () => {
    const err = error('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'unable to verify the first certificate; if the root CA is installed locally, try running Node.js with --use-system-ca');
    expect(certificateProblem(err, at)).toBe('the certificate of pod db-0 (db-0.db.shop.svc) is not trusted by ca.crt of Secret db-api (unable to verify the first certificate)');
    expect(certificateProblem(error('SELF_SIGNED_CERT_IN_CHAIN', 'self-signed certificate in certificate chain'), { ...at, hasCa: false })).toBe(
      "the certificate of pod db-0 (db-0.db.shop.svc) is not trusted by Node.js's built-in CA list (Secret db-api has no ca.crt) (self-signed certificate in certificate chain)",
    );
    expect(certificateProblem(error('DEPTH_ZERO_SELF_SIGNED_CERT', 'self-signed certificate'), { pod: 'db-0', host: 'db-0', hasCa: false })).toContain(
      'no rollguard.io/handover-credentials Secret gives a ca.crt',
    );
  });

  it('a name the certificate does not hold, and a certificate out of date', () => {
    const reason = "Host: db-0.db.shop.svc. is not in the cert's altnames: DNS:other";
    expect(certificateProblem(error('ERR_TLS_CERT_ALTNAME_INVALID', `Hostname/IP does not match certificate's altnames: ${reason}`, { reason }), at)).toBe(
      `the certificate of pod db-0 is not issued for db-0.db.shop.svc (${reason})`,
    );
    expect(certificateProblem(error('CERT_HAS_EXPIRED', 'certificate has expired'), at)).toBe('the certificate of pod db-0 (db-0.db.shop.svc) has expired');
  });

  it('other errors are not about the certificate', () => {
    expect(certificateProblem(error('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'), at)).toBeUndefined();
    expect(certificateProblem('a string', at)).toBeUndefined();
  });
});
