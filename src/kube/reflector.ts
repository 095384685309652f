import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import { abortableDelay } from './abortable-delay.js';
import { ApiStatusError, isResourceExpired, type RawGet } from './raw-api.js';

/** Items per list page: bounds the memory a list of 20,000 objects takes while it is parsed. */
const LIST_PAGE_SIZE = 500;
/** One list page that takes longer than this is stuck (a half-open connection); it is retried. */
const LIST_PAGE_TIMEOUT_MS = 60_000;
/**
 * A watch is asked to end after 5 to 10 minutes, spread so that many watches do not reconnect
 * together (client-go does the same); it resumes from the last resourceVersion.
 */
const WATCH_TIMEOUT_MIN_SECONDS = 300;
const WATCH_TIMEOUT_SPREAD_SECONDS = 300;
/**
 * Without bookmarks a quiet watch may be silent until the API server ends it at its
 * timeoutSeconds; silence past that (plus slack) means the connection is dead.
 */
const WATCH_IDLE_SLACK_MS = 30_000;
/**
 * With bookmarks the API server sends one about once a minute on every watch (its watch cache
 * does; a server with the watch cache off sends none): two intervals of silence mean dead.
 */
export const DEFAULT_WATCH_IDLE_TIMEOUT_MS = 2 * 60_000;
/** A watch that ends sooner than this without a single event counts as a failure, so it cannot spin. */
const WATCH_MIN_HEALTHY_MS = 1_000;
/** Retry delays after a failed list or watch: doubled per failure, capped, with jitter. */
export const RETRY_INITIAL_MS = 800;
export const RETRY_MAX_MS = 30_000;
export const RETRY_JITTER = 0.2;

export interface ResourcePath {
  /** '' for the core group. */
  group: string;
  version: string;
  plural: string;
}

/** Where a reflector puts what it lists and watches. */
export interface ReflectorStore<T> {
  /** A fresh full list of the reflector's scope (a namespace, or all when undefined). */
  replace(items: T[], namespace: string | undefined): void;
  upsert(item: T): void;
  remove(item: T): void;
}

/** The two calls a reflector makes; RawApi in the product. */
export interface ListWatchClient {
  getJson(req: RawGet): Promise<unknown>;
  /** The open response body, for a watch. */
  open(req: RawGet): Promise<Readable>;
}

export interface ReflectorOptions<T> {
  api: ListWatchClient;
  resource: ResourcePath;
  /** undefined: all namespaces. */
  namespace?: string;
  labelSelector?: string;
  /** e.g. `metadata.name=<name>`: RBAC with resourceNames allows a list/watch narrowed to that name. */
  fieldSelector?: string;
  accept: { list: string; watch: string };
  /** From the wire object to what the store keeps; throws, naming the object, when it cannot. */
  decode(raw: unknown): T;
  store: ReflectorStore<T>;
  logger: Logger;
  /** Called once, after the first full list is in the store. */
  onSynced?: () => void;
  /** Retry delays other than RETRY_INITIAL_MS and RETRY_MAX_MS (tests, a watch that must recover sooner). */
  retryInitialMs?: number;
  retryMaxMs?: number;
  /** A fixed watch timeout instead of the spread 5 to 10 minutes, for a watch that must notice a dead connection sooner. */
  watchTimeoutSeconds?: number;
  /** Silence allowed past the watch timeout before the connection counts as dead, on a server that sends no bookmarks. */
  watchIdleSlackMs?: number;
  /** Silence that marks a watch dead once the server has shown it sends bookmarks. */
  watchIdleTimeoutMs?: number;
}

/**
 * How long a watch may stay silent before it counts as dead: two bookmark intervals once the
 * server has sent a bookmark, else until the server would have ended it (plus slack), so that a
 * server that sends no bookmarks does not make every quiet watch look dead.
 */
export function watchIdleLimitMs(opts: { bookmarksSeen: boolean; timeoutSeconds: number; slackMs: number; idleTimeoutMs: number }): number {
  const untilServerEnds = opts.timeoutSeconds * 1000 + opts.slackMs;
  return opts.bookmarksSeen ? Math.min(opts.idleTimeoutMs, untilServerEnds) : untilServerEnds;
}

/** The delay before retry number `failures` (1-based). */
export function retryDelayMs(failures: number, initialMs = RETRY_INITIAL_MS, maxMs = RETRY_MAX_MS, random = Math.random): number {
  const base = Math.min(maxMs, initialMs * 2 ** Math.max(0, failures - 1));
  return Math.round(base * (1 + RETRY_JITTER * random()));
}

export function resourceUrlPath(resource: ResourcePath, namespace: string | undefined): string {
  const root = resource.group === '' ? `/api/${resource.version}` : `/apis/${resource.group}/${resource.version}`;
  return namespace === undefined
    ? `${root}/${resource.plural}`
    : `${root}/namespaces/${encodeURIComponent(namespace)}/${resource.plural}`;
}

/** The resourceVersion of a wire object, which is how far the reflector has got. */
function resourceVersionOf(raw: unknown): string {
  const rv = (raw as { metadata?: { resourceVersion?: unknown } } | null)?.metadata?.resourceVersion;
  return typeof rv === 'string' ? rv : '';
}

function describeObject(raw: unknown): string {
  const meta = (raw as { metadata?: { namespace?: unknown; name?: unknown } } | null)?.metadata;
  return `${String(meta?.namespace ?? '')}/${String(meta?.name ?? '?')}`;
}

class WatchIdleError extends Error {}

/**
 * List, then watch from the list's resourceVersion, forever: resumes from the last
 * resourceVersion seen (bookmarks included) after a watch ends, relists on 410 Gone,
 * and retries any other failure with capped exponential backoff.
 */
export class Reflector<T> {
  private lastResourceVersion = '';
  private listed = false;
  private bookmarksSeen = false;
  private lastEventAt = 0;
  private running: Promise<void> | undefined;
  private active = false;
  private latestError: unknown;
  private readonly what: string;

  constructor(private readonly opts: ReflectorOptions<T>) {
    const scope = opts.namespace === undefined ? '' : ` in namespace ${opts.namespace}`;
    this.what = `${opts.resource.plural}${scope}${opts.fieldSelector ? ` (${opts.fieldSelector})` : ''}`;
  }

  /** True once the first full list is in the store. */
  synced(): boolean {
    return this.listed;
  }

  /** The newest resourceVersion the store reflects (from a list, an event or a bookmark). */
  resourceVersion(): string {
    return this.lastResourceVersion;
  }

  /** When the last list, event or bookmark arrived (ms since the epoch); 0 before the first list. */
  lastEventTime(): number {
    return this.lastEventAt;
  }

  /** The error of the latest failed list or watch, for telling why it has not synced; undefined before any failed. */
  lastError(): unknown {
    return this.latestError;
  }

  /** Starts the loop unless it runs; after a stop it resumes from the last resourceVersion. */
  start(signal: AbortSignal): void {
    if (this.active) return;
    this.active = true;
    this.running = this.run(signal).finally(() => {
      this.active = false;
    });
  }

  /** Resolves once the loop has ended after the signal fired. */
  async stopped(): Promise<void> {
    await this.running;
  }

  private async run(signal: AbortSignal): Promise<void> {
    const log = this.opts.logger;
    let failures = 0;
    let listedAt = 0;
    while (!signal.aborted) {
      try {
        if (!this.lastResourceVersion) {
          await this.list(signal);
          listedAt = Date.now();
          failures = 0;
        }
        const started = Date.now();
        const events = await this.watch(signal);
        if (events > 0) failures = 0;
        else if (Date.now() - started < WATCH_MIN_HEALTHY_MS) throw new Error(`watch of ${this.what} ended at once`);
      } catch (err) {
        if (signal.aborted) break;
        this.latestError = err;
        // Relist at once, unless a fresh list expired already: then something is off, and it waits like any failure.
        if (isResourceExpired(err) && Date.now() - listedAt >= WATCH_MIN_HEALTHY_MS) {
          log.info({ resource: this.what, resourceVersion: this.lastResourceVersion }, 'resourceVersion expired; relisting');
          this.lastResourceVersion = '';
          continue;
        }
        if (isResourceExpired(err)) this.lastResourceVersion = '';
        if (err instanceof WatchIdleError) {
          log.warn({ resource: this.what }, err.message);
          continue;
        }
        failures++;
        const delayMs = retryDelayMs(failures, this.opts.retryInitialMs, this.opts.retryMaxMs);
        log.warn({ resource: this.what, err, failures, delayMs }, 'list/watch failed; retrying');
        await abortableDelay(delayMs, signal);
      }
    }
  }

  private async list(signal: AbortSignal): Promise<void> {
    const { api, resource, namespace, accept, decode, store, logger } = this.opts;
    const items: T[] = [];
    let continueToken = '';
    let resourceVersion = '';
    do {
      const query = new URLSearchParams({ limit: String(LIST_PAGE_SIZE) });
      this.setSelectors(query);
      if (continueToken) query.set('continue', continueToken);
      const path = `${resourceUrlPath(resource, namespace)}?${query}`;
      const page = (await api.getJson({
        path,
        accept: accept.list,
        signal: AbortSignal.any([signal, AbortSignal.timeout(LIST_PAGE_TIMEOUT_MS)]),
      })) as { metadata?: { resourceVersion?: unknown; continue?: unknown }; items?: unknown };
      // An empty PartialObjectMetadataList comes with `items` null or left out.
      const rawItems = page.items ?? [];
      if (!Array.isArray(rawItems)) throw new Error(`GET ${path}: the list's items are not an array`);
      for (const raw of rawItems) {
        try {
          items.push(decode(raw));
        } catch (err) {
          logger.warn({ resource: this.what, object: describeObject(raw), err }, 'skipping an object that cannot be read');
        }
      }
      continueToken = typeof page.metadata?.continue === 'string' ? page.metadata.continue : '';
      // Every page carries the resourceVersion of the first one: the list is one snapshot.
      if (typeof page.metadata?.resourceVersion === 'string') resourceVersion = page.metadata.resourceVersion;
    } while (continueToken);
    if (!resourceVersion) throw new Error(`list of ${this.what} carries no resourceVersion`);
    store.replace(items, namespace);
    this.lastResourceVersion = resourceVersion;
    this.lastEventAt = Date.now();
    if (!this.listed) {
      this.listed = true;
      logger.info({ resource: this.what, objects: items.length }, 'synced');
      this.opts.onSynced?.();
    }
  }

  /** Watches until the server ends the watch; returns how many events (bookmarks included) arrived. */
  private async watch(signal: AbortSignal): Promise<number> {
    const { api, resource, namespace, accept } = this.opts;
    const timeoutSeconds =
      this.opts.watchTimeoutSeconds ?? WATCH_TIMEOUT_MIN_SECONDS + Math.floor(Math.random() * WATCH_TIMEOUT_SPREAD_SECONDS);
    const query = new URLSearchParams({
      watch: 'true',
      allowWatchBookmarks: 'true',
      resourceVersion: this.lastResourceVersion,
      timeoutSeconds: String(timeoutSeconds),
    });
    this.setSelectors(query);
    const path = `${resourceUrlPath(resource, namespace)}?${query}`;

    const idle = new AbortController();
    const idleLimit = (): number =>
      watchIdleLimitMs({
        bookmarksSeen: this.bookmarksSeen,
        timeoutSeconds,
        slackMs: this.opts.watchIdleSlackMs ?? WATCH_IDLE_SLACK_MS,
        idleTimeoutMs: this.opts.watchIdleTimeoutMs ?? DEFAULT_WATCH_IDLE_TIMEOUT_MS,
      });
    let idleMs = idleLimit();
    let idleTimer = setTimeout(() => idle.abort(), idleMs);
    const touch = (): void => {
      clearTimeout(idleTimer);
      idleMs = idleLimit();
      idleTimer = setTimeout(() => idle.abort(), idleMs);
    };
    let events = 0;
    try {
      const res = await api.open({ path, accept: accept.watch, signal: AbortSignal.any([signal, idle.signal]) });
      res.setEncoding('utf8');
      let pending = '';
      for await (const chunk of res as AsyncIterable<string>) {
        pending += chunk;
        let newline = pending.indexOf('\n');
        while (newline >= 0) {
          const line = pending.slice(0, newline).trim();
          pending = pending.slice(newline + 1);
          newline = pending.indexOf('\n');
          if (!line) continue;
          this.handleEvent(path, line);
          events++;
        }
        touch();
      }
      return events;
    } catch (err) {
      if (idle.signal.aborted && !signal.aborted) {
        throw new WatchIdleError(`watch of ${this.what} was silent for ${idleMs} ms; reconnecting`);
      }
      throw err;
    } finally {
      clearTimeout(idleTimer);
    }
  }

  private setSelectors(query: URLSearchParams): void {
    const { labelSelector, fieldSelector } = this.opts;
    if (labelSelector) query.set('labelSelector', labelSelector);
    if (fieldSelector) query.set('fieldSelector', fieldSelector);
  }

  private handleEvent(path: string, line: string): void {
    const { store } = this.opts;
    let event: { type?: unknown; object?: unknown };
    try {
      event = JSON.parse(line) as { type?: unknown; object?: unknown };
    } catch (err) {
      throw new Error(`watch ${path}: an event is not JSON: ${line.slice(0, 200)}`, { cause: err });
    }
    const object = event.object;
    switch (event.type) {
      case 'ADDED':
      case 'MODIFIED': {
        const item = this.decodeEvent(object);
        if (item !== undefined) store.upsert(item);
        break;
      }
      case 'DELETED': {
        const item = this.decodeEvent(object);
        if (item !== undefined) store.remove(item);
        break;
      }
      case 'BOOKMARK':
        this.bookmarksSeen = true;
        break;
      case 'ERROR': {
        const status = object as { code?: unknown; reason?: unknown; message?: unknown } | undefined;
        throw new ApiStatusError(
          'WATCH',
          path,
          typeof status?.code === 'number' ? status.code : 500,
          typeof status?.reason === 'string' ? status.reason : '',
          typeof status?.message === 'string' ? status.message : '',
        );
      }
      default:
        throw new Error(`watch ${path}: unexpected event type ${String(event.type)}`);
    }
    const rv = resourceVersionOf(object);
    if (rv) this.lastResourceVersion = rv;
    this.lastEventAt = Date.now();
  }

  /** An unreadable object is skipped, not retried: the watch would replay it forever. */
  private decodeEvent(object: unknown): T | undefined {
    try {
      return this.opts.decode(object);
    } catch (err) {
      this.opts.logger.warn({ resource: this.what, object: describeObject(object), err }, 'skipping an object that cannot be read');
      return undefined;
    }
  }
}
