import { beforeAll, describe, expect, it } from 'vitest';
import {
  caBundlePatch,
  caBundlePem,
  bundleHolds,
  observedWebhookConfiguration,
  pemCertificates,
} from '../../src/tls/ca-bundle.js';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../../src/tls/certificates.js';
import { secretContents, servingIssuerPem, SECRET_KEYS } from '../../src/tls/secret-store.js';

const KEY_BITS = 2048;
const VALIDITY_SECONDS = 3600;
const b64 = (s: string): string => Buffer.from(s).toString('base64');

let ca1: KeyPairPem;
let ca2: KeyPairPem;
let serving1: KeyPairPem;
let serving2: KeyPairPem;

beforeAll(async () => {
  const ca = (commonName: string) => createCertificateAuthority({ commonName, validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS });
  [ca1, ca2] = await Promise.all([ca('ca1'), ca('ca2')]);
  const leaf = { commonName: 'svc', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS, usage: 'server' as const };
  [serving1, serving2] = await Promise.all([createSignedCertificate(ca1, leaf), createSignedCertificate(ca2, leaf)]);
});

function secret(data: Record<string, string | undefined>, resourceVersion = '42'): unknown {
  const encoded: Record<string, string> = {};
  for (const [k, v] of Object.entries(data)) if (v !== undefined) encoded[k] = b64(v);
  return { metadata: { name: 'rollguard-tls', resourceVersion, labels: { team: 'a' } }, type: 'kubernetes.io/tls', data: encoded };
}

describe('secretContents', () => {
  const full = () => ({
    [SECRET_KEYS.cert]: serving1.certPem,
    [SECRET_KEYS.key]: serving1.keyPem,
    [SECRET_KEYS.caCert]: ca1.certPem,
    [SECRET_KEYS.caKey]: ca1.keyPem,
  });

  it('reads a valid Secret with its resourceVersion and labels', () => {
    const contents = secretContents(secret(full()));
    expect(contents).toMatchObject({ kind: 'valid', resourceVersion: '42', labels: { team: 'a' } });
    if (contents.kind !== 'valid') throw new Error('expected valid');
    expect(contents.bundle.serving.certPem).toBe(serving1.certPem);
    expect(contents.bundle.previousCaPem).toBeUndefined();
    expect(servingIssuerPem(contents.bundle)).toBe(ca1.certPem);
  });

  it('takes nothing for absent', () => {
    expect(secretContents(undefined)).toEqual({ kind: 'absent' });
  });

  it.each([
    ['a missing key', () => ({ ...full(), [SECRET_KEYS.key]: undefined }), /missing keys tls\.key/],
    ['a garbage certificate', () => ({ ...full(), [SECRET_KEYS.cert]: 'garbage' }), /tls\.crt is not a PEM certificate/],
    ['a key of another certificate', () => ({ ...full(), [SECRET_KEYS.key]: serving2.keyPem }), /tls\.key is not the key of tls\.crt/],
    ['a CA key of another CA', () => ({ ...full(), [SECRET_KEYS.caKey]: ca2.keyPem }), /ca\.key is not the key of ca\.crt/],
    ['a leaf as CA', () => ({ ...full(), [SECRET_KEYS.caCert]: serving2.certPem, [SECRET_KEYS.caKey]: serving2.keyPem }), /not a CA certificate/],
    ['a serving certificate of a foreign CA', () => ({ ...full(), [SECRET_KEYS.caCert]: ca2.certPem, [SECRET_KEYS.caKey]: ca2.keyPem }), /signed by neither/],
  ])('calls %s invalid, with the reason', (_name, data, problem) => {
    expect(secretContents(secret(data()))).toMatchObject({ kind: 'invalid', resourceVersion: '42', problem: expect.stringMatching(problem) });
  });

  it('accepts a serving certificate of the previous CA during a CA rotation, and names that CA as its issuer', () => {
    const contents = secretContents(
      secret({ ...full(), [SECRET_KEYS.caCert]: ca2.certPem, [SECRET_KEYS.caKey]: ca2.keyPem, [SECRET_KEYS.previousCaCert]: ca1.certPem }),
    );
    if (contents.kind !== 'valid') throw new Error(`expected valid, got ${JSON.stringify(contents)}`);
    expect(contents.bundle.previousCaPem).toBe(ca1.certPem);
    expect(servingIssuerPem(contents.bundle)).toBe(ca1.certPem);
  });
});

describe('caBundle', () => {
  it('puts the current CA first and the previous after it', () => {
    const pem = caBundlePem({ ca: ca2, previousCaPem: ca1.certPem });
    expect(pemCertificates(pem)).toEqual([...pemCertificates(ca2.certPem), ...pemCertificates(ca1.certPem)]);
    expect(caBundlePem({ ca: ca1 })).toBe(`${ca1.certPem.trim()}\n`);
  });

  it('finds a CA in a bundle whatever the line breaks', () => {
    const bundle = b64(`${ca2.certPem}\n${ca1.certPem.replace(/\r?\n/g, '\r\n')}`);
    expect(bundleHolds(bundle, ca1.certPem)).toBe(true);
    expect(bundleHolds(bundle, ca2.certPem)).toBe(true);
    expect(bundleHolds(b64(ca2.certPem), ca1.certPem)).toBe(false);
    expect(bundleHolds(undefined, ca1.certPem)).toBe(false);
    expect(bundleHolds(b64('not pem'), ca1.certPem)).toBe(false);
  });

  it('patches exactly the webhooks whose caBundle differs', () => {
    const desired = b64(caBundlePem({ ca: ca1 }));
    const observed = observedWebhookConfiguration({
      metadata: { name: 'rollguard', resourceVersion: '5' },
      webhooks: [
        { name: 'a.rollguard.io', clientConfig: { caBundle: desired } },
        { name: 'b.rollguard.io', clientConfig: { caBundle: b64(ca2.certPem) } },
        { name: 'c.rollguard.io', clientConfig: { url: 'https://x' } },
      ],
    });
    expect(observed?.resourceVersion).toBe('5');
    expect(caBundlePatch(observed!, desired)).toEqual([
      { op: 'add', path: '/webhooks/1/clientConfig/caBundle', value: desired },
      { op: 'add', path: '/webhooks/2/clientConfig/caBundle', value: desired },
    ]);
    expect(caBundlePatch({ resourceVersion: '6', webhooks: [{ name: 'a', caBundle: desired }] }, desired)).toEqual([]);
  });

  it('reads an absent configuration as absent', () => {
    expect(observedWebhookConfiguration(undefined)).toBeUndefined();
  });
});
