import type { Runnable } from '../manager.js';
import { Reflector, type ReflectorOptions } from './reflector.js';

export interface InformerOptions<T> extends Omit<ReflectorOptions<T>, 'namespace' | 'onSynced'> {
  /** For logs and status, e.g. "ConfigMap cache". */
  name: string;
  /** undefined: one cluster-wide list/watch; otherwise one list/watch per namespace. */
  namespaces: string[] | undefined;
}

/** `namespace/name`, the key objects go by in stores, indexes and the work queue. */
export function objectKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

export function splitObjectKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf('/');
  if (slash < 0) throw new Error(`object key "${key}" is not namespace/name`);
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}

/** One cache as /status tells it. */
export interface CacheStatus {
  synced: boolean;
  objects: number;
  /** Seconds since the cache last heard from the API server; absent before its first list. */
  last_event_age_seconds?: number;
}

/**
 * The list/watch of one resource feeding one store: cluster-wide, or one reflector per
 * namespace when the scope is a list of namespaces. Synced once every reflector has listed.
 */
export class Informer<T> implements Runnable {
  readonly name: string;
  private readonly reflectors = new Map<string | undefined, Reflector<T>>();
  private readonly syncWaiters = new Set<() => void>();

  constructor(opts: InformerOptions<T>) {
    this.name = opts.name;
    if (opts.namespaces !== undefined && opts.namespaces.length === 0) {
      throw new Error(`${opts.name}: namespaces must be undefined (all) or name at least one namespace`);
    }
    const scopes = opts.namespaces === undefined ? [undefined] : [...new Set(opts.namespaces)];
    for (const namespace of scopes) {
      this.reflectors.set(namespace, new Reflector({ ...opts, namespace, onSynced: () => this.checkSynced() }));
    }
  }

  async start(signal: AbortSignal): Promise<void> {
    for (const reflector of this.reflectors.values()) reflector.start(signal);
    signal.addEventListener('abort', () => this.wakeSyncWaiters(), { once: true });
  }

  async stopped(): Promise<void> {
    await Promise.all([...this.reflectors.values()].map((r) => r.stopped()));
  }

  synced(): boolean {
    for (const reflector of this.reflectors.values()) if (!reflector.synced()) return false;
    return true;
  }

  /** Resolves true once synced, or false when `signal` aborts first. */
  whenSynced(signal: AbortSignal): Promise<boolean> {
    if (this.synced()) return Promise.resolve(true);
    if (signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const wake = (): void => {
        this.syncWaiters.delete(wake);
        signal.removeEventListener('abort', wake);
        resolve(this.synced());
      };
      this.syncWaiters.add(wake);
      signal.addEventListener('abort', wake, { once: true });
    });
  }

  /** Seconds since the quietest reflector last heard from the API server (list, event or bookmark); undefined before the first list. */
  lastEventAgeSeconds(now = Date.now()): number | undefined {
    let oldest = Infinity;
    for (const reflector of this.reflectors.values()) oldest = Math.min(oldest, reflector.lastEventTime());
    return oldest === 0 || oldest === Infinity ? undefined : Math.max(0, (now - oldest) / 1000);
  }

  /** Whether objects of this namespace are listed and watched at all. */
  covers(namespace: string): boolean {
    return this.reflectors.has(undefined) || this.reflectors.has(namespace);
  }

  /** The newest resourceVersion the store reflects for `namespace`; '' when it is not covered or not synced. */
  resourceVersion(namespace: string): string {
    return (this.reflectors.get(undefined) ?? this.reflectors.get(namespace))?.resourceVersion() ?? '';
  }

  /** What /status tells of this cache, which holds `objects` objects. */
  status(objects: number): CacheStatus {
    const age = this.lastEventAgeSeconds();
    return { synced: this.synced(), objects, ...(age !== undefined ? { last_event_age_seconds: Math.round(age) } : {}) };
  }

  private checkSynced(): void {
    if (this.synced()) this.wakeSyncWaiters();
  }

  private wakeSyncWaiters(): void {
    for (const wake of [...this.syncWaiters]) wake();
  }
}
