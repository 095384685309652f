import type { V1Secret } from '@kubernetes/client-node';
import type { CoreV1 } from '../kube/api-clients.js';
import { certificateInfo, isSignedBy, keyMatchesCertificate, type KeyPairPem } from './certificates.js';
import { isJsonObject } from '../kube/json.js';
import { statusCode } from '../kube/api-status.js';

/** The Secret type a TLS key pair is kept in; its tls.crt and tls.key are what other tools expect. */
export const SECRET_TYPE = 'kubernetes.io/tls';
export const SECRET_KEYS = {
  cert: 'tls.crt',
  key: 'tls.key',
  caCert: 'ca.crt',
  caKey: 'ca.key',
  /** the CA before the last CA rotation, kept in the caBundle until every replica serves from the new one */
  previousCaCert: 'ca-previous.crt',
} as const;
const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
const MANAGED_BY = 'rollguard';
const HTTP_NOT_FOUND = 404;
const HTTP_CONFLICT = 409;

export interface CertificateBundle {
  ca: KeyPairPem;
  serving: KeyPairPem;
  previousCaPem?: string;
}

interface SecretMetadata {
  resourceVersion: string;
  uid?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** What the Secret holds, as far as rollguard is concerned. */
export type SecretContents =
  | { kind: 'absent' }
  | ({ kind: 'invalid'; problem: string } & SecretMetadata)
  | ({ kind: 'valid'; bundle: CertificateBundle } & SecretMetadata);

export interface WriteResult {
  /** 'conflict': someone else wrote first; `contents` is theirs, read back */
  outcome: 'written' | 'conflict';
  contents: SecretContents;
}


function stringMap(value: unknown): Record<string, string> | undefined {
  if (!isJsonObject(value)) return undefined;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) if (typeof v === 'string') out[k] = v;
  return out;
}

/** Why the bundle cannot be served, or undefined when it can. */
export function bundleProblem(bundle: CertificateBundle): string | undefined {
  const parse = (what: string, pem: string): string | undefined => {
    try {
      certificateInfo(pem);
      return undefined;
    } catch (err) {
      return `${what} is not a PEM certificate (${err instanceof Error ? err.message : String(err)})`;
    }
  };
  const unparsable =
    parse(SECRET_KEYS.caCert, bundle.ca.certPem) ??
    parse(SECRET_KEYS.cert, bundle.serving.certPem) ??
    (bundle.previousCaPem === undefined ? undefined : parse(SECRET_KEYS.previousCaCert, bundle.previousCaPem));
  if (unparsable) return unparsable;
  if (!certificateInfo(bundle.ca.certPem).isCA) return `${SECRET_KEYS.caCert} is not a CA certificate`;
  if (!keyMatchesCertificate(bundle.ca.certPem, bundle.ca.keyPem)) {
    return `${SECRET_KEYS.caKey} is not the key of ${SECRET_KEYS.caCert}`;
  }
  if (!keyMatchesCertificate(bundle.serving.certPem, bundle.serving.keyPem)) {
    return `${SECRET_KEYS.key} is not the key of ${SECRET_KEYS.cert}`;
  }
  const signedByCa = isSignedBy(bundle.serving.certPem, bundle.ca.certPem);
  const signedByPrevious = bundle.previousCaPem !== undefined && isSignedBy(bundle.serving.certPem, bundle.previousCaPem);
  if (!signedByCa && !signedByPrevious) {
    return `${SECRET_KEYS.cert} is signed by neither ${SECRET_KEYS.caCert} nor ${SECRET_KEYS.previousCaCert}`;
  }
  return undefined;
}

/** The CA that signed the serving certificate of a valid bundle: the current one, or during a CA rotation the previous. */
export function servingIssuerPem(bundle: CertificateBundle): string {
  if (bundle.previousCaPem !== undefined && !isSignedBy(bundle.serving.certPem, bundle.ca.certPem)) {
    return bundle.previousCaPem;
  }
  return bundle.ca.certPem;
}

/**
 * Reads a Secret as the API returns it (typed client or raw watch event; `data` is base64 either way).
 * Pure: unit-testable with plain objects.
 */
export function secretContents(secret: unknown): SecretContents {
  if (!isJsonObject(secret)) return { kind: 'absent' };
  const metadata = isJsonObject(secret.metadata) ? secret.metadata : {};
  const meta: SecretMetadata = {
    resourceVersion: typeof metadata.resourceVersion === 'string' ? metadata.resourceVersion : '',
    ...(typeof metadata.uid === 'string' ? { uid: metadata.uid } : {}),
    labels: stringMap(metadata.labels),
    annotations: stringMap(metadata.annotations),
  };
  const data = stringMap(secret.data) ?? {};
  const decoded = (key: string): string | undefined => {
    const value = data[key];
    return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
  };
  const missing = [SECRET_KEYS.cert, SECRET_KEYS.key, SECRET_KEYS.caCert, SECRET_KEYS.caKey].filter((k) => !decoded(k));
  if (missing.length > 0) return { kind: 'invalid', problem: `missing keys ${missing.join(', ')}`, ...meta };
  const bundle: CertificateBundle = {
    ca: { certPem: decoded(SECRET_KEYS.caCert)!, keyPem: decoded(SECRET_KEYS.caKey)! },
    serving: { certPem: decoded(SECRET_KEYS.cert)!, keyPem: decoded(SECRET_KEYS.key)! },
  };
  const previous = decoded(SECRET_KEYS.previousCaCert);
  if (previous) bundle.previousCaPem = previous;
  const problem = bundleProblem(bundle);
  if (problem) return { kind: 'invalid', problem, ...meta };
  return { kind: 'valid', bundle, ...meta };
}

function secretData(bundle: CertificateBundle): Record<string, string> {
  const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');
  const data: Record<string, string> = {
    [SECRET_KEYS.cert]: b64(bundle.serving.certPem),
    [SECRET_KEYS.key]: b64(bundle.serving.keyPem),
    [SECRET_KEYS.caCert]: b64(bundle.ca.certPem),
    [SECRET_KEYS.caKey]: b64(bundle.ca.keyPem),
  };
  if (bundle.previousCaPem !== undefined) data[SECRET_KEYS.previousCaCert] = b64(bundle.previousCaPem);
  return data;
}

function apiCode(err: unknown): number | undefined {
  return statusCode(err);
}

/**
 * The one Secret that holds the CA and serving certificate. Writes are optimistic:
 * a create that finds the Secret there, or a replace at a stale resourceVersion,
 * returns what the winner wrote instead, so every replica adopts the same certificate.
 */
export class SecretStore {
  constructor(
    private readonly core: CoreV1,
    readonly namespace: string,
    readonly name: string,
  ) {}

  get path(): string {
    return `/api/v1/namespaces/${this.namespace}/secrets`;
  }

  describe(): string {
    return `Secret ${this.namespace}/${this.name}`;
  }

  async read(): Promise<SecretContents> {
    try {
      return secretContents(await this.core.readNamespacedSecret({ name: this.name, namespace: this.namespace }));
    } catch (err) {
      if (apiCode(err) === HTTP_NOT_FOUND) return { kind: 'absent' };
      throw new Error(`reading ${this.describe()}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  /**
   * Writes `bundle` over `expected` (what the caller read), with `annotations` when given (else
   * those read); on a lost race returns the winner's contents.
   */
  async write(bundle: CertificateBundle, expected: SecretContents, annotations?: Record<string, string>): Promise<WriteResult> {
    const labels = { ...(expected.kind === 'absent' ? {} : expected.labels), [MANAGED_BY_LABEL]: MANAGED_BY };
    const body: V1Secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: this.name,
        namespace: this.namespace,
        labels,
        annotations: expected.kind === 'absent' ? undefined : (annotations ?? expected.annotations),
      },
      type: SECRET_TYPE,
      data: secretData(bundle),
    };
    try {
      const written =
        expected.kind === 'absent'
          ? await this.core.createNamespacedSecret({ namespace: this.namespace, body })
          : await this.core.replaceNamespacedSecret({
              name: this.name,
              namespace: this.namespace,
              body: { ...body, metadata: { ...body.metadata, resourceVersion: expected.resourceVersion } },
            });
      return { outcome: 'written', contents: secretContents(written) };
    } catch (err) {
      const code = apiCode(err);
      // 409: created meanwhile, or replaced at a newer resourceVersion; 404: deleted since we read it
      if (code === HTTP_CONFLICT || code === HTTP_NOT_FOUND) return { outcome: 'conflict', contents: await this.read() };
      const verb = expected.kind === 'absent' ? 'creating' : `replacing (resourceVersion ${expected.resourceVersion})`;
      throw new Error(`${verb} ${this.describe()}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }
}
