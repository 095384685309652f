import { admissionregistrationV1, type AdmissionregistrationV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { Logger } from 'pino';
import type { Runnable } from '../manager.js';
import { NamedObjectWatch } from './named-object-watch.js';
import { SingleFlight } from './single-flight.js';
import type { CertificateBundle } from './secret-store.js';
import { isJsonObject } from '../kube/json.js';

const INITIAL_RETRY_MS = 250;
/** A caBundle that cannot be written is retried at least this often; readiness says no meanwhile. */
const MAX_RETRY_MS = 30_000;
const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/g;

export interface ObservedWebhook {
  name: string;
  /** base64 of the PEM bundle, as stored */
  caBundle?: string;
}

export interface ObservedWebhookConfiguration {
  resourceVersion: string;
  webhooks: ObservedWebhook[];
}

export interface JsonPatchOperation {
  op: 'add';
  path: string;
  value: string;
}


/** The caBundle rollguard wants: the current CA, then during a CA rotation the previous one. */
export function caBundlePem(bundle: Pick<CertificateBundle, 'ca' | 'previousCaPem'>): string {
  const pems = [bundle.ca.certPem, ...(bundle.previousCaPem === undefined ? [] : [bundle.previousCaPem])];
  return pems.map((p) => `${p.trim()}\n`).join('');
}

/** The certificates of a PEM bundle, each as its base64 DER without whitespace, for comparing by content. */
export function pemCertificates(pem: string): string[] {
  return [...pem.matchAll(PEM_CERTIFICATE)].map((m) => (m[1] ?? '').replace(/\s+/g, ''));
}

/** True when the base64 caBundle of a webhook holds the CA certificate `caPem`. */
export function bundleHolds(caBundleBase64: string | undefined, caPem: string): boolean {
  if (!caBundleBase64) return false;
  const wanted = pemCertificates(caPem)[0];
  if (wanted === undefined) return false;
  return pemCertificates(Buffer.from(caBundleBase64, 'base64').toString('utf8')).includes(wanted);
}

/** Reads a Mutating- or ValidatingWebhookConfiguration as the API returns it (typed client or raw watch event). */
export function observedWebhookConfiguration(object: unknown): ObservedWebhookConfiguration | undefined {
  if (!isJsonObject(object)) return undefined;
  const metadata = isJsonObject(object.metadata) ? object.metadata : {};
  const webhooks = Array.isArray(object.webhooks) ? object.webhooks : [];
  return {
    resourceVersion: typeof metadata.resourceVersion === 'string' ? metadata.resourceVersion : '',
    webhooks: webhooks.filter(isJsonObject).map((w) => {
      const clientConfig = isJsonObject(w.clientConfig) ? w.clientConfig : {};
      const caBundle = typeof clientConfig.caBundle === 'string' ? clientConfig.caBundle : undefined;
      return { name: typeof w.name === 'string' ? w.name : '', ...(caBundle === undefined ? {} : { caBundle }) };
    }),
  };
}

/**
 * The JSON Patch that sets every webhook's caBundle to `desiredBase64`; empty when all are right.
 * Every entry gets the same value, so a concurrent reorder cannot put a bundle on the wrong entry.
 */
export function caBundlePatch(observed: ObservedWebhookConfiguration, desiredBase64: string): JsonPatchOperation[] {
  return observed.webhooks.flatMap((w, i) =>
    w.caBundle === desiredBase64 ? [] : [{ op: 'add' as const, path: `/webhooks/${i}/clientConfig/caBundle`, value: desiredBase64 }],
  );
}

/** The admission webhook: a MutatingWebhookConfiguration; the eviction guard: a ValidatingWebhookConfiguration. */
export type WebhookConfigurationKind = 'MutatingWebhookConfiguration' | 'ValidatingWebhookConfiguration';

const PLURAL: Record<WebhookConfigurationKind, string> = {
  MutatingWebhookConfiguration: 'mutatingwebhookconfigurations',
  ValidatingWebhookConfiguration: 'validatingwebhookconfigurations',
};

export interface CaBundleInjectorOptions {
  kubeConfig: KubeAccess;
  kind: WebhookConfigurationKind;
  name: string;
  /**
   * Whether the configuration must exist. A required one that is missing holds no CA (not
   * ready); an optional one (the eviction guard's, which an install may leave out) holds every
   * CA while it is absent, once the watch has listed it.
   */
  required: boolean;
  logger: Logger;
}

/**
 * Keeps the caBundle of every webhook of one webhook configuration equal to what the Secret says:
 * watches the configuration and writes it back whenever it differs (after our own rotation or someone's edit).
 */
export class CaBundleInjector implements Runnable {
  readonly name: string;
  private readonly api: AdmissionregistrationV1;
  private readonly watch: NamedObjectWatch;
  private readonly log: Logger;
  private observed: ObservedWebhookConfiguration | undefined;
  private desiredBase64: string | undefined;
  private readonly listeners = new Set<() => void>();
  private readonly syncs: SingleFlight;

  constructor(private readonly opts: CaBundleInjectorOptions) {
    this.name = `ca-bundle-injector ${opts.kind} ${opts.name}`;
    this.log = opts.logger.child({ component: 'ca-bundle-injector', webhookConfiguration: `${opts.kind}/${opts.name}` });
    this.api = admissionregistrationV1(opts.kubeConfig);
    this.watch = new NamedObjectWatch({
      kubeConfig: opts.kubeConfig,
      resource: { group: 'admissionregistration.k8s.io', version: 'v1', plural: PLURAL[opts.kind] },
      name: opts.name,
      onObject: (object) => this.observe(object),
      logger: this.log,
    });
    this.syncs = new SingleFlight({
      run: () => this.syncOnce(),
      failed: (err, retryInMs) => this.log.warn({ err, retryInMs }, 'could not write the caBundle'),
      initialRetryMs: INITIAL_RETRY_MS,
      maxRetryMs: MAX_RETRY_MS,
    });
  }

  async start(signal: AbortSignal): Promise<void> {
    this.syncs.start(signal);
    await this.watch.start(signal);
  }

  async stopped(): Promise<void> {
    await this.watch.stopped();
    await this.syncs.idle();
  }

  /** The bundle every webhook should carry (PEM); written as soon as the configuration is seen. */
  setDesired(bundlePem: string): void {
    const base64 = Buffer.from(bundlePem, 'utf8').toString('base64');
    if (base64 === this.desiredBase64) return;
    this.desiredBase64 = base64;
    this.sync();
  }

  /**
   * True when the caBundle of every webhook of the configuration holds `caPem`; for an optional
   * configuration also when it has been listed and does not exist.
   */
  holds(caPem: string): boolean {
    if (this.observed === undefined) return !this.opts.required && this.watch.isSynced();
    return this.observed.webhooks.every((w) => bundleHolds(w.caBundle, caPem));
  }

  /** Called after every observed change of the configuration. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private observe(object: unknown): void {
    const observed = observedWebhookConfiguration(object);
    if (!observed && this.observed) {
      if (this.opts.required) this.log.warn(`the ${this.opts.kind} is gone; not ready until it is back with our CA`);
      else this.log.info(`the ${this.opts.kind} is gone`);
    }
    this.observed = observed;
    for (const listener of this.listeners) listener();
    this.sync();
  }

  private sync(): void {
    this.syncs.trigger();
  }

  private async syncOnce(): Promise<void> {
    const observed = this.observed;
    const desired = this.desiredBase64;
    if (!observed || desired === undefined) return;
    const patch = caBundlePatch(observed, desired);
    if (patch.length === 0) return;
    const request = { name: this.opts.name, body: patch };
    try {
      if (this.opts.kind === 'MutatingWebhookConfiguration') await this.api.patchMutatingWebhookConfiguration(request);
      else await this.api.patchValidatingWebhookConfiguration(request);
    } catch (err) {
      throw new Error(
        `patching the caBundle of ${patch.length} webhook(s) of ${this.opts.kind} ${this.opts.name} (seen at resourceVersion ${observed.resourceVersion}): ${err instanceof Error ? err.message : String(err)}`,
        { cause: err },
      );
    }
    this.log.info({ webhooks: patch.length, seenResourceVersion: observed.resourceVersion }, `set the caBundle of the ${this.opts.kind}`);
  }
}
