import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch from 'fast-json-patch';
import type { Operation } from 'fast-json-patch';
import { statusCode } from '../kube/api-status.js';

const UNPROCESSABLE = 422;

/**
 * The handover in flight on a set, as JSON in one annotation on the set. Written behind a test
 * of the set's resourceVersion, so two writers (an old and a new leader) cannot both start one,
 * and read back by whichever replica leads next: it resumes, it does not start a second.
 */
export const HANDOVER_STATE_ANNOTATION = 'rollguard.io/handover-state';
/** On a pod: a person (or the eviction guard) asks for a handover away from it. */
export const HANDOVER_REQUEST_ANNOTATION = 'rollguard.io/handover';
export const HANDOVER_REQUEST_VALUE = 'requested';
/**
 * The same annotation on the primary's pod with this value cancels the handover in flight away
 * from it: the step it guards goes on without one (a requested handover is dropped). Removed
 * like a request, so the fence on pods needs nothing new.
 */
export const HANDOVER_CANCEL_VALUE = 'cancel';

/**
 * The two halves of one exclusion between an eviction and a handover to the pod it removes.
 * Both are written on the pod, and each writer decides on the pod its own PATCH returns: writes
 * of one object are ordered, so whichever comes second sees the first.
 * - The eviction guard, before it allows the eviction of a pod of a handover-enabled set, sets
 *   `eviction-allowed` (RFC 3339, now); such a pod is no candidate until the mark is stale.
 * - The leader, before a call that may make a pod the primary, sets `handover-candidate`
 *   (RFC 3339, the attempt's deadline); until then the guard defers that pod's eviction.
 * Neither is removed: each carries its time, and is inert once past it.
 */
export const EVICTION_ALLOWED_ANNOTATION = 'rollguard.io/eviction-allowed';
export const HANDOVER_CANDIDATE_ANNOTATION = 'rollguard.io/handover-candidate';
/** What the handover reads of a pod besides its labels: the pod cache of the rollout keeps these. */
export const HANDOVER_POD_ANNOTATIONS: readonly string[] = [HANDOVER_REQUEST_ANNOTATION, EVICTION_ALLOWED_ANNOTATION];
/** An eviction the guard allowed has been carried out or refused by then: the API server's request timeout. */
export const EVICTION_MARK_FRESH_MS = 60_000;

function timeIn(pod: V1Pod | undefined, key: string): number | undefined {
  const raw = pod?.metadata?.annotations?.[key];
  const at = raw === undefined ? NaN : Date.parse(raw);
  return Number.isNaN(at) ? undefined : at;
}

/** The guard allowed an eviction of this pod less than EVICTION_MARK_FRESH_MS ago: it may be going away. */
export function evictionAllowedRecently(pod: V1Pod | undefined, now: Date): boolean {
  const at = timeIn(pod, EVICTION_ALLOWED_ANNOTATION);
  return at !== undefined && now.getTime() - at < EVICTION_MARK_FRESH_MS;
}

/** A handover attempt may make this pod the primary until its deadline. */
export function claimedAsCandidate(pod: V1Pod | undefined, now: Date): boolean {
  const until = timeIn(pod, HANDOVER_CANDIDATE_ANNOTATION);
  return until !== undefined && now.getTime() < until;
}

function annotationOps(annotations: 'add-map' | 'add-key', key: string, value: string): Operation[] {
  return annotations === 'add-map'
    ? [{ op: 'add', path: '/metadata/annotations', value: { [key]: value } }]
    : [{ op: 'add', path: `/metadata/annotations/${jsonpatch.escapePathComponent(key)}`, value }];
}

/**
 * Sets one annotation of a pod through `patch` (a JSON Patch of the pod): as a key of its map,
 * or as the whole map when the pod has none (`hasAnnotations` false, or the key's add answered
 * 422). Gives what `patch` gave.
 */
export async function setPodAnnotation<T>(patch: (ops: Operation[]) => Promise<T>, key: string, value: string, hasAnnotations = true): Promise<T> {
  try {
    return await patch(annotationOps(hasAnnotations ? 'add-key' : 'add-map', key, value));
  } catch (err) {
    if (statusCode(err) !== UNPROCESSABLE) throw err;
    return patch(annotationOps('add-map', key, value));
  }
}

/** What asked for the handover: a partition step, a person's (or the eviction guard's) request, a held scale-down. */
export type HandoverTrigger = 'rollout' | 'requested' | 'scale-down';

export interface HandoverState {
  /** The primary's pod name and uid when the handover started: a recreated pod is another pod. */
  from: string;
  fromUid: string;
  /** The candidate named in the last call; re-chosen before every attempt. */
  to: string;
  trigger: HandoverTrigger;
  /** RFC 3339. */
  startedAt: string;
  /** 1-based; counts the attempts of the primary action, then one of the fallback. */
  attempt: number;
  /** The attempt in `attempt` is of the fallback action. */
  fallback: boolean;
  /** When the current attempt's call was made; absent: not made yet. */
  calledAt?: string;
  /** Not before this time is the next attempt made. */
  nextAt?: string;
  /**
   * Every attempt failed: `paused` keeps trying one attempt each interval; `proceed` lets the step
   * go on (handover-on-failure: proceed, or a cancel); `gave-up`: paused past the pause timeout, no
   * more calls, the step stays held until a person cancels, rolls back or moves the role.
   */
  outcome?: 'paused' | 'proceed' | 'gave-up';
  /** RFC 3339: when the handover paused; the pause timeout counts from here. */
  pausedAt?: string;
}

function isState(value: unknown): value is HandoverState {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  const optionalString = (x: unknown): boolean => x === undefined || typeof x === 'string';
  return (
    typeof v.from === 'string' &&
    typeof v.fromUid === 'string' &&
    typeof v.to === 'string' &&
    (v.trigger === 'rollout' || v.trigger === 'requested' || v.trigger === 'scale-down') &&
    typeof v.startedAt === 'string' &&
    Number.isSafeInteger(v.attempt) &&
    typeof v.fallback === 'boolean' &&
    optionalString(v.calledAt) &&
    optionalString(v.nextAt) &&
    optionalString(v.pausedAt) &&
    (v.outcome === undefined || v.outcome === 'paused' || v.outcome === 'proceed' || v.outcome === 'gave-up')
  );
}

export type ReadState = { kind: 'none' } | { kind: 'state'; state: HandoverState } | { kind: 'unreadable'; raw: string };

export function readHandoverState(set: V1StatefulSet): ReadState {
  const raw = set.metadata?.annotations?.[HANDOVER_STATE_ANNOTATION];
  if (raw === undefined) return { kind: 'none' };
  try {
    const parsed: unknown = JSON.parse(raw);
    return isState(parsed) ? { kind: 'state', state: parsed } : { kind: 'unreadable', raw };
  } catch {
    return { kind: 'unreadable', raw };
  }
}

const STATE_PATH = `/metadata/annotations/${jsonpatch.escapePathComponent(HANDOVER_STATE_ANNOTATION)}`;

/** The JSON Patch operations that write `state` (undefined: remove it) on the set. */
export function handoverStateOps(set: V1StatefulSet, state: HandoverState | undefined): Operation[] {
  const annotations = set.metadata?.annotations;
  if (state === undefined) return annotations?.[HANDOVER_STATE_ANNOTATION] === undefined ? [] : [{ op: 'remove', path: STATE_PATH }];
  const value = JSON.stringify(state);
  if (!annotations) return [{ op: 'add', path: '/metadata/annotations', value: { [HANDOVER_STATE_ANNOTATION]: value } }];
  return [{ op: 'add', path: STATE_PATH, value }];
}
