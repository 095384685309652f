import type { Logger } from 'pino';
import { Informer } from './informer.js';
import type { RawApi } from './raw-api.js';
import type { ReflectorStore } from './reflector.js';

/** Accept headers that make the API server send metadata only, so `data` never reaches us. */
export const PARTIAL_METADATA_LIST_ACCEPT = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1';
export const PARTIAL_METADATA_ACCEPT = 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1';

/** What the cache knows of one object. */
export interface CachedVersion {
  uid: string;
  resourceVersion: string;
  /** The object carries the ignore label with value "true". */
  ignored: boolean;
}

/** One decoded object: its place, and its version packed into one string (see packVersion). */
export interface MetadataItem {
  namespace: string;
  name: string;
  packed: string;
}

export type MetadataEventType = 'added' | 'updated' | 'deleted';

export interface MetadataEvent {
  type: MetadataEventType;
  namespace: string;
  name: string;
  /** undefined when added. */
  previous?: CachedVersion;
  /** undefined when deleted. */
  current?: CachedVersion;
}

// A uid never starts with "!" and never holds "/", so `[!]uid/rv` reads back without ambiguity.
const IGNORED_MARK = '!';
const IGNORED_VALUE = 'true';

/**
 * `uid/resourceVersion`, "!" first when ignored: one flat string per object is what keeps the
 * cache under 1 KB per object (an object of three fields costs more than the strings it holds).
 */
export function packVersion(version: CachedVersion): string {
  const packed = `${version.ignored ? IGNORED_MARK : ''}${version.uid}/${version.resourceVersion}`;
  // Concatenation makes a rope of the parts; a flat copy lets the parts be collected.
  return Buffer.from(packed, 'latin1').toString('latin1');
}

export function unpackVersion(packed: string): CachedVersion {
  const ignored = packed.startsWith(IGNORED_MARK);
  const start = ignored ? IGNORED_MARK.length : 0;
  const slash = packed.indexOf('/', start);
  return { uid: packed.slice(start, slash), resourceVersion: packed.slice(slash + 1), ignored };
}

/** Reads a PartialObjectMetadata (or any object) down to what the cache keeps; throws when a field is missing. */
export function decodeMetadata(raw: unknown, ignoreLabel: string | readonly string[]): MetadataItem {
  const meta = (raw as { metadata?: Record<string, unknown> } | null)?.metadata;
  const field = (name: string): string => {
    const value = meta?.[name];
    if (typeof value !== 'string' || value === '') {
      throw new Error(`object ${String(meta?.namespace ?? '')}/${String(meta?.name ?? '?')} has no metadata.${name}`);
    }
    return value;
  };
  const labels = meta?.labels as Record<string, unknown> | undefined;
  // Latin-1 copies: ASCII-only names and uids stored one byte per character, not sharing the parsed list.
  return {
    namespace: field('namespace'),
    name: Buffer.from(field('name'), 'latin1').toString('latin1'),
    packed: packVersion({
      uid: field('uid'),
      resourceVersion: field('resourceVersion'),
      ignored: (typeof ignoreLabel === 'string' ? [ignoreLabel] : ignoreLabel).some((label) => labels?.[label] === IGNORED_VALUE),
    }),
  };
}

/**
 * Name, uid, resourceVersion and the ignore flag of every ConfigMap (or Secret) in scope:
 * a Map of names per namespace, with one string per object. Emits an event for every
 * change that the list/watch reveals, relists included.
 */
export class MetadataStore implements ReflectorStore<MetadataItem> {
  private readonly byNamespace = new Map<string, Map<string, string>>();
  private readonly listeners: ((event: MetadataEvent) => void)[] = [];
  private count = 0;

  onEvent(listener: (event: MetadataEvent) => void): void {
    this.listeners.push(listener);
  }

  get(namespace: string, name: string): CachedVersion | undefined {
    const packed = this.byNamespace.get(namespace)?.get(name);
    return packed === undefined ? undefined : unpackVersion(packed);
  }

  size(): number {
    return this.count;
  }

  replace(items: MetadataItem[], namespace: string | undefined): void {
    const fresh = new Map<string, Map<string, string>>();
    for (const item of items) {
      let names = fresh.get(item.namespace);
      if (!names) fresh.set(item.namespace, (names = new Map()));
      names.set(item.name, item.packed);
    }
    const scope = namespace === undefined ? [...this.byNamespace.keys()] : [namespace];
    for (const ns of scope) {
      const kept = fresh.get(ns);
      for (const [name, packed] of this.byNamespace.get(ns) ?? []) {
        if (!kept?.has(name)) this.delete(ns, name, packed);
      }
    }
    for (const item of items) this.upsert(item);
  }

  upsert(item: MetadataItem): void {
    let names = this.byNamespace.get(item.namespace);
    if (!names) this.byNamespace.set(item.namespace, (names = new Map()));
    const previous = names.get(item.name);
    if (previous === item.packed) return;
    names.set(item.name, item.packed);
    if (previous === undefined) this.count++;
    this.emit({
      type: previous === undefined ? 'added' : 'updated',
      namespace: item.namespace,
      name: item.name,
      previous: previous === undefined ? undefined : unpackVersion(previous),
      current: unpackVersion(item.packed),
    });
  }

  remove(item: MetadataItem): void {
    const previous = this.byNamespace.get(item.namespace)?.get(item.name);
    if (previous !== undefined) this.delete(item.namespace, item.name, previous);
  }

  private delete(namespace: string, name: string, packed: string): void {
    const names = this.byNamespace.get(namespace);
    if (!names?.delete(name)) return;
    this.count--;
    if (names.size === 0) this.byNamespace.delete(namespace);
    this.emit({ type: 'deleted', namespace, name, previous: unpackVersion(packed) });
  }

  private emit(event: MetadataEvent): void {
    for (const listener of this.listeners) listener(event);
  }
}

export interface MetadataCache {
  informer: Informer<MetadataItem>;
  store: MetadataStore;
}

/** Metadata-only list/watch of the core resource `plural` (configmaps, secrets) in `namespaces` (undefined: all). */
export function createMetadataCache(opts: {
  name: string;
  api: RawApi;
  plural: string;
  namespaces: string[] | undefined;
  /** Any of these labels "true" marks the object ignored. */
  ignoreLabel: string | readonly string[];
  /** Objects the list and watch leave out, server-side (e.g. `type!=helm.sh/release.v1`). */
  fieldSelector?: string;
  logger: Logger;
  watchIdleTimeoutMs?: number;
}): MetadataCache {
  const store = new MetadataStore();
  const informer = new Informer<MetadataItem>({
    name: opts.name,
    api: opts.api,
    resource: { group: '', version: 'v1', plural: opts.plural },
    namespaces: opts.namespaces,
    ...(opts.fieldSelector ? { fieldSelector: opts.fieldSelector } : {}),
    accept: { list: PARTIAL_METADATA_LIST_ACCEPT, watch: PARTIAL_METADATA_ACCEPT },
    decode: (raw) => decodeMetadata(raw, opts.ignoreLabel),
    store,
    logger: opts.logger,
    watchIdleTimeoutMs: opts.watchIdleTimeoutMs,
  });
  return { informer, store };
}
