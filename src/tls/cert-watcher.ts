import type { KubeAccess } from '../kube/kube-client.js';
import type { Logger } from 'pino';
import type { Runnable } from '../manager.js';
import { certificateFingerprint, type ServingKeyPair } from './certificates.js';
import { NamedObjectWatch } from './named-object-watch.js';
import { secretContents, servingIssuerPem, type SecretContents } from './secret-store.js';

export interface SecretCertificateWatcherOptions {
  kubeConfig: KubeAccess;
  namespace: string;
  secretName: string;
  logger: Logger;
}

/**
 * Keeps the key pair this replica serves equal to the Secret's. An absent or spoiled Secret does not
 * take the served pair away: the last valid one stays until the rotator has written a good one again.
 */
export class SecretCertificateWatcher implements Runnable {
  readonly name: string;
  private readonly watch: NamedObjectWatch;
  private readonly log: Logger;
  private latest: SecretContents | undefined;
  private served: ServingKeyPair | undefined;
  private readonly contentListeners = new Set<(contents: SecretContents) => void>();
  private readonly changeListeners = new Set<(pair: ServingKeyPair) => void>();

  constructor(opts: SecretCertificateWatcherOptions) {
    this.name = `tls-secret-watcher ${opts.namespace}/${opts.secretName}`;
    this.log = opts.logger.child({ component: 'tls-secret-watcher', secret: `${opts.namespace}/${opts.secretName}` });
    this.watch = new NamedObjectWatch({
      kubeConfig: opts.kubeConfig,
      resource: { group: '', version: 'v1', plural: 'secrets' },
      namespace: opts.namespace,
      name: opts.secretName,
      onObject: (object) => this.observe(secretContents(object)),
      logger: this.log,
    });
  }

  async start(signal: AbortSignal): Promise<void> {
    await this.watch.start(signal);
  }

  stopped(): Promise<void> {
    return this.watch.stopped();
  }

  /** Resolves once the Secret has been listed (it may not exist yet). */
  synced(timeoutMs: number): Promise<void> {
    return this.watch.synced(timeoutMs);
  }

  /** The Secret as last seen; undefined before the first list. */
  contents(): SecretContents | undefined {
    return this.latest;
  }

  current(): ServingKeyPair | undefined {
    return this.served;
  }

  onContents(listener: (contents: SecretContents) => void): () => void {
    this.contentListeners.add(listener);
    return () => this.contentListeners.delete(listener);
  }

  /** Called with the new key pair whenever the served one changes. */
  onChange(listener: (pair: ServingKeyPair) => void): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  private observe(contents: SecretContents): void {
    this.latest = contents;
    if (contents.kind === 'valid') {
      const { serving } = contents.bundle;
      const caPem = servingIssuerPem(contents.bundle);
      const unchanged =
        this.served?.certPem === serving.certPem && this.served.keyPem === serving.keyPem && this.served.caPem === caPem;
      if (!unchanged) {
        this.served = { certPem: serving.certPem, keyPem: serving.keyPem, caPem };
        this.log.info(
          { resourceVersion: contents.resourceVersion, fingerprint: certificateFingerprint(serving.certPem) },
          'serving certificate loaded from the Secret',
        );
        for (const listener of this.changeListeners) listener(this.served);
      }
    } else if (contents.kind === 'invalid') {
      this.log.warn({ problem: contents.problem }, 'the Secret holds no usable certificate; keeping the one served');
    }
    for (const listener of this.contentListeners) listener(contents);
  }
}
