import { Watch, type KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Runnable } from '../manager.js';

/** First retry after a failed list or watch; doubled on every further failure. */
const INITIAL_BACKOFF_MS = 250;
/** Cap on the retry delay: a watch that is down longer than this is noticed within it once the API is back. */
const MAX_BACKOFF_MS = 30_000;
/**
 * client-node aborts a watch that has been silent for 30 s, so the server is asked to end it
 * a little before that; a clean end is reconnected at once from the last resourceVersion.
 */
const WATCH_TIMEOUT_SECONDS = 25;
/** A watch that ends this soon without an event is treated as a failure, so a server closing at once cannot spin us. */
const MIN_HEALTHY_WATCH_MS = 1_000;
const HTTP_GONE = 410;

export interface ListedObjects {
  items: readonly unknown[];
  resourceVersion: string;
}

export interface NamedObjectWatchOptions {
  kubeConfig: KubeConfig;
  /** Collection path of the object, e.g. /api/v1/namespaces/rollguard/secrets */
  path: string;
  name: string;
  /** Lists the collection restricted by `fieldSelector` (metadata.name=<name>), so RBAC resourceNames suffices. */
  list(fieldSelector: string): Promise<ListedObjects>;
  /** Called with the object whenever it may have changed; undefined when it does not exist. */
  onObject(object: unknown): void;
  logger: Logger;
}

interface WatchOutcome {
  /** resourceVersion to resume from; '' when the server said it is too old (relist) */
  resourceVersion: string;
  sawEvents: boolean;
  error?: unknown;
}

function resourceVersionOf(object: unknown): string | undefined {
  if (typeof object !== 'object' || object === null) return undefined;
  const metadata = (object as { metadata?: unknown }).metadata;
  if (typeof metadata !== 'object' || metadata === null) return undefined;
  const rv = (metadata as { resourceVersion?: unknown }).resourceVersion;
  return typeof rv === 'string' ? rv : undefined;
}

function statusCodeOf(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { statusCode, code } = err as { statusCode?: unknown; code?: unknown };
  if (typeof statusCode === 'number') return statusCode;
  return typeof code === 'number' ? code : undefined;
}

function isWatchTimeout(err: unknown): boolean {
  return err instanceof Error && err.name === 'TimeoutError';
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Keeps one named object observed: list, then watch from the list's resourceVersion,
 * resume after a clean end, relist after 410 Gone, back off after errors.
 * client-node's informer stops for good on an error; this loop never does until aborted.
 */
export class NamedObjectWatch implements Runnable {
  readonly name: string;
  private readonly watch: Watch;
  private loop: Promise<void> = Promise.resolve();
  private syncedOnce = false;
  private readonly syncWaiters: { resolve(): void; reject(err: Error): void }[] = [];
  private lastError: unknown;

  constructor(private readonly opts: NamedObjectWatchOptions) {
    this.name = `watch ${opts.path}/${opts.name}`;
    this.watch = new Watch(opts.kubeConfig);
  }

  /** Resolves once the loop runs; the first list may still be pending (see `synced`). */
  async start(signal: AbortSignal): Promise<void> {
    this.loop = this.run(signal).finally(() => {
      const stoppedEarly = new Error(`stopped before ${this.opts.path}/${this.opts.name} was listed`);
      for (const waiter of this.syncWaiters.splice(0)) waiter.reject(stoppedEarly);
    });
  }

  stopped(): Promise<void> {
    return this.loop;
  }

  /** True once the object has been listed at least once. */
  isSynced(): boolean {
    return this.syncedOnce;
  }

  /** Resolves after the first successful list; rejects after `timeoutMs` with the last error seen. */
  synced(timeoutMs: number): Promise<void> {
    if (this.syncedOnce) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new Error(
            `could not list ${this.opts.path}/${this.opts.name} within ${timeoutMs} ms; last error: ${describeError(this.lastError)}`,
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
    if (this.syncedOnce) return;
    this.syncedOnce = true;
    for (const waiter of this.syncWaiters.splice(0)) waiter.resolve();
  }

  private async run(signal: AbortSignal): Promise<void> {
    const log = this.opts.logger;
    const fieldSelector = `metadata.name=${this.opts.name}`;
    let resourceVersion = '';
    let backoffMs = INITIAL_BACKOFF_MS;
    const failed = async (err: unknown, what: string): Promise<void> => {
      this.lastError = err;
      log.warn({ err, object: `${this.opts.path}/${this.opts.name}`, retryInMs: backoffMs }, `${what} failed`);
      await pause(backoffMs, signal);
      backoffMs = Math.min(backoffMs * 2, MAX_BACKOFF_MS);
    };
    while (!signal.aborted) {
      if (resourceVersion === '') {
        try {
          const listed = await this.opts.list(fieldSelector);
          if (signal.aborted) return;
          this.opts.onObject(listed.items[0]);
          resourceVersion = listed.resourceVersion;
          this.markSynced();
          backoffMs = INITIAL_BACKOFF_MS;
        } catch (err) {
          await failed(err, 'list');
          continue;
        }
      }
      const started = Date.now();
      const outcome = await this.watchOnce(resourceVersion, fieldSelector, signal);
      if (signal.aborted) return;
      resourceVersion = outcome.resourceVersion;
      if (outcome.sawEvents) backoffMs = INITIAL_BACKOFF_MS;
      if (outcome.error !== undefined) {
        await failed(outcome.error, 'watch');
      } else if (!outcome.sawEvents && Date.now() - started < MIN_HEALTHY_WATCH_MS) {
        await failed(new Error('watch ended at once without events'), 'watch');
      }
    }
  }

  private watchOnce(resourceVersion: string, fieldSelector: string, signal: AbortSignal): Promise<WatchOutcome> {
    return new Promise((resolve) => {
      const outcome: WatchOutcome = { resourceVersion, sawEvents: false };
      let controller: AbortController | undefined;
      let finished = false;
      const finish = (): void => {
        if (finished) return;
        finished = true;
        signal.removeEventListener('abort', onAbort);
        controller?.abort();
        resolve(outcome);
      };
      const onAbort = (): void => finish();
      signal.addEventListener('abort', onAbort, { once: true });

      const onEvent = (type: string, object: unknown): void => {
        if (finished) return;
        switch (type) {
          case 'ADDED':
          case 'MODIFIED':
            this.opts.onObject(object);
            break;
          case 'DELETED':
            this.opts.onObject(undefined);
            break;
          case 'BOOKMARK':
            break;
          case 'ERROR':
            // A Status object: 410 means our resourceVersion is compacted away, so relist.
            if (statusCodeOf(object) === HTTP_GONE) outcome.resourceVersion = '';
            else outcome.error = new Error(`watch error event: ${JSON.stringify(object)}`);
            return;
          default:
            return;
        }
        outcome.sawEvents = true;
        outcome.resourceVersion = resourceVersionOf(object) ?? outcome.resourceVersion;
      };
      const onDone = (err: unknown): void => {
        if (err && !isWatchTimeout(err) && !signal.aborted) {
          if (statusCodeOf(err) === HTTP_GONE) outcome.resourceVersion = '';
          else outcome.error ??= err;
        }
        finish();
      };
      this.watch
        .watch(
          this.opts.path,
          {
            fieldSelector,
            resourceVersion,
            allowWatchBookmarks: true,
            timeoutSeconds: WATCH_TIMEOUT_SECONDS,
          },
          onEvent,
          onDone,
        )
        .then(
          (c) => {
            controller = c;
            if (finished) c.abort();
          },
          (err: unknown) => onDone(err ?? new Error('watch could not start')),
        );
    });
  }
}

function describeError(err: unknown): string {
  if (err === undefined) return 'none';
  if (err instanceof Error) return err.message;
  return String(err);
}
