import type { V1StatefulSet } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import { DEFAULT_REPLICAS, isHealthGated } from '../rollout/decision.js';
import { WANTED_REPLICAS_ANNOTATION, WANTED_REPLICAS_PATH } from '../rollout/scale-down-hold.js';
import { wantsHandover } from './settings.js';

/*
 * The held scale-down of a handover-enabled set, as the webhook holds it: replicas kept at the
 * old count and the wanted count recorded (WANTED_REPLICAS_ANNOTATION, src/rollout/scale-down-hold.ts),
 * so that the write stops no pod. The leader's rollout applies the record once the handover
 * gate has let the pods it removes go.
 */

function replicasOf(set: V1StatefulSet): number {
  return set.spec?.replicas ?? DEFAULT_REPLICAS;
}

function holdsScaleDowns(set: V1StatefulSet): boolean {
  return isHealthGated(set) && wantsHandover(set);
}

/**
 * The JSON Patch that holds a scale-down of a handover-enabled set at the
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
  if (to > from) return recorded === undefined ? [] : [{ op: 'remove', path: WANTED_REPLICAS_PATH }];
  if (to === from) return [];
  const released = recorded === undefined && oldSet.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION] === String(to);
  if (released) return [];
  return [
    { op: newSet.spec.replicas === undefined ? 'add' : 'replace', path: '/spec/replicas', value: from },
    { op: 'add', path: WANTED_REPLICAS_PATH, value: String(to) },
  ];
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
    { op: 'add', path: WANTED_REPLICAS_PATH, value: String(wanted) },
  ];
}
