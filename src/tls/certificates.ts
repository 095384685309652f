import crypto from 'node:crypto';
import type forge from 'node-forge';

type Forge = typeof forge;

/**
 * node-forge makes certificates (Node's crypto cannot); it is loaded when one is made, not at
 * start-up: a replica serving files or a stored Secret never needs it (about 8 MB of RSS).
 * Certificates are read with node:crypto's X509Certificate.
 */
async function loadForge(): Promise<Forge> {
  return (await import('node-forge')).default;
}

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

function generateKeyPair(forge: Forge, bits: number): Promise<forge.pki.rsa.KeyPair> {
  // forge hands this to Node's native crypto when called with a callback: no event-loop stall
  return new Promise((resolve, reject) => {
    forge.pki.rsa.generateKeyPair({ bits, e: 0x10001 }, (err, keys) => (err ? reject(err) : resolve(keys)));
  });
}

function randomSerial(forge: Forge): string {
  // positive 128-bit serial: the high bit of the first byte cleared
  const bytes = forge.random.getBytesSync(16);
  const first = (bytes.charCodeAt(0) & 0x7f) | 0x01;
  return forge.util.bytesToHex(String.fromCharCode(first) + bytes.slice(1));
}

function messageDigest(forge: Forge, digest: SignatureDigest = DEFAULT_SIGNATURE_DIGEST): forge.md.MessageDigest {
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
  const forge = await loadForge();
  const keys = await generateKeyPair(forge, opts.keyBits);
  const cert = forge.pki.createCertificate();
  cert.publicKey = keys.publicKey;
  cert.serialNumber = randomSerial(forge);
  validity(cert, opts);
  const subject = [{ name: 'commonName', value: opts.commonName }];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  cert.sign(keys.privateKey, messageDigest(forge, opts.digest));
  return { certPem: forge.pki.certificateToPem(cert), keyPem: forge.pki.privateKeyToPem(keys.privateKey) };
}

export async function createSignedCertificate(ca: KeyPairPem, opts: LeafOptions): Promise<KeyPairPem> {
  const forge = await loadForge();
  const caCert = forge.pki.certificateFromPem(ca.certPem);
  const caKey = forge.pki.privateKeyFromPem(ca.keyPem);
  const keys = await generateKeyPair(forge, opts.keyBits);
  const cert = forge.pki.createCertificate();
  cert.publicKey = keys.publicKey;
  cert.serialNumber = randomSerial(forge);
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
  cert.sign(caKey, messageDigest(forge, opts.digest));
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
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new Error('Invalid PEM formatted message: no certificate');
  const cert = new crypto.X509Certificate(pem);
  // "CN=name\nO=org": one attribute a line
  const cn = (name: string): string => name.split('\n').find((line) => line.startsWith('CN='))?.slice('CN='.length) ?? '';
  const names = splitAltNames(cert.subjectAltName);
  return {
    subject: cn(cert.subject),
    issuer: cn(cert.issuer),
    notBefore: cert.validFromDate,
    notAfter: cert.validToDate,
    dnsNames: names.filter((n) => n.startsWith('DNS:')).map((n) => n.slice('DNS:'.length)),
    ipAddresses: names.filter((n) => n.startsWith('IP Address:')).map((n) => canonicalIp(n.slice('IP Address:'.length))),
    isCA: cert.ca,
  };
}

/** "DNS:a, IP Address:1.2.3.4" (a name with a comma or quote comes quoted, JSON-style) */
function splitAltNames(san: string | undefined): string[] {
  if (!san) return [];
  const out: string[] = [];
  for (const m of san.matchAll(/(?:^|, )([A-Za-z ]+:)("(?:[^"\\]|\\.)*"|[^,]*)/g)) {
    const value = m[2]!.startsWith('"') ? (JSON.parse(m[2]!) as string) : m[2]!;
    out.push(`${m[1]}${value}`);
  }
  return out;
}

/** An IPv6 address as forge and net.SocketAddress print it (OpenSSL prints every group, upper case). */
function canonicalIp(ip: string): string {
  if (!ip.includes(':')) return ip;
  try {
    return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
  } catch {
    return ip.toLowerCase();
  }
}

/** True when `leafPem` was signed by the key of `caPem`. */
export function isSignedBy(leafPem: string, caPem: string): boolean {
  try {
    const ca = new crypto.X509Certificate(caPem);
    const leaf = new crypto.X509Certificate(leafPem);
    return leaf.checkIssued(ca) && leaf.verify(ca.publicKey);
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
