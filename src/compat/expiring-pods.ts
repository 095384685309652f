import type { Logger } from 'pino';
import { Informer } from '../kube/informer.js';
import { PARTIAL_METADATA_ACCEPT, PARTIAL_METADATA_LIST_ACCEPT } from '../kube/metadata-cache.js';
import type { RawApi } from '../kube/raw-api.js';
import type { ReflectorStore } from '../kube/reflector.js';
import { EXPIRES_AT_PREFIX, expiryOf, type Expiry } from './expiry.js';

/** What the Pod restarter keeps of one pod: its identity and its expiry, never the rest of its metadata. */
export interface ExpiringPod {
  namespace: string;
  name: string;
  uid: string;
  resourceVersion: string;
  terminating: boolean;
  expiry: Expiry;
}

/** What a change of the store means: the pod of `key` is to be looked at. */
export type ExpiringPodListener = (namespace: string, name: string) => void;

/** One pod's metadata (PartialObjectMetadata) down to an ExpiringPod; throws when an identity field is missing. */
export function decodeExpiringPod(raw: unknown): ExpiringPod {
  const meta = (raw as { metadata?: Record<string, unknown> } | null)?.metadata;
  const text = (name: string): string => {
    const value = meta?.[name];
    if (typeof value !== 'string' || value === '') throw new Error(`pod ${String(meta?.namespace ?? '')}/${String(meta?.name ?? '?')} has no metadata.${name}`);
    return value;
  };
  const annotations = meta?.annotations as Record<string, string> | undefined;
  const expiring = Object.fromEntries(Object.entries(annotations ?? {}).filter(([key]) => key.startsWith(EXPIRES_AT_PREFIX)));
  return {
    namespace: text('namespace'),
    name: text('name'),
    uid: text('uid'),
    resourceVersion: text('resourceVersion'),
    terminating: typeof meta?.deletionTimestamp === 'string',
    expiry: expiryOf(expiring),
  };
}

function hasExpiry(pod: ExpiringPod): boolean {
  return pod.expiry.at !== undefined || pod.expiry.invalid.length > 0;
}

/**
 * Only pods that carry an expires-at annotation are kept: the others are decoded from the
 * watch and dropped, so a cluster of pods without them costs no memory here.
 */
export class ExpiringPodStore implements ReflectorStore<ExpiringPod> {
  private readonly pods = new Map<string, ExpiringPod>();
  private readonly listeners: ExpiringPodListener[] = [];

  onChange(listener: ExpiringPodListener): void {
    this.listeners.push(listener);
  }

  get(namespace: string, name: string): ExpiringPod | undefined {
    return this.pods.get(`${namespace}/${name}`);
  }

  keys(): string[] {
    return [...this.pods.keys()];
  }

  size(): number {
    return this.pods.size;
  }

  replace(items: ExpiringPod[], namespace: string | undefined): void {
    const fresh = new Set(items.filter(hasExpiry).map((p) => `${p.namespace}/${p.name}`));
    for (const [key, pod] of this.pods) {
      if ((namespace === undefined || pod.namespace === namespace) && !fresh.has(key)) this.remove(pod);
    }
    for (const item of items) this.upsert(item);
  }

  upsert(item: ExpiringPod): void {
    const key = `${item.namespace}/${item.name}`;
    if (!hasExpiry(item)) {
      if (this.pods.has(key)) this.remove(item);
      return;
    }
    if (this.pods.get(key)?.resourceVersion === item.resourceVersion) return;
    this.pods.set(key, item);
    this.emit(item);
  }

  remove(item: ExpiringPod): void {
    if (this.pods.delete(`${item.namespace}/${item.name}`)) this.emit(item);
  }

  private emit(pod: ExpiringPod): void {
    for (const listener of this.listeners) listener(pod.namespace, pod.name);
  }
}

/** A metadata-only list/watch of every pod in `namespaces`, feeding an ExpiringPodStore. */
export function createExpiringPodInformer(opts: { api: RawApi; namespaces: string[] | undefined; logger: Logger; watchIdleTimeoutMs?: number }): {
  informer: Informer<ExpiringPod>;
  store: ExpiringPodStore;
} {
  const store = new ExpiringPodStore();
  const informer = new Informer<ExpiringPod>({
    name: 'expiring Pod cache',
    api: opts.api,
    resource: { group: '', version: 'v1', plural: 'pods' },
    namespaces: opts.namespaces,
    accept: { list: PARTIAL_METADATA_LIST_ACCEPT, watch: PARTIAL_METADATA_ACCEPT },
    decode: decodeExpiringPod,
    store,
    logger: opts.logger,
    watchIdleTimeoutMs: opts.watchIdleTimeoutMs,
  });
  return { informer, store };
}
