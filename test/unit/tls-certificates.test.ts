import crypto from 'node:crypto';
import forge from 'node-forge';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CLOCK_SKEW_ALLOWANCE_SECONDS,
  certificateInfo,
  certificateNotAfter,
  createCertificateAuthority,
  createSignedCertificate,
  isSignedBy,
  issuedAt,
  keyMatchesCertificate,
  type KeyPairPem,
} from '../../src/tls/certificates.js';
import { nextBundle, renewalPolicy, type RenewalPolicy } from '../../src/tls/renewal.js';
import type { CertificateBundle } from '../../src/tls/secret-store.js';

const NOW = new Date('2030-06-01T12:00:00Z');
const KEY_BITS = 2048;

function signatureAlgorithm(pem: string): string {
  const cert = forge.pki.certificateFromPem(pem);
  return String(forge.pki.oids[cert.siginfo.algorithmOid]);
}

function modulusLength(pem: string): number | undefined {
  return new crypto.X509Certificate(pem).publicKey.asymmetricKeyDetails?.modulusLength;
}

describe('certificates the rotator issues', () => {
  const policy: RenewalPolicy = renewalPolicy({
    serviceName: 'rollguard',
    namespace: 'ops',
    extraDnsNames: ['rollguard.example'],
    extraIpAddresses: ['127.0.0.1', '10.0.0.9'],
    caValiditySeconds: 3600,
    servingValiditySeconds: 600,
    keyBits: KEY_BITS,
    caKeyBits: KEY_BITS,
    caPropagationSeconds: 5,
  });
  let created: CertificateBundle;

  beforeAll(async () => {
    created = await nextBundle('create', { stored: { kind: 'absent' }, policy, now: NOW });
  });

  it('covers <service>.<namespace>.svc, its cluster.local form and every extra name and IP', () => {
    const serving = new crypto.X509Certificate(created.serving.certPem);
    for (const host of ['rollguard.ops.svc', 'rollguard.ops.svc.cluster.local', 'rollguard.example']) {
      expect(serving.checkHost(host), host).toBe(host);
    }
    expect(serving.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(serving.checkIP('10.0.0.9')).toBe('10.0.0.9');
    expect(serving.checkHost('rollguard.other.svc')).toBeUndefined();
    expect(certificateInfo(created.serving.certPem).subject).toBe('rollguard.ops.svc');
  });

  it('is a server certificate signed by a CA certificate', () => {
    const serving = new crypto.X509Certificate(created.serving.certPem);
    const ca = new crypto.X509Certificate(created.ca.certPem);
    expect(ca.ca).toBe(true);
    expect(serving.ca).toBe(false);
    expect(serving.keyUsage).toContain('1.3.6.1.5.5.7.3.1');
    expect(serving.verify(ca.publicKey)).toBe(true);
    expect(isSignedBy(created.serving.certPem, created.ca.certPem)).toBe(true);
    expect(keyMatchesCertificate(created.serving.certPem, created.serving.keyPem)).toBe(true);
    expect(keyMatchesCertificate(created.ca.certPem, created.ca.keyPem)).toBe(true);
    expect(keyMatchesCertificate(created.serving.certPem, created.ca.keyPem)).toBe(false);
  });

  it('has the lifetimes, key sizes and signature algorithm of the policy', () => {
    const serving = certificateInfo(created.serving.certPem);
    const ca = certificateInfo(created.ca.certPem);
    expect(serving.notAfter.getTime()).toBe(NOW.getTime() + 600_000);
    expect(ca.notAfter.getTime()).toBe(NOW.getTime() + 3_600_000);
    expect(serving.notBefore.getTime()).toBe(NOW.getTime() - CLOCK_SKEW_ALLOWANCE_SECONDS * 1000);
    expect(issuedAt(serving)).toEqual(NOW);
    expect(certificateNotAfter(created.serving.certPem)).toEqual(serving.notAfter);
    expect(modulusLength(created.serving.certPem)).toBe(KEY_BITS);
    expect(signatureAlgorithm(created.serving.certPem)).toBe('sha256WithRSAEncryption');
    expect(ca.subject).toBe(`rollguard-ca-${NOW.getTime() / 1000}`);
    // forge writes names as PrintableString, and Go's x509 refuses characters outside its alphabet
    const printable = /^[A-Za-z0-9 '()+,\-./:=?]*$/;
    expect(ca.subject).toMatch(printable);
    expect(serving.subject).toMatch(printable);
  });

  it('signs with another digest and key size when told to', async () => {
    const ca: KeyPairPem = await createCertificateAuthority({
      commonName: 'sha384-ca',
      validitySeconds: 60,
      keyBits: 3072,
      digest: 'sha384',
    });
    expect(signatureAlgorithm(ca.certPem)).toBe('sha384WithRSAEncryption');
    expect(modulusLength(ca.certPem)).toBe(3072);
    // a 3072-bit key in pure JavaScript takes seconds on a loaded machine
  }, 60_000);

  it('never issues a serving certificate that outlives its CA', async () => {
    const late = new Date(NOW.getTime() + 3_300_000); // 300 s of CA life left
    const renewed = await nextBundle('renew-serving', {
      stored: { kind: 'valid', bundle: created, resourceVersion: '1' },
      policy,
      now: late,
    });
    expect(certificateInfo(renewed.serving.certPem).notAfter).toEqual(certificateInfo(created.ca.certPem).notAfter);
    expect(renewed.ca).toEqual(created.ca);
  });

  it('rotates the CA keeping the serving certificate and the old CA beside the new', async () => {
    const rotated = await nextBundle('rotate-ca', {
      stored: { kind: 'valid', bundle: created, resourceVersion: '1' },
      policy,
      now: new Date(NOW.getTime() + 1000),
    });
    expect(rotated.serving).toEqual(created.serving);
    expect(rotated.previousCaPem).toBe(created.ca.certPem);
    expect(rotated.ca.certPem).not.toBe(created.ca.certPem);
    const dropped = await nextBundle('drop-previous-ca', {
      stored: { kind: 'valid', bundle: rotated, resourceVersion: '2' },
      policy,
      now: NOW,
    });
    expect(dropped.previousCaPem).toBeUndefined();
  });
});

describe('reading a certificate without node-forge', () => {
  it('certificateInfo reads what forge reads: names, alt names (IPv6 in its short form), validity, CA flag; isSignedBy checks the signature', async () => {
    const ca = await createCertificateAuthority({ commonName: 'info-ca', validitySeconds: 3600, keyBits: 2048 });
    const leaf = await createSignedCertificate(ca, {
      commonName: 'svc.ns.svc',
      dnsNames: ['svc', 'svc.ns.svc'],
      ipAddresses: ['127.0.0.1', 'fd00::1'],
      usage: 'server',
      validitySeconds: 600,
      keyBits: 2048,
    });
    const info = certificateInfo(leaf.certPem);
    const forged = forge.pki.certificateFromPem(leaf.certPem);
    expect(info).toEqual({
      subject: 'svc.ns.svc',
      issuer: 'info-ca',
      notBefore: forged.validity.notBefore,
      notAfter: forged.validity.notAfter,
      dnsNames: ['svc', 'svc.ns.svc'],
      ipAddresses: ['127.0.0.1', 'fd00::1'],
      isCA: false,
    });
    expect(certificateInfo(ca.certPem).isCA).toBe(true);
    expect(isSignedBy(leaf.certPem, ca.certPem)).toBe(true);
    const other = await createCertificateAuthority({ commonName: 'info-ca', validitySeconds: 3600, keyBits: 2048 });
    expect(isSignedBy(leaf.certPem, other.certPem), 'same issuer name, another key').toBe(false);
    expect(() => certificateInfo('not a certificate')).toThrow();
  });
});
