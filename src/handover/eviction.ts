import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { isHealthGated } from '../rollout/decision.js';
import { matches } from './selector.js';
import { handoverSettings } from './settings.js';
import { claimedAsCandidate, HANDOVER_REQUEST_ANNOTATION, HANDOVER_REQUEST_VALUE, readHandoverState } from './state.js';

/** How long an eviction of a primary is answered 429 at most (--eviction-defer-max): a drain must end some day. */
export const DEFAULT_EVICTION_DEFER_MAX_MS = 10 * 60_000;
const MS_PER_MINUTE = 60_000;

export interface EvictionFacts {
  /** The pod being evicted, as one GET read it; undefined: gone. */
  pod: V1Pod | undefined;
  /** The StatefulSet that controls it, from the cache; undefined: none, or not opted in. */
  set: V1StatefulSet | undefined;
  dryRun: boolean;
  now: Date;
  /** When this replica first deferred an eviction of this pod. */
  firstDeferredAt?: Date;
  maxDeferMs: number;
}

export type EvictionVerdict =
  /**
   * `guarded`: a pod of a handover-enabled set that is not its primary; the guard marks it
   * (EVICTION_ALLOWED_ANNOTATION) and decides again on what that write returned.
   */
  | { allow: true; warning?: string; guarded?: true }
  /**
   * `mark`: set the handover request on the pod (never on a dry run); the leader hands over.
   * `about`: the pod is the primary, or the candidate of a handover attempt in flight.
   */
  | { allow: false; mark: boolean; about: 'primary' | 'candidate'; message: string };

/**
 * The eviction guard's answer: an eviction of the primary of a handover-enabled set is deferred
 * (HTTP 429, which `kubectl drain` retries) until the role has moved (the leader saw another
 * Ready pod take it: a primary demoted while no pod holds the role is still deferred); every other eviction is
 * allowed at once, but for the candidate of a handover attempt in flight (it may be the primary
 * in a moment; deferred until the attempt's deadline at most). Bounded: with no other Ready pod,
 * or past maxDeferMs, the primary is allowed with a warning.
 */
export function decideEviction(f: EvictionFacts): EvictionVerdict {
  const { pod, set } = f;
  if (!pod || !set || !isHealthGated(set)) return { allow: true };
  const parsed = handoverSettings(set);
  if (!parsed?.ok) return { allow: true };
  const podName = pod.metadata?.name ?? '';
  const setName = set.metadata?.name ?? '';
  const read = readHandoverState(set);
  const state = read.kind === 'state' && read.state.from === podName ? read.state : undefined;
  const ready = set.status?.readyReplicas ?? 0;
  if (!matches(parsed.settings.selector, pod.metadata?.labels)) {
    // demoted, but the leader has not yet seen a Ready pod take the role: the role has not moved
    if (state && state.fromUid === pod.metadata?.uid && state.outcome !== 'proceed' && ready > 1 && !deferredTooLong(f)) {
      return { allow: false, mark: false, about: 'primary', message: `rollguard: pod ${podName} handed the primary role of StatefulSet ${setName} away, and no other pod is seen to hold it yet; retry` };
    }
    if (!claimedAsCandidate(pod, f.now)) return { allow: true, guarded: true };
    return { allow: false, mark: false, about: 'candidate', message: `rollguard: pod ${podName} is the candidate of a handover of the primary role of StatefulSet ${setName} in progress, retry` };
  }
  if (ready <= 1) {
    return { allow: true, warning: `rollguard: pod ${podName} is the primary of StatefulSet ${setName} and no other pod is Ready to take the role: evicted without a handover` };
  }
  if (state?.outcome === 'proceed') return { allow: true, warning: `rollguard: the handover from ${podName} failed; evicted as handover-on-failure: proceed allows` };
  if (deferredTooLong(f)) {
    return {
      allow: true,
      warning: `rollguard: pod ${podName} is still the primary of StatefulSet ${setName} after ${Math.round(f.maxDeferMs / MS_PER_MINUTE)} m of handover attempts: evicted without a handover`,
    };
  }
  const requested = pod.metadata?.annotations?.[HANDOVER_REQUEST_ANNOTATION] === HANDOVER_REQUEST_VALUE;
  const inProgress = requested || state !== undefined;
  return {
    allow: false,
    mark: !f.dryRun && !inProgress,
    about: 'primary',
    message: inProgress
      ? `rollguard: pod ${podName} is the primary of StatefulSet ${setName}; a handover of the role is in progress, retry`
      : `rollguard: pod ${podName} is the primary of StatefulSet ${setName}; eviction triggered a handover of the role, retry`,
  };
}

function deferredTooLong(f: EvictionFacts): boolean {
  return f.firstDeferredAt !== undefined && f.now.getTime() - f.firstDeferredAt.getTime() >= f.maxDeferMs;
}
