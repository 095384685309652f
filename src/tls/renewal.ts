import {
  certificateInfo,
  createCertificateAuthority,
  createSignedCertificate,
  isSignedBy,
  issuedAt,
  DEFAULT_SIGNATURE_DIGEST,
  type CertificateInfo,
  type SignatureDigest,
} from './certificates.js';
import { isCompromiseUnderWay, rotationRequest, ROTATE_ANNOTATION, type RotationRequest } from './rotation-request.js';
import type { CertificateBundle, SecretContents } from './secret-store.js';

/*
 * The renewal policy, pure: when each certificate is due, what a CA rotation does step by step,
 * and the bundle that carries a step out. The rotator (rotator.ts) reads, writes and schedules.
 */

const DAY_SECONDS = 24 * 3600;
/** Long enough that CA rotations, which need an overlap window, are rare; short enough that the path runs in a cluster's life. */
export const DEFAULT_CA_VALIDITY_SECONDS = 3 * 365 * DAY_SECONDS;
/** Short enough that renewal runs every couple of months, so a broken renewal shows up long before the CA's turn. */
export const DEFAULT_SERVING_VALIDITY_SECONDS = 90 * DAY_SECONDS;
/** Renew with a third of the lifetime left: for a 90-day serving certificate that leaves 30 days to notice a failing renewal. */
export const DEFAULT_RENEW_BEFORE_FRACTION = 1 / 3;
/**
 * How long a changed Secret or caBundle takes to reach every replica and the API server. Both travel by watch,
 * normally in well under a second; two minutes also covers a watch reconnecting at its maximum backoff.
 * The new CA is in the caBundle this long before any replica serves from it, and the old one stays this long after.
 */
export const DEFAULT_CA_PROPAGATION_SECONDS = 120;
/** A derived propagation time takes at most a quarter of each window it must fit in twice, leaving half of it spare. */
const PROPAGATION_SHARE_DIVISOR = 4;
/** The serving key signs in every TLS handshake, so it stays at the size every client accepts fast. */
export const DEFAULT_SERVING_KEY_BITS = 2048;
/** The DNS suffix of in-cluster Service names. */
export const DEFAULT_CLUSTER_DOMAIN = 'cluster.local';
/** While a new CA is not yet in the caBundle, look again this often (the injector's events also wake us). */
const BUNDLE_RECHECK_MS = 1_000;

export interface RenewalPolicy {
  serviceName: string;
  namespace: string;
  dnsNames: string[];
  ipAddresses: string[];
  caValiditySeconds: number;
  servingValiditySeconds: number;
  caRenewBeforeSeconds: number;
  servingRenewBeforeSeconds: number;
  caPropagationSeconds: number;
  caKeyBits: number;
  servingKeyBits: number;
  signatureDigest: SignatureDigest;
}

export interface RenewalPolicyOptions {
  serviceName: string;
  namespace: string;
  clusterDomain?: string;
  extraDnsNames?: string[];
  extraIpAddresses?: string[];
  caValiditySeconds?: number;
  servingValiditySeconds?: number;
  /** fraction of a certificate's lifetime left when it is renewed (both CA and serving) */
  renewBeforeFraction?: number;
  /** overrides renewBeforeFraction for the serving certificate */
  renewBeforeSeconds?: number;
  /** overrides renewBeforeFraction for the CA */
  caRenewBeforeSeconds?: number;
  caPropagationSeconds?: number;
  /** key size of the serving key, and of the CA key unless caKeyBits is set */
  keyBits?: number;
  caKeyBits?: number;
  signatureDigest?: SignatureDigest;
}

/** The names a serving certificate must hold for the API server to reach `serviceName` in `namespace`. */
export function servingDnsNames(serviceName: string, namespace: string, clusterDomain = DEFAULT_CLUSTER_DOMAIN): string[] {
  const svc = `${serviceName}.${namespace}.svc`;
  return [svc, `${svc}.${clusterDomain}`];
}

/** Resolves options to a policy, and refuses combinations that would renew in a loop or drop a CA still in use. */
export function renewalPolicy(opts: RenewalPolicyOptions): RenewalPolicy {
  const fraction = opts.renewBeforeFraction ?? DEFAULT_RENEW_BEFORE_FRACTION;
  if (!(fraction > 0 && fraction < 1)) throw new Error(`renewBeforeFraction: expected a number in (0, 1), got ${fraction}`);
  const positive = (field: string, value: number): number => {
    if (!(Number.isFinite(value) && value > 0)) throw new Error(`${field}: expected a positive number, got ${value}`);
    return value;
  };
  const caValiditySeconds = positive('caValiditySeconds', opts.caValiditySeconds ?? DEFAULT_CA_VALIDITY_SECONDS);
  const servingValiditySeconds = positive(
    'servingValiditySeconds',
    opts.servingValiditySeconds ?? DEFAULT_SERVING_VALIDITY_SECONDS,
  );
  const servingRenewBeforeSeconds = positive(
    'renewBeforeSeconds',
    opts.renewBeforeSeconds ?? servingValiditySeconds * fraction,
  );
  const caRenewBeforeSeconds = positive('caRenewBeforeSeconds', opts.caRenewBeforeSeconds ?? caValiditySeconds * fraction);
  // Unless set, the propagation time shrinks to fit short lifetimes (tests, demos); the checks below hold either way,
  // and a derived value of zero or less leaves them to say which lifetimes do not fit.
  const caPropagationSeconds =
    opts.caPropagationSeconds === undefined
      ? Math.min(
          DEFAULT_CA_PROPAGATION_SECONDS,
          servingRenewBeforeSeconds / PROPAGATION_SHARE_DIVISOR,
          (caRenewBeforeSeconds - servingRenewBeforeSeconds) / PROPAGATION_SHARE_DIVISOR,
          (caValiditySeconds - caRenewBeforeSeconds) / PROPAGATION_SHARE_DIVISOR,
        )
      : positive('caPropagationSeconds', opts.caPropagationSeconds);
  if (servingRenewBeforeSeconds >= servingValiditySeconds) {
    throw new Error(
      `renewBeforeSeconds (${servingRenewBeforeSeconds}) must be less than servingValiditySeconds (${servingValiditySeconds}), or every certificate is due at birth`,
    );
  }
  // A serving certificate due during a CA rotation waits out the propagation, and its successor needs as long again to spread.
  if (servingRenewBeforeSeconds <= 2 * Math.max(0, caPropagationSeconds)) {
    throw new Error(
      `the serving renew-before (${servingRenewBeforeSeconds} s) must exceed 2 × caPropagationSeconds (${2 * caPropagationSeconds}), so a renewal that falls into a CA rotation can wait for the new CA to propagate`,
    );
  }
  // After a CA rotation the old CA must outlive both overlap windows, and the serving certificate's renew window must fit.
  const needed = 2 * Math.max(0, caPropagationSeconds) + servingRenewBeforeSeconds;
  if (caRenewBeforeSeconds <= needed) {
    throw new Error(
      `caRenewBeforeSeconds (${caRenewBeforeSeconds}) must exceed 2 × caPropagationSeconds + the serving renew-before (${needed}), so the old CA outlives its rotation`,
    );
  }
  if (caValiditySeconds - caRenewBeforeSeconds <= 2 * Math.max(0, caPropagationSeconds)) {
    throw new Error(
      `caValiditySeconds (${caValiditySeconds}) minus caRenewBeforeSeconds (${caRenewBeforeSeconds}) must exceed 2 × caPropagationSeconds (${2 * caPropagationSeconds}), so one CA rotation ends before the next is due`,
    );
  }
  return {
    serviceName: opts.serviceName,
    namespace: opts.namespace,
    dnsNames: [...servingDnsNames(opts.serviceName, opts.namespace, opts.clusterDomain), ...(opts.extraDnsNames ?? [])],
    ipAddresses: [...(opts.extraIpAddresses ?? [])],
    caValiditySeconds,
    servingValiditySeconds,
    caRenewBeforeSeconds,
    servingRenewBeforeSeconds,
    caPropagationSeconds,
    caKeyBits: opts.caKeyBits ?? opts.keyBits ?? DEFAULT_SERVING_KEY_BITS,
    servingKeyBits: opts.keyBits ?? DEFAULT_SERVING_KEY_BITS,
    signatureDigest: opts.signatureDigest ?? DEFAULT_SIGNATURE_DIGEST,
  };
}

/** When a certificate is to be renewed. */
export function renewalTime(cert: Pick<CertificateInfo, 'notAfter'>, renewBeforeSeconds: number): Date {
  return new Date(cert.notAfter.getTime() - renewBeforeSeconds * 1000);
}

export function renewalDue(cert: Pick<CertificateInfo, 'notAfter'>, now: Date, renewBeforeSeconds: number): boolean {
  return now.getTime() >= renewalTime(cert, renewBeforeSeconds).getTime();
}

/** Names the policy wants that the certificate lacks (e.g. after extraDnsNames changed). */
export function missingNames(cert: Pick<CertificateInfo, 'dnsNames' | 'ipAddresses'>, policy: Pick<RenewalPolicy, 'dnsNames' | 'ipAddresses'>): string[] {
  return [
    ...policy.dnsNames.filter((n) => !cert.dnsNames.includes(n)),
    ...policy.ipAddresses.filter((ip) => !cert.ipAddresses.includes(ip)),
  ];
}

export type RotationAction = 'create' | 'restore' | 'rotate-ca' | 'renew-serving' | 'drop-previous-ca';

/** `requested`: the action carries out the Secret's rollguard.io/rotate request, which the write then removes. */
export type RotationDecision = { action: 'none'; nextCheck: Date } | { action: RotationAction; reason: string; requested?: RotationRequest };

export interface RotationInput {
  /** the Secret as just read */
  stored: SecretContents;
  /** the last valid bundle this replica saw, to put back if the Secret is deleted or spoiled */
  remembered?: CertificateBundle;
  /** whether the caBundle holds a CA; absent when rollguard does not inject one */
  bundleHolds?: (caPem: string) => boolean;
  /** every replica serves the stored serving certificate; looked at only while a compromised CA is being replaced */
  servedEverywhere?: boolean;
  now: Date;
  policy: RenewalPolicy;
}

function iso(d: Date): string {
  return d.toISOString();
}

/**
 * What to do with the certificates now. A CA rotation goes in three steps, each a separate decision:
 * new CA beside the old (both in the caBundle) → serving certificate from the new CA, once the bundle
 * holds it and it had time to propagate → old CA dropped, once the new serving certificate had time to reach every replica.
 */
export function decideRotation(input: RotationInput): RotationDecision {
  const { stored, now, policy } = input;
  const t = now.getTime();
  if (stored.kind !== 'valid') {
    const why = stored.kind === 'absent' ? 'the Secret does not exist' : `the Secret is invalid: ${stored.problem}`;
    const remembered = input.remembered;
    if (remembered && certificateInfo(remembered.ca.certPem).notAfter.getTime() > t) {
      return { action: 'restore', reason: `${why}; writing back the certificates this replica serves` };
    }
    return { action: 'create', reason: why };
  }
  const { bundle } = stored;
  const ca = certificateInfo(bundle.ca.certPem);
  const serving = certificateInfo(bundle.serving.certPem);
  if (ca.notAfter.getTime() <= t) return { action: 'create', reason: `the CA expired at ${iso(ca.notAfter)}` };
  const checks: number[] = [];
  const servingFromCa = isSignedBy(bundle.serving.certPem, bundle.ca.certPem);
  const compromise = isCompromiseUnderWay(stored.annotations);

  // asked for on the Secret; a planned CA rotation asked for while one is under way waits for it to end
  const { request } = rotationRequest(stored.annotations);
  const asked = `asked for by ${ROTATE_ANNOTATION}: ${request}`;
  if (request === 'ca-compromised' && servingFromCa) return { action: 'rotate-ca', reason: asked, requested: request };
  if (request === 'ca' && bundle.previousCaPem === undefined) return { action: 'rotate-ca', reason: asked, requested: request };
  if (request === 'serving' && servingFromCa) return { action: 'renew-serving', reason: asked, requested: request };

  if (bundle.previousCaPem === undefined) {
    const caDue = renewalTime(ca, policy.caRenewBeforeSeconds);
    if (t >= caDue.getTime()) {
      return { action: 'rotate-ca', reason: `the CA expires at ${iso(ca.notAfter)}, renewal was due at ${iso(caDue)}` };
    }
    checks.push(caDue.getTime());
  }

  const servingDue = renewalTime(serving, policy.servingRenewBeforeSeconds);
  if (!isSignedBy(bundle.serving.certPem, bundle.ca.certPem)) {
    // A CA rotation is under way: a serving certificate from the new CA must wait until the caBundle
    // holds that CA everywhere, even when renewal is due, unless waiting longer would let the
    // certificate in use expire before its successor reaches every replica.
    // replacing a compromised CA: its successor serves as soon as the caBundle holds it
    const switchAt = issuedAt(ca).getTime() + (compromise ? 0 : policy.caPropagationSeconds * 1000);
    const lastMoment = serving.notAfter.getTime() - policy.caPropagationSeconds * 1000;
    const inBundle = input.bundleHolds?.(bundle.ca.certPem) ?? true;
    if (t >= switchAt && inBundle) {
      return { action: 'renew-serving', reason: `moving the serving certificate to the CA issued at ${iso(issuedAt(ca))}` };
    }
    if (t >= lastMoment) {
      return {
        action: 'renew-serving',
        reason: `the serving certificate expires at ${iso(serving.notAfter)}; cannot wait longer for the caBundle to hold the new CA`,
      };
    }
    checks.push(t >= switchAt ? t + BUNDLE_RECHECK_MS : switchAt, lastMoment);
    return { action: 'none', nextCheck: new Date(Math.min(...checks)) };
  }

  if (t >= servingDue.getTime()) {
    return {
      action: 'renew-serving',
      reason: `the serving certificate expires at ${iso(serving.notAfter)}, renewal was due at ${iso(servingDue)}`,
    };
  }
  checks.push(servingDue.getTime());
  const missing = missingNames(serving, policy);
  if (missing.length > 0) {
    return { action: 'renew-serving', reason: `the serving certificate lacks ${missing.join(', ')}` };
  }
  if (bundle.previousCaPem !== undefined && compromise) {
    if (input.servedEverywhere === true) {
      return { action: 'drop-previous-ca', reason: 'every replica serves the certificate from the new CA; the compromised CA leaves the caBundle' };
    }
    checks.push(t + BUNDLE_RECHECK_MS);
  } else if (bundle.previousCaPem !== undefined) {
    const dropAt = issuedAt(serving).getTime() + policy.caPropagationSeconds * 1000;
    if (t >= dropAt) {
      return { action: 'drop-previous-ca', reason: `every replica has had ${policy.caPropagationSeconds} s to serve from the new CA` };
    }
    checks.push(dropAt);
  }
  return { action: 'none', nextCheck: new Date(Math.min(...checks)) };
}

/** The bundle that carries out `action`: new keys and certificates where the action needs them, the rest kept. */
export async function nextBundle(
  action: RotationAction,
  input: { stored: SecretContents; remembered?: CertificateBundle; policy: RenewalPolicy; now: Date },
): Promise<CertificateBundle> {
  const { policy, now, stored } = input;
  const newCa = () =>
    createCertificateAuthority({
      // the issue time tells two CAs apart in the caBundle and in logs; forge encodes the name as an
      // ASN.1 PrintableString, whose alphabet lacks '@', and Go refuses a CA whose name breaks it
      commonName: `rollguard-ca-${Math.floor(now.getTime() / 1000)}`,
      validitySeconds: policy.caValiditySeconds,
      keyBits: policy.caKeyBits,
      digest: policy.signatureDigest,
      now,
    });
  const newServing = (ca: CertificateBundle['ca']) => {
    // never outlive the CA: a leaf past its issuer's notAfter fails verification anyway
    const caLeftSeconds = Math.floor((certificateInfo(ca.certPem).notAfter.getTime() - now.getTime()) / 1000);
    return createSignedCertificate(ca, {
      commonName: policy.dnsNames[0] ?? policy.serviceName,
      dnsNames: policy.dnsNames,
      ipAddresses: policy.ipAddresses,
      validitySeconds: Math.max(1, Math.min(policy.servingValiditySeconds, caLeftSeconds)),
      keyBits: policy.servingKeyBits,
      digest: policy.signatureDigest,
      usage: 'server',
      now,
    });
  };
  if (action === 'create') {
    const ca = await newCa();
    return { ca, serving: await newServing(ca) };
  }
  if (action === 'restore') {
    if (!input.remembered) throw new Error('restore decided without a remembered bundle');
    return input.remembered;
  }
  if (stored.kind !== 'valid') throw new Error(`${action} decided on a Secret that is ${stored.kind}`);
  const { bundle } = stored;
  switch (action) {
    case 'rotate-ca':
      return { ca: await newCa(), serving: bundle.serving, previousCaPem: bundle.ca.certPem };
    case 'renew-serving':
      return { ...bundle, serving: await newServing(bundle.ca) };
    case 'drop-previous-ca':
      return { ca: bundle.ca, serving: bundle.serving };
  }
}
