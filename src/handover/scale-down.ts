import type { V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch, { type Operation } from 'fast-json-patch';
import { DEFAULT_REPLICAS, isHealthGated } from '../rollout/decision.js';
import { partitionPatch } from '../rollout/hold.js';
import { wantsHandover } from './settings.js';

/**
 * On a handover-enabled StatefulSet: the replica count a scale-down asked for, while the webhook
 * keeps the old `replicas` (the StatefulSet controller deletes scaled-down pods directly, with no
 * eviction to intercept). The leader applies it once no pod it removes is the primary.
 */
export const WANTED_REPLICAS_ANNOTATION = 'rollguard.io/wanted-replicas';

const WANTED_PATH = `/metadata/annotations/${jsonpatch.escapePathComponent(WANTED_REPLICAS_ANNOTATION)}`;

function replicasOf(set: V1StatefulSet): number {
  return set.spec?.replicas ?? DEFAULT_REPLICAS;
}

function holdsScaleDowns(set: V1StatefulSet): boolean {
  return isHealthGated(set) && wantsHandover(set);
}

/**
 * The admission half: the JSON Patch that holds a scale-down of a handover-enabled set at the
 * old `replicas` and records the wanted count, so that the write stops no pod. The webhook sees
 * no pods, so it holds every scale-down and the leader, which does, applies it.
 *
 * - replicas lowered: keep the old count, wanted = the new one (a repeated write, e.g. an
 *   autoscaler's, updates the wanted count);
 * - replicas lowered to the recorded count with the record removed: the leader's release of a
 *   held scale-down (or a person who removed the record on purpose), passed as written;
 * - replicas raised while held: the record is dropped, nothing is left to do;
 * - anything else: left as written.
 */
export function scaleHoldOps(oldSet: V1StatefulSet | undefined, newSet: V1StatefulSet): Operation[] {
  if (oldSet === undefined || !holdsScaleDowns(newSet) || !newSet.spec) return [];
  const from = replicasOf(oldSet);
  const to = replicasOf(newSet);
  // a handover-enabled set has annotations: its primary selector is one
  const recorded = newSet.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION];
  if (to > from) return recorded === undefined ? [] : [{ op: 'remove', path: WANTED_PATH }];
  if (to === from) return [];
  const released = recorded === undefined && oldSet.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION] === String(to);
  if (released) return [];
  return [
    { op: newSet.spec.replicas === undefined ? 'add' : 'replace', path: '/spec/replicas', value: from },
    { op: 'add', path: WANTED_PATH, value: String(to) },
  ];
}

/** The controller half: what the wanted-replicas record on a handover-enabled set asks for. */
export type HeldScaleDown =
  | { kind: 'none' }
  /** Not a replica count: removed with a Warning. */
  | { kind: 'unreadable'; raw: string }
  /** Not below replicas (raised since, or scaled down by a write the webhook missed): removed. */
  | { kind: 'stale'; raw: string; wanted: number; replicas: number }
  /** Scale from `replicas` to `wanted`: `removing` are the pods that goes away, highest ordinal first. */
  | { kind: 'held'; raw: string; wanted: number; replicas: number; removing: string[] };

/**
 * Read on any health-gated set: one that stopped asking for handovers while held (its primary
 * selector removed) still has the user's count to apply, with no handover to wait for.
 */
export function heldScaleDown(set: V1StatefulSet): HeldScaleDown {
  const raw = set.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION];
  if (raw === undefined || !isHealthGated(set)) return { kind: 'none' };
  if (!/^\d{1,9}$/.test(raw)) return { kind: 'unreadable', raw };
  const wanted = Number(raw);
  const replicas = replicasOf(set);
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
    { op: 'test', path: WANTED_PATH, value: raw },
    { op: 'remove', path: WANTED_PATH },
  ];
}

/**
 * Applies a held scale-down: replicas = wanted and the record removed, in one write; the
 * partition follows (a set at rest stays held at replicas, a rollout keeps its progress).
 */
export function applyScaleDownOps(set: V1StatefulSet, held: Extract<HeldScaleDown, { kind: 'held' }>): Operation[] {
  const partition = set.spec?.updateStrategy?.rollingUpdate?.partition;
  const ops: Operation[] = [...dropRecordOps(held.raw), { op: 'replace', path: '/spec/replicas', value: held.wanted }];
  if (partition !== undefined && partition > held.wanted) ops.push(...partitionPatch(set, held.wanted));
  return ops;
}

/**
 * A write of the scale subresource (`kubectl scale`, an autoscaler). Its admission object is an
 * autoscaling/v1 Scale: no labels (an objectSelector never matches it) and no annotations (the
 * API server copies only spec.replicas to the set), so the record has to be written on the set
 * itself, which the scale handler does with one PATCH.
 * - hold: keep `from` in the Scale, record `to` on the set;
 * - drop: replicas raised while held, remove the record;
 * - pass: anything else, or a set that does not hold scale-downs.
 */
export type ScaleWrite = { kind: 'pass' } | { kind: 'hold'; from: number; to: number } | { kind: 'drop'; raw: string };

export function decideScaleWrite(set: V1StatefulSet | undefined, from: number | undefined, to: number | undefined): ScaleWrite {
  if (set === undefined || from === undefined || to === undefined || !holdsScaleDowns(set)) return { kind: 'pass' };
  if (to < from) return { kind: 'hold', from, to };
  const raw = set.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION];
  return to > from && raw !== undefined ? { kind: 'drop', raw } : { kind: 'pass' };
}

/** The JSON Patch of the set that records a scale-down held at the scale subresource; fails on another set of the name. */
export function recordOps(uid: string, wanted: number): Operation[] {
  return [
    { op: 'test', path: '/metadata/uid', value: uid },
    { op: 'add', path: WANTED_PATH, value: String(wanted) },
  ];
}
