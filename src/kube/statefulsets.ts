import type { V1StatefulSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { RawApi } from './raw-api.js';
import { createWorkloadCache, decodeWorkload, type WorkloadCache } from './workloads.js';

export function decodeStatefulSet(raw: unknown): V1StatefulSet {
  return decodeWorkload('StatefulSet', raw);
}

export type StatefulSetCache = WorkloadCache<'StatefulSet'>;

/** Whole StatefulSets matching `labelSelector`, listed and watched in `namespaces` (undefined: all). */
export function createStatefulSetCache(opts: {
  api: RawApi;
  namespaces: string[] | undefined;
  labelSelector: string;
  logger: Logger;
  watchIdleTimeoutMs?: number;
}): StatefulSetCache {
  return createWorkloadCache('StatefulSet', opts);
}
