import type { V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch, { type Operation } from 'fast-json-patch';
import { DEFAULT_REPLICAS, isHealthGated } from './decision.js';
import { partitionPatch } from './hold.js';

/**
 * On a StatefulSet whose pods a disruption gate guards: the replica count a scale-down asked
 * for, while the set keeps the old `replicas` (the StatefulSet controller deletes scaled-down
 * pods directly, with no eviction to intercept). The rollout applies it once its gate lets the
 * pods it removes go. Whoever holds a scale-down writes it (src/handover: the webhook and the
 * scale subresource route).
 */
export const WANTED_REPLICAS_ANNOTATION = 'rollguard.io/wanted-replicas';
export const WANTED_REPLICAS_PATH = `/metadata/annotations/${jsonpatch.escapePathComponent(WANTED_REPLICAS_ANNOTATION)}`;

/** What the wanted-replicas record on a set asks for. */
export type HeldScaleDown =
  | { kind: 'none' }
  /** Not a replica count: removed with a Warning. */
  | { kind: 'unreadable'; raw: string }
  /** Not below replicas (raised since, or scaled down by a write the webhook missed): removed. */
  | { kind: 'stale'; raw: string; wanted: number; replicas: number }
  /** Scale from `replicas` to `wanted`: `removing` are the pods that goes away, highest ordinal first. */
  | { kind: 'held'; raw: string; wanted: number; replicas: number; removing: string[] };

export type HeldScaleDownOf<K extends HeldScaleDown['kind']> = Extract<HeldScaleDown, { kind: K }>;

/**
 * Read on any health-gated set: one that stopped asking for a gate while held (its primary
 * selector removed) still has the user's count to apply, with nothing to wait for.
 */
export function heldScaleDown(set: V1StatefulSet): HeldScaleDown {
  const raw = set.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION];
  if (raw === undefined || !isHealthGated(set)) return { kind: 'none' };
  if (!/^\d{1,9}$/.test(raw)) return { kind: 'unreadable', raw };
  const wanted = Number(raw);
  const replicas = set.spec?.replicas ?? DEFAULT_REPLICAS;
  if (wanted >= replicas) return { kind: 'stale', raw, wanted, replicas };
  const name = set.metadata?.name ?? '';
  const start = set.spec?.ordinals?.start ?? 0;
  const removing: string[] = [];
  for (let index = replicas - 1; index >= wanted; index--) removing.push(`${name}-${start + index}`);
  return { kind: 'held', raw, wanted, replicas, removing };
}

/** Removes the record, only while it still says `raw` (a newer write by its user wins). */
export function dropRecordOps(raw: string): Operation[] {
  return [
    { op: 'test', path: WANTED_REPLICAS_PATH, value: raw },
    { op: 'remove', path: WANTED_REPLICAS_PATH },
  ];
}

/**
 * Applies a held scale-down: replicas = wanted and the record removed, in one write; the
 * partition follows (a set at rest stays held at replicas, a rollout keeps its progress).
 */
export function applyScaleDownOps(set: V1StatefulSet, held: HeldScaleDownOf<'held'>): Operation[] {
  const partition = set.spec?.updateStrategy?.rollingUpdate?.partition;
  const ops: Operation[] = [...dropRecordOps(held.raw), { op: 'replace', path: '/spec/replicas', value: held.wanted }];
  if (partition !== undefined && partition > held.wanted) ops.push(...partitionPatch(set, held.wanted));
  return ops;
}
