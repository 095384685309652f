import { coreV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { Logger } from 'pino';
import type { Runnable } from '../manager.js';
import type { Metrics } from '../metrics.js';
import { CaBundleInjector, caBundlePem } from './ca-bundle.js';
import { SecretCertificateWatcher } from './cert-watcher.js';
import { certificateInfo, certificateNotAfter, type ServingKeyPair } from './certificates.js';
import { FileCertificateSource } from './file-source.js';
import { renewalPolicy, type RenewalPolicyOptions } from './renewal.js';
import { CertificateRotator } from './rotator.js';
import { SecretStore, type SecretContents } from './secret-store.js';
import { servedByEveryEndpoint } from './served-certificate.js';
import type { EventRecorder } from '../kube/events.js';

/** How long start() waits for the API server to let us read and, if need be, write the Secret. */
const STARTUP_TIMEOUT_MS = 60_000;
const STARTUP_RETRY_MS = 500;

export interface CertificateStatus {
  /** notAfter of the serving certificate in use */
  notAfter?: string;
  /** notAfter of the current CA, when rollguard manages it */
  caNotAfter?: string;
  source: 'self-managed' | 'files';
}

/** Where the webhook server gets its key pair; a Runnable that keeps it current. */
export interface CertificateSource extends Runnable {
  current(): ServingKeyPair | undefined;
  /** Called with the new pair whenever it changes; returns an unsubscribe function. */
  onChange(listener: (pair: ServingKeyPair) => void): () => void;
  /** A certificate is loaded and, when rollguard injects the caBundle, the bundle holds the CA that signed it. */
  ready(): boolean;
  status(): CertificateStatus;
}

/** The renewal policy's options (names, lifetimes, key sizes), with the Secret and the injection target. */
export interface CertificateSourceOptions extends Omit<RenewalPolicyOptions, 'serviceName' | 'namespace'> {
  logger: Logger;
  metrics: Metrics;
  /** Bring your own key pair (e.g. cert-manager): both set disables self-management. */
  tlsCertFile?: string;
  tlsKeyFile?: string;
  fileCheckIntervalMs?: number;

  kubeConfig?: KubeAccess;
  /** rollguard's namespace, where the Secret lives and the Service is */
  namespace?: string;
  secretName?: string;
  serviceName?: string;
  /** MutatingWebhookConfiguration whose caBundle rollguard keeps; absent: no injection, readiness does not wait for it */
  webhookConfigurationName?: string;
  /** ValidatingWebhookConfiguration of the eviction guard whose caBundle rollguard keeps when it exists; absent: no injection */
  evictionWebhookConfigurationName?: string;
  /** Records every rotation as an Event on the Secret; absent: none is recorded. */
  events?: Pick<EventRecorder, 'record'>;
}

export function createCertificateSource(opts: CertificateSourceOptions): CertificateSource {
  if (opts.tlsCertFile !== undefined || opts.tlsKeyFile !== undefined) {
    if (!opts.tlsCertFile || !opts.tlsKeyFile) {
      throw new Error(
        `tlsCertFile and tlsKeyFile go together (got tlsCertFile=${opts.tlsCertFile ?? 'unset'}, tlsKeyFile=${opts.tlsKeyFile ?? 'unset'})`,
      );
    }
    return new FilesSource(opts, opts.tlsCertFile, opts.tlsKeyFile);
  }
  const missing = (['kubeConfig', 'namespace', 'secretName', 'serviceName'] as const).filter((k) => !opts[k]);
  if (missing.length > 0) {
    throw new Error(`self-managed certificates need ${missing.join(', ')} (or tlsCertFile and tlsKeyFile to bring your own)`);
  }
  return new SelfManagedSource(opts as SelfManagedOptions);
}

type SelfManagedOptions = CertificateSourceOptions &
  Required<Pick<CertificateSourceOptions, 'kubeConfig' | 'namespace' | 'secretName' | 'serviceName'>>;

function recordExpiry(metrics: Metrics, certificate: 'serving' | 'ca', notAfter: Date): void {
  metrics.certificateExpiry.set({ certificate }, notAfter.getTime() / 1000);
}

class FilesSource implements CertificateSource {
  readonly name = 'certificates (files)';
  private readonly files: FileCertificateSource;

  constructor(opts: CertificateSourceOptions, certFile: string, keyFile: string) {
    this.files = new FileCertificateSource({
      certFile,
      keyFile,
      checkIntervalMs: opts.fileCheckIntervalMs,
      logger: opts.logger,
    });
    this.files.onChange((pair) => recordExpiry(opts.metrics, 'serving', certificateNotAfter(pair.certPem)));
  }

  start(signal: AbortSignal): Promise<void> {
    return this.files.start(signal);
  }

  stopped(): Promise<void> {
    return this.files.stopped();
  }

  current(): ServingKeyPair | undefined {
    return this.files.current();
  }

  onChange(listener: (pair: ServingKeyPair) => void): () => void {
    return this.files.onChange(listener);
  }

  ready(): boolean {
    return this.files.current() !== undefined;
  }

  status(): CertificateStatus {
    const pair = this.files.current();
    return { source: 'files', ...(pair ? { notAfter: certificateNotAfter(pair.certPem).toISOString() } : {}) };
  }
}

/**
 * CA and serving certificate kept in a Secret: the watcher serves what the Secret holds, the rotator
 * renews it, the injector puts its CA into the webhook configuration.
 */
class SelfManagedSource implements CertificateSource {
  readonly name: string;
  private readonly log: Logger;
  private readonly watcher: SecretCertificateWatcher;
  private readonly store: SecretStore;
  private readonly rotator: CertificateRotator;
  /** the webhook configurations whose caBundle rollguard keeps; none: readiness and rotations wait for none */
  private readonly injectors: CaBundleInjector[] = [];
  private parts: Runnable[] = [];

  constructor(private readonly opts: SelfManagedOptions) {
    this.name = `certificates (Secret ${opts.namespace}/${opts.secretName})`;
    this.log = opts.logger.child({ component: 'certificates' });
    const policy = renewalPolicy(opts);
    this.store = new SecretStore(coreV1(opts.kubeConfig), opts.namespace, opts.secretName);
    this.watcher = new SecretCertificateWatcher({
      kubeConfig: opts.kubeConfig,
      namespace: opts.namespace,
      secretName: opts.secretName,
      logger: opts.logger,
    });
    const targets = [
      { kind: 'MutatingWebhookConfiguration' as const, name: opts.webhookConfigurationName, required: true },
      { kind: 'ValidatingWebhookConfiguration' as const, name: opts.evictionWebhookConfigurationName, required: false },
    ];
    for (const { kind, name, required } of targets) {
      if (name) this.injectors.push(new CaBundleInjector({ kubeConfig: opts.kubeConfig, kind, name, required, logger: opts.logger }));
    }
    const injectors = this.injectors;
    this.rotator = new CertificateRotator({
      store: this.store,
      policy,
      logger: opts.logger,
      metrics: opts.metrics,
      bundleHolds: injectors.length > 0 ? (caPem) => injectors.every((i) => i.holds(caPem)) : undefined,
      servedEverywhere: servedByEveryEndpoint({
        kubeConfig: opts.kubeConfig,
        namespace: opts.namespace,
        serviceName: policy.serviceName,
        serverName: `${policy.serviceName}.${opts.namespace}.svc`,
      }),
      events: opts.events,
    });
    this.watcher.onContents((contents) => this.onSecret(contents));
    this.watcher.onChange((pair) => recordExpiry(opts.metrics, 'serving', certificateInfo(pair.certPem).notAfter));
    for (const injector of injectors) injector.onChange(() => this.rotator.trigger());
  }

  async start(signal: AbortSignal): Promise<void> {
    // monotonic, as the timer that ends the wait for the first certificate is
    const deadline = performance.now() + STARTUP_TIMEOUT_MS;
    await this.watcher.start(signal);
    this.parts = [this.watcher];
    await this.watcher.synced(STARTUP_TIMEOUT_MS);
    // create or renew before serving, so a replica never starts with a missing or expired certificate
    for (;;) {
      try {
        await this.rotator.reconcile();
        break;
      } catch (err) {
        if (performance.now() >= deadline || signal.aborted) {
          throw new Error(`preparing the certificates in ${this.store.describe()} failed: ${err instanceof Error ? err.message : String(err)}`, {
            cause: err,
          });
        }
        this.log.warn({ err }, 'preparing the certificates failed; retrying');
        await new Promise((r) => setTimeout(r, STARTUP_RETRY_MS));
      }
    }
    await this.firstCertificate(deadline, signal);
    for (const injector of this.injectors) {
      await injector.start(signal);
      this.parts.push(injector);
    }
    await this.rotator.start(signal);
    this.parts.push(this.rotator);
  }

  async stopped(): Promise<void> {
    await Promise.all(this.parts.map((p) => p.stopped()));
  }

  /** The watch brings what we, or the winner of a race, wrote. */
  private firstCertificate(deadline: number, signal: AbortSignal): Promise<void> {
    if (this.watcher.current()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const settle = (err?: Error): void => {
        clearTimeout(timer);
        unsubscribe();
        signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const onAbort = (): void => settle(new Error(`stopped while waiting for a certificate from ${this.store.describe()}`));
      const timer = setTimeout(
        () => settle(new Error(`no valid certificate arrived through the watch of ${this.store.describe()} before the startup deadline`)),
        Math.max(0, deadline - performance.now()),
      );
      const unsubscribe = this.watcher.onChange(() => settle());
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  current(): ServingKeyPair | undefined {
    return this.watcher.current();
  }

  onChange(listener: (pair: ServingKeyPair) => void): () => void {
    return this.watcher.onChange(listener);
  }

  ready(): boolean {
    const pair = this.watcher.current();
    if (!pair) return false;
    const caPem = pair.caPem;
    return this.injectors.every((i) => caPem !== undefined && i.holds(caPem));
  }

  status(): CertificateStatus {
    const pair = this.watcher.current();
    const contents = this.watcher.contents();
    return {
      source: 'self-managed',
      ...(pair ? { notAfter: certificateInfo(pair.certPem).notAfter.toISOString() } : {}),
      ...(contents?.kind === 'valid' ? { caNotAfter: certificateInfo(contents.bundle.ca.certPem).notAfter.toISOString() } : {}),
    };
  }

  private onSecret(contents: SecretContents): void {
    if (contents.kind === 'valid') {
      for (const injector of this.injectors) injector.setDesired(caBundlePem(contents.bundle));
      recordExpiry(this.opts.metrics, 'ca', certificateInfo(contents.bundle.ca.certPem).notAfter);
    }
    this.rotator.trigger();
  }
}
