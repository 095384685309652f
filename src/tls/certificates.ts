import crypto from 'node:crypto';
import forge from 'node-forge';

export interface KeyPairPem {
  certPem: string;
  keyPem: string;
}

/** A key pair as a server presents it; `caPem` is the CA that signed it, when rollguard knows it. */
export interface ServingKeyPair extends KeyPairPem {
  caPem?: string;
}

/** Digests a certificate may be signed with; all are accepted by the API server's Go TLS stack. */
export type SignatureDigest = 'sha256' | 'sha384' | 'sha512';

/** SHA-256 with RSA: what every TLS client verifies and what the Kubernetes PKI itself uses. */
export const DEFAULT_SIGNATURE_DIGEST: SignatureDigest = 'sha256';

export interface CertificateOptions {
  commonName: string;
  /** lifetime in seconds */
  validitySeconds: number;
  keyBits: number;
  now?: Date;
  digest?: SignatureDigest;
}

export interface LeafOptions extends CertificateOptions {
  dnsNames?: string[];
  ipAddresses?: string[];
  organizations?: string[];
  usage: 'server' | 'client' | 'both';
}

/** Certificates start this far in the past so a peer whose clock lags still accepts them. */
export const CLOCK_SKEW_ALLOWANCE_SECONDS = 300;

function generateKeyPair(bits: number): Promise<forge.pki.rsa.KeyPair> {
  // forge hands this to Node's native crypto when called with a callback: no event-loop stall
  return new Promise((resolve, reject) => {
    forge.pki.rsa.generateKeyPair({ bits, e: 0x10001 }, (err, keys) => (err ? reject(err) : resolve(keys)));
  });
}

function randomSerial(): string {
  // positive 128-bit serial: the high bit of the first byte cleared
  const bytes = forge.random.getBytesSync(16);
  const first = (bytes.charCodeAt(0) & 0x7f) | 0x01;
  return forge.util.bytesToHex(String.fromCharCode(first) + bytes.slice(1));
}

function messageDigest(digest: SignatureDigest = DEFAULT_SIGNATURE_DIGEST): forge.md.MessageDigest {
  switch (digest) {
    case 'sha256':
      return forge.md.sha256.create();
    case 'sha384':
      return forge.md.sha384.create();
    case 'sha512':
      return forge.md.sha512.create();
  }
}

function validity(cert: forge.pki.Certificate, opts: CertificateOptions): void {
  const now = opts.now ?? new Date();
  cert.validity.notBefore = new Date(now.getTime() - CLOCK_SKEW_ALLOWANCE_SECONDS * 1000);
  cert.validity.notAfter = new Date(now.getTime() + opts.validitySeconds * 1000);
}

export async function createCertificateAuthority(opts: CertificateOptions): Promise<KeyPairPem> {
  const keys = await generateKeyPair(opts.keyBits);
  const cert = forge.pki.createCertificate();
  cert.publicKey = keys.publicKey;
  cert.serialNumber = randomSerial();
  validity(cert, opts);
  const subject = [{ name: 'commonName', value: opts.commonName }];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  cert.sign(keys.privateKey, messageDigest(opts.digest));
  return { certPem: forge.pki.certificateToPem(cert), keyPem: forge.pki.privateKeyToPem(keys.privateKey) };
}

export async function createSignedCertificate(ca: KeyPairPem, opts: LeafOptions): Promise<KeyPairPem> {
  const caCert = forge.pki.certificateFromPem(ca.certPem);
  const caKey = forge.pki.privateKeyFromPem(ca.keyPem);
  const keys = await generateKeyPair(opts.keyBits);
  const cert = forge.pki.createCertificate();
  cert.publicKey = keys.publicKey;
  cert.serialNumber = randomSerial();
  validity(cert, opts);
  const subject: forge.pki.CertificateField[] = [{ name: 'commonName', value: opts.commonName }];
  for (const org of opts.organizations ?? []) subject.push({ name: 'organizationName', value: org });
  cert.setSubject(subject);
  cert.setIssuer(caCert.subject.attributes);
  const altNames = [
    ...(opts.dnsNames ?? []).map((value) => ({ type: 2, value })),
    ...(opts.ipAddresses ?? []).map((ip) => ({ type: 7, ip })),
  ];
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false, critical: true },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    {
      name: 'extKeyUsage',
      serverAuth: opts.usage !== 'client',
      clientAuth: opts.usage !== 'server',
    },
    { name: 'subjectKeyIdentifier' },
    { name: 'authorityKeyIdentifier', keyIdentifier: caCert.generateSubjectKeyIdentifier().getBytes() },
  ];
  if (altNames.length > 0) extensions.push({ name: 'subjectAltName', altNames });
  cert.setExtensions(extensions);
  cert.sign(caKey, messageDigest(opts.digest));
  return { certPem: forge.pki.certificateToPem(cert), keyPem: forge.pki.privateKeyToPem(keys.privateKey) };
}

export interface CertificateInfo {
  subject: string;
  issuer: string;
  notBefore: Date;
  notAfter: Date;
  dnsNames: string[];
  ipAddresses: string[];
  isCA: boolean;
}

/** Reads the facts of the first certificate in a PEM; throws with a reason when it is not one. */
export function certificateInfo(pem: string): CertificateInfo {
  const cert = forge.pki.certificateFromPem(pem);
  const san = cert.getExtension('subjectAltName') as { altNames?: { type: number; value?: string; ip?: string }[] } | null;
  const basic = cert.getExtension('basicConstraints') as { cA?: boolean } | null;
  const cn = (attrs: forge.pki.CertificateField[]): string =>
    String(attrs.find((a) => a.name === 'commonName')?.value ?? '');
  return {
    subject: cn(cert.subject.attributes),
    issuer: cn(cert.issuer.attributes),
    notBefore: cert.validity.notBefore,
    notAfter: cert.validity.notAfter,
    dnsNames: (san?.altNames ?? []).filter((n) => n.type === 2).map((n) => String(n.value)),
    ipAddresses: (san?.altNames ?? []).filter((n) => n.type === 7).map((n) => String(n.ip)),
    isCA: basic?.cA === true,
  };
}

/** True when `leafPem` was signed by the key of `caPem`. */
export function isSignedBy(leafPem: string, caPem: string): boolean {
  try {
    const ca = forge.pki.certificateFromPem(caPem);
    return ca.verify(forge.pki.certificateFromPem(leafPem));
  } catch {
    return false;
  }
}

/**
 * When a certificate made here was issued: its notBefore is backdated by the clock skew
 * allowance, so renewal and grace periods measured from notBefore would start early.
 */
export function issuedAt(info: CertificateInfo): Date {
  const issued = info.notBefore.getTime() + CLOCK_SKEW_ALLOWANCE_SECONDS * 1000;
  return new Date(Math.min(issued, info.notAfter.getTime()));
}

/** True when `keyPem` is the private key of the first certificate in `certPem`. */
export function keyMatchesCertificate(certPem: string, keyPem: string): boolean {
  try {
    return new crypto.X509Certificate(certPem).checkPrivateKey(crypto.createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

/** SHA-256 fingerprint of the first certificate in a PEM (colon-separated hex), for comparing and logging. */
export function certificateFingerprint(pem: string): string {
  return new crypto.X509Certificate(pem).fingerprint256;
}

/** notAfter of the first certificate in a PEM; unlike `certificateInfo` it reads any key type (a BYO certificate may be ECDSA). */
export function certificateNotAfter(pem: string): Date {
  return new crypto.X509Certificate(pem).validToDate;
}
