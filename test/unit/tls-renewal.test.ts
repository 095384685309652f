import { beforeAll, describe, expect, it } from 'vitest';
import {
  createCertificateAuthority,
  createSignedCertificate,
  type KeyPairPem,
} from '../../src/tls/certificates.js';
import {
  decideRotation,
  renewalDue,
  renewalPolicy,
  renewalTime,
  type RenewalPolicy,
  type RotationDecision,
  type RotationInput,
} from '../../src/tls/renewal.js';
import { COMPROMISED_CA_ANNOTATION, ROTATE_ANNOTATION, annotationsAfter } from '../../src/tls/rotation-request.js';
import type { CertificateBundle, SecretContents } from '../../src/tls/secret-store.js';

const T0 = Date.parse('2030-01-01T00:00:00Z');
const at = (seconds: number): Date => new Date(T0 + seconds * 1000);
const KEY_BITS = 2048;

// CA 1000 s, serving 100 s, renew at half-life, 10 s propagation
const policy: RenewalPolicy = renewalPolicy({
  serviceName: 'rollguard',
  namespace: 'ops',
  extraIpAddresses: ['127.0.0.1'],
  caValiditySeconds: 1000,
  servingValiditySeconds: 100,
  renewBeforeFraction: 0.5,
  caPropagationSeconds: 10,
});

describe('renewalDue', () => {
  const cert = { notAfter: at(100) };
  it.each([
    [at(49), false],
    [at(50), true],
    [at(150), true],
  ])('at %s with 50 s renew-before: %s', (now, due) => {
    expect(renewalDue(cert, now, 50)).toBe(due);
  });
  it('renews renewBefore seconds ahead of notAfter', () => {
    expect(renewalTime(cert, 50)).toEqual(at(50));
  });
});

describe('renewalPolicy', () => {
  const base = { serviceName: 'rollguard', namespace: 'ops' };
  it('derives names and thresholds', () => {
    expect(policy.dnsNames).toEqual(['rollguard.ops.svc', 'rollguard.ops.svc.cluster.local']);
    expect(policy.ipAddresses).toEqual(['127.0.0.1']);
    expect(policy.servingRenewBeforeSeconds).toBe(50);
    expect(policy.caRenewBeforeSeconds).toBe(500);
  });
  it('keeps defaults that pass its own checks', () => {
    const p = renewalPolicy(base);
    expect(p.servingRenewBeforeSeconds).toBeLessThan(p.servingValiditySeconds);
    expect(p.caKeyBits).toBeGreaterThanOrEqual(p.servingKeyBits);
    expect(p.signatureDigest).toBe('sha256');
  });
  it('fits the derived propagation time into short lifetimes, and keeps the default for long ones', () => {
    expect(renewalPolicy(base).caPropagationSeconds).toBe(120);
    const short = renewalPolicy({ ...base, servingValiditySeconds: 6, caValiditySeconds: 24, renewBeforeFraction: 0.5 });
    expect(short.caPropagationSeconds).toBe(0.75);
  });
  it('sizes the CA key like the serving key unless told otherwise', () => {
    expect(renewalPolicy({ ...base, keyBits: 4096 })).toMatchObject({ servingKeyBits: 4096, caKeyBits: 4096 });
    expect(renewalPolicy({ ...base, keyBits: 2048, caKeyBits: 3072 })).toMatchObject({ servingKeyBits: 2048, caKeyBits: 3072 });
    expect(renewalPolicy(base)).toMatchObject({ servingKeyBits: 2048, caKeyBits: 2048 });
  });
  it.each([
    [{ renewBeforeSeconds: 0 }, /renewBeforeSeconds: expected a positive number, got 0/],
    [{ caValiditySeconds: 100, caRenewBeforeSeconds: 40, servingValiditySeconds: 100, renewBeforeSeconds: 50 }, /caRenewBeforeSeconds \(40\) must exceed/],
    [{ renewBeforeFraction: 1 }, /renewBeforeFraction/],
    [{ renewBeforeFraction: 0 }, /renewBeforeFraction/],
    [{ servingValiditySeconds: -5 }, /servingValiditySeconds: expected a positive number/],
    [{ servingValiditySeconds: 10, renewBeforeSeconds: 10 }, /due at birth/],
    [{ servingValiditySeconds: 60, renewBeforeFraction: 0.5, caPropagationSeconds: 15 }, /serving renew-before \(30 s\) must exceed 2 × caPropagationSeconds/],
    [{ caValiditySeconds: 100, servingValiditySeconds: 60, renewBeforeFraction: 0.5, caPropagationSeconds: 10 }, /caRenewBeforeSeconds \(50\) must exceed/],
    [{ caValiditySeconds: 100, caRenewBeforeSeconds: 97, servingValiditySeconds: 10, renewBeforeSeconds: 5, caPropagationSeconds: 2 }, /one CA rotation ends/],
  ])('refuses %o', (opts, message) => {
    expect(() => renewalPolicy({ ...base, ...opts })).toThrow(message);
  });
});

describe('decideRotation', () => {
  let ca1: KeyPairPem;
  let ca2: KeyPairPem;
  let serving1: KeyPairPem;
  let servingLate: KeyPairPem;
  let servingOnCa2: KeyPairPem;
  let servingWithoutIp: KeyPairPem;

  beforeAll(async () => {
    [ca1, ca2] = await Promise.all([
      createCertificateAuthority({ commonName: 'ca1', validitySeconds: 1000, keyBits: KEY_BITS, now: at(0) }),
      createCertificateAuthority({ commonName: 'ca2', validitySeconds: 1000, keyBits: KEY_BITS, now: at(500) }),
    ]);
    const leaf = (now: Date, ipAddresses = policy.ipAddresses) => ({
      commonName: 'rollguard.ops.svc',
      dnsNames: policy.dnsNames,
      ipAddresses,
      validitySeconds: 100,
      keyBits: KEY_BITS,
      usage: 'server' as const,
      now,
    });
    [serving1, servingLate, servingOnCa2, servingWithoutIp] = await Promise.all([
      createSignedCertificate(ca1, leaf(at(0))),
      createSignedCertificate(ca1, leaf(at(480))),
      createSignedCertificate(ca2, leaf(at(512))),
      createSignedCertificate(ca1, leaf(at(0), [])),
    ]);
  });

  const valid = (bundle: CertificateBundle): SecretContents => ({ kind: 'valid', bundle, resourceVersion: '7' });
  const decide = (input: Partial<RotationInput> & Pick<RotationInput, 'stored' | 'now'>): RotationDecision =>
    decideRotation({ policy, ...input });

  it('creates when the Secret is absent and nothing is remembered', () => {
    expect(decide({ stored: { kind: 'absent' }, now: at(0) })).toMatchObject({ action: 'create' });
  });

  it('writes back what it serves when the Secret is deleted or spoiled', () => {
    const remembered = { ca: ca1, serving: serving1 };
    expect(decide({ stored: { kind: 'absent' }, remembered, now: at(10) })).toMatchObject({ action: 'restore' });
    const spoiled: SecretContents = { kind: 'invalid', problem: 'missing keys tls.key', resourceVersion: '9' };
    expect(decide({ stored: spoiled, remembered, now: at(10) })).toMatchObject({
      action: 'restore',
      reason: expect.stringContaining('missing keys tls.key'),
    });
  });

  it('does not write back a remembered CA that has expired', () => {
    expect(decide({ stored: { kind: 'absent' }, remembered: { ca: ca1, serving: serving1 }, now: at(1000) })).toMatchObject({
      action: 'create',
    });
  });

  it('does nothing for a fresh certificate and says when to look again', () => {
    expect(decide({ stored: valid({ ca: ca1, serving: serving1 }), now: at(10) })).toEqual({ action: 'none', nextCheck: at(50) });
  });

  it('renews the serving certificate at its renew-before point', () => {
    expect(decide({ stored: valid({ ca: ca1, serving: serving1 }), now: at(50) })).toMatchObject({ action: 'renew-serving' });
  });

  it('renews a serving certificate that lacks a wanted name', () => {
    expect(decide({ stored: valid({ ca: ca1, serving: servingWithoutIp }), now: at(10) })).toEqual({
      action: 'renew-serving',
      reason: 'the serving certificate lacks 127.0.0.1',
    });
  });

  it('creates everything anew once the CA has expired', () => {
    expect(decide({ stored: valid({ ca: ca1, serving: servingLate }), now: at(1000) })).toMatchObject({ action: 'create' });
  });

  it('rotates the CA first when both are due', () => {
    expect(decide({ stored: valid({ ca: ca1, serving: servingLate }), now: at(530) })).toMatchObject({ action: 'rotate-ca' });
  });

  describe('during a CA rotation', () => {
    const rotating = (): SecretContents => valid({ ca: ca2, serving: servingLate, previousCaPem: ca1.certPem });
    const holds = (yes: boolean) => () => yes;

    it('keeps serving from the old CA while the new one propagates', () => {
      expect(decide({ stored: rotating(), now: at(505), bundleHolds: holds(true) })).toEqual({ action: 'none', nextCheck: at(510) });
    });

    it('moves the serving certificate to the new CA once propagated and in the bundle', () => {
      expect(decide({ stored: rotating(), now: at(510), bundleHolds: holds(true) })).toMatchObject({
        action: 'renew-serving',
        reason: expect.stringContaining('moving'),
      });
    });

    it('waits while the caBundle lacks the new CA', () => {
      expect(decide({ stored: rotating(), now: at(510), bundleHolds: holds(false) })).toEqual({ action: 'none', nextCheck: at(511) });
    });

    it('holds back a due serving renewal until the new CA is in the bundle', () => {
      // servingLate is due at 530; renewing it from the new CA before the bundle holds that CA would break TLS
      expect(decide({ stored: rotating(), now: at(530), bundleHolds: holds(false) })).toEqual({ action: 'none', nextCheck: at(531) });
      expect(decide({ stored: rotating(), now: at(530), bundleHolds: holds(true) })).toMatchObject({ action: 'renew-serving' });
    });

    it('renews without the bundle once waiting longer would let the certificate expire before its successor spreads', () => {
      // notAfter 580, propagation 10 s: 570 is the last moment
      expect(decide({ stored: rotating(), now: at(569), bundleHolds: holds(false) })).toMatchObject({ action: 'none' });
      expect(decide({ stored: rotating(), now: at(570), bundleHolds: holds(false) })).toMatchObject({
        action: 'renew-serving',
        reason: expect.stringContaining('cannot wait longer'),
      });
    });

    it('moves without a bundle check when rollguard does not inject', () => {
      expect(decide({ stored: rotating(), now: at(510) })).toMatchObject({ action: 'renew-serving' });
    });

    it('keeps the previous CA for the propagation time after the move, then drops it', () => {
      const moved = valid({ ca: ca2, serving: servingOnCa2, previousCaPem: ca1.certPem });
      expect(decide({ stored: moved, now: at(515), bundleHolds: holds(true) })).toEqual({ action: 'none', nextCheck: at(522) });
      expect(decide({ stored: moved, now: at(522), bundleHolds: holds(true) })).toMatchObject({ action: 'drop-previous-ca' });
    });

    it('does not start another CA rotation while one is in progress', () => {
      const moved = valid({ ca: ca2, serving: servingOnCa2, previousCaPem: ca1.certPem });
      const decision = decide({ stored: moved, now: at(515), bundleHolds: holds(true) });
      expect(decision.action).toBe('none');
    });
  });
  describe('on request (rollguard.io/rotate on the Secret)', () => {
    const asked = (bundle: CertificateBundle, annotations: Record<string, string>): SecretContents => ({ kind: 'valid', bundle, resourceVersion: '7', annotations });
    const holds = () => true;

    it.each([
      ['ca', 'rotate-ca'],
      ['ca-compromised', 'rotate-ca'],
      ['serving', 'renew-serving'],
    ])('%s now, whatever the lifetimes left: %s, and the request is carried out', (request, action) => {
      // at 10 s nothing is due
      expect(decide({ stored: valid({ ca: ca1, serving: serving1 }), now: at(10) }).action).toBe('none');
      expect(decide({ stored: asked({ ca: ca1, serving: serving1 }, { [ROTATE_ANNOTATION]: request }), now: at(10) })).toEqual({
        action,
        reason: `asked for by rollguard.io/rotate: ${request}`,
        requested: request,
      });
    });

    it('ignores a value it does not know', () => {
      expect(decide({ stored: asked({ ca: ca1, serving: serving1 }, { [ROTATE_ANNOTATION]: 'everything' }), now: at(10) }).action).toBe('none');
    });

    it('lets a planned CA rotation asked for during one wait for it to end', () => {
      const rotating = asked({ ca: ca2, serving: servingLate, previousCaPem: ca1.certPem }, { [ROTATE_ANNOTATION]: 'ca' });
      expect(decide({ stored: rotating, now: at(505), bundleHolds: holds }).action).toBe('none');
    });

    it('replacing a compromised CA: serves from the new one as soon as the bundle holds it, drops the old one once every replica serves it', () => {
      const marker = { [COMPROMISED_CA_ANNOTATION]: 'true' };
      // the new CA was issued at 500: no propagation wait
      const rotating = asked({ ca: ca2, serving: servingLate, previousCaPem: ca1.certPem }, marker);
      expect(decide({ stored: rotating, now: at(500), bundleHolds: () => false })).toEqual({ action: 'none', nextCheck: at(501) });
      expect(decide({ stored: rotating, now: at(500), bundleHolds: holds })).toMatchObject({ action: 'renew-serving' });
      const moved = asked({ ca: ca2, serving: servingOnCa2, previousCaPem: ca1.certPem }, marker);
      expect(decide({ stored: moved, now: at(513), bundleHolds: holds, servedEverywhere: false })).toEqual({ action: 'none', nextCheck: at(514) });
      expect(decide({ stored: moved, now: at(513), bundleHolds: holds, servedEverywhere: true })).toMatchObject({
        action: 'drop-previous-ca',
        reason: expect.stringContaining('every replica serves the certificate from the new CA'),
      });
    });
  });
});

describe('annotationsAfter', () => {
  it('removes the request it carried out and sets or clears the compromise marker, keeping the rest', () => {
    const before = { [ROTATE_ANNOTATION]: 'ca-compromised', 'example.com/owner': 'ops' };
    expect(annotationsAfter(before, { consumedRequest: true, compromise: 'start' })).toEqual({
      'example.com/owner': 'ops',
      [COMPROMISED_CA_ANNOTATION]: 'true',
    });
    expect(annotationsAfter({ [COMPROMISED_CA_ANNOTATION]: 'true' }, { consumedRequest: false, compromise: 'end' })).toEqual({});
    expect(annotationsAfter(before, { consumedRequest: false, compromise: 'keep' })).toEqual(before);
  });
});
