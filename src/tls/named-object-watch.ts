import type { KubeAccess } from '../kube/kube-client.js';
import type { Logger } from 'pino';
import { RawApi } from '../kube/raw-api.js';
import { RETRY_JITTER, Reflector, resourceUrlPath, type ResourcePath } from '../kube/reflector.js';
import type { Runnable } from '../manager.js';

/** First retry after a failed list or watch; doubled on every further failure. */
const RETRY_INITIAL_MS = 250;
/** Longest wait before a retry, jitter included: a watch that is down longer than this is noticed within it once the API is back. */
const RETRY_MAX_WAIT_MS = 30_000;
/**
 * Each watch is asked to end after WATCH_TIMEOUT_SECONDS, and a connection silent for WATCH_IDLE_SLACK_MS
 * past that counts as dead: a rotated certificate must not wait minutes behind a half-open connection.
 */
const WATCH_TIMEOUT_SECONDS = 25;
const WATCH_IDLE_SLACK_MS = 5_000;
const JSON_ACCEPT = 'application/json';

export interface NamedObjectWatchOptions {
  kubeConfig: KubeAccess;
  resource: ResourcePath;
  /** undefined for a cluster-scoped resource */
  namespace?: string;
  name: string;
  /** Called with the object whenever it may have changed; undefined when it does not exist. */
  onObject(object: unknown): void;
  logger: Logger;
}

/**
 * Keeps one named object observed: the reflector's list/watch narrowed by `metadata.name=<name>`
 * (so RBAC resourceNames suffices), whose store is just the one object handed to `onObject`.
 */
export class NamedObjectWatch implements Runnable {
  readonly name: string;
  private readonly what: string;
  private readonly reflector: Reflector<unknown>;
  private loop: Promise<void> = Promise.resolve();
  private readonly syncWaiters: { resolve(): void; reject(err: Error): void }[] = [];

  constructor(opts: NamedObjectWatchOptions) {
    this.what = `${resourceUrlPath(opts.resource, opts.namespace)}/${opts.name}`;
    this.name = `watch ${this.what}`;
    this.reflector = new Reflector<unknown>({
      api: new RawApi(opts.kubeConfig),
      resource: opts.resource,
      namespace: opts.namespace,
      fieldSelector: `metadata.name=${opts.name}`,
      accept: { list: JSON_ACCEPT, watch: JSON_ACCEPT },
      decode: (raw) => raw,
      store: {
        replace: (items) => opts.onObject(items[0]),
        upsert: (item) => opts.onObject(item),
        remove: () => opts.onObject(undefined),
      },
      logger: opts.logger,
      onSynced: () => this.markSynced(),
      retryInitialMs: RETRY_INITIAL_MS,
      retryMaxMs: Math.floor(RETRY_MAX_WAIT_MS / (1 + RETRY_JITTER)),
      watchTimeoutSeconds: WATCH_TIMEOUT_SECONDS,
      watchIdleSlackMs: WATCH_IDLE_SLACK_MS,
    });
  }

  /** Resolves once the loop runs; the first list may still be pending (see `synced`). */
  async start(signal: AbortSignal): Promise<void> {
    this.reflector.start(signal);
    this.loop = this.reflector.stopped().finally(() => {
      const stoppedEarly = new Error(`stopped before ${this.what} was listed`);
      for (const waiter of this.syncWaiters.splice(0)) waiter.reject(stoppedEarly);
    });
  }

  stopped(): Promise<void> {
    return this.loop;
  }

  /** True once the object has been listed at least once. */
  isSynced(): boolean {
    return this.reflector.synced();
  }

  /** Resolves after the first successful list; rejects after `timeoutMs` with the last error seen. */
  synced(timeoutMs: number): Promise<void> {
    if (this.reflector.synced()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new Error(
            `could not list ${this.what} within ${timeoutMs} ms; last error: ${describeError(this.reflector.lastError())}`,
          ),
        );
      }, timeoutMs);
      this.syncWaiters.push({
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      });
    });
  }

  private markSynced(): void {
    for (const waiter of this.syncWaiters.splice(0)) waiter.resolve();
  }
}

function describeError(err: unknown): string {
  if (err === undefined) return 'none';
  if (err instanceof Error) return err.message;
  return String(err);
}
