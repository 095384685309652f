import type { V1StatefulSet } from '@kubernetes/client-node';
// Not re-exported from the package root; it turns wire JSON into the typed models (dates as Date).
import { ObjectSerializer } from '@kubernetes/client-node/dist/serializer.js';
import type { Logger } from 'pino';
import { Informer } from './informer.js';
import { ObjectStore } from './object-store.js';
import type { RawApi } from './raw-api.js';

const JSON_ACCEPT = 'application/json';

export function decodeStatefulSet(raw: unknown): V1StatefulSet {
  const meta = (raw as { metadata?: { name?: unknown; resourceVersion?: unknown } } | null)?.metadata;
  if (typeof meta?.name !== 'string' || typeof meta.resourceVersion !== 'string') {
    throw new Error('StatefulSet without metadata.name or metadata.resourceVersion');
  }
  const set: V1StatefulSet = ObjectSerializer.deserialize(raw, 'V1StatefulSet');
  return set;
}

export interface StatefulSetCache {
  informer: Informer<V1StatefulSet>;
  store: ObjectStore<V1StatefulSet>;
}

/** Whole StatefulSets matching `labelSelector`, listed and watched in `namespaces` (undefined: all). */
export function createStatefulSetCache(opts: {
  api: RawApi;
  namespaces: string[] | undefined;
  labelSelector: string;
  logger: Logger;
  watchIdleTimeoutMs?: number;
}): StatefulSetCache {
  const store = new ObjectStore<V1StatefulSet>();
  const informer = new Informer<V1StatefulSet>({
    name: 'StatefulSet cache',
    api: opts.api,
    resource: { group: 'apps', version: 'v1', plural: 'statefulsets' },
    namespaces: opts.namespaces,
    labelSelector: opts.labelSelector,
    accept: { list: JSON_ACCEPT, watch: JSON_ACCEPT },
    decode: decodeStatefulSet,
    store,
    logger: opts.logger,
    watchIdleTimeoutMs: opts.watchIdleTimeoutMs,
  });
  return { informer, store };
}
