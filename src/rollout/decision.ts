import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { ENABLED_LABEL } from '../restarter/annotations.js';
import type { StatefulSetOnlyFeature } from '../restarter/kind-features.js';
import { isTerminating, podHealth, podOrdinal, podRevision } from './pods.js';

/** Annotation on a StatefulSet (that carries ENABLED_LABEL) that opts it into health-gated rollouts. */
export const HEALTH_GATED_ANNOTATION = 'rollguard.io/rollout';
export const HEALTH_GATED_VALUE = 'health-gated';
/** Annotation with a URL that must answer a GET with 2xx before each step. */
export const HEALTH_URL_ANNOTATION = 'rollguard.io/health-url';

/** Health-gated stepping works on the partition: StatefulSets only (restarter/kind-features.ts warns the others). */
export const HEALTH_GATED_ROLLOUTS: StatefulSetOnlyFeature = {
  feature: 'health-gated rollouts',
  asks: (key) => key === HEALTH_GATED_ANNOTATION || key === HEALTH_URL_ANNOTATION,
};

/** What the API server assumes when spec.replicas is unset. */
export const DEFAULT_REPLICAS = 1;

// Event messages name the other pods up to this many; past it a count reads better
// (and the API server truncates Event messages at 1 KiB).
const MAX_NAMED_PODS = 5;
const MS_PER_SECOND = 1000;

export function isHealthGated(set: V1StatefulSet): boolean {
  return (
    set.metadata?.labels?.[ENABLED_LABEL] === 'true' &&
    set.metadata?.annotations?.[HEALTH_GATED_ANNOTATION] === HEALTH_GATED_VALUE
  );
}

export interface RolloutInput {
  set: V1StatefulSet;
  /** The set's pods; pods of other sets and ordinals outside spec.replicas are ignored. */
  pods: V1Pod[];
  now: Date;
  /** When rollguard last stepped this set's partition down; undefined if it has not (since it started). */
  lastStepAt?: Date;
  /** The least time between two steps that replace a pod. */
  minStepIntervalMs: number;
  /** Used when the set has no spec.minReadySeconds of its own. */
  defaultMinReadySeconds: number;
  /** Result of the GET on the set's health URL, made after a `check-health` decision. */
  healthCheck?: { ok: boolean; detail: string };
}

/**
 * The event to record with a partition change:
 * - PartitionUpdate: stepped down, so the controller replaces the next pod;
 * - RolloutComplete: every pod runs updateRevision and is ready, partition back to replicas;
 * - Hold: nothing is rolling, partition put back to replicas (scale change, newly gated set).
 */
export type PartitionEvent = 'PartitionUpdate' | 'RolloutComplete' | 'Hold';

/**
 * What the caller does next for one health-gated StatefulSet. Every variant but
 * `wait` and `check-health` is final until the set or one of its pods changes:
 * the caller decides again on the next watch event.
 */
export type RolloutDecision =
  /** Nothing to do: not gated, at rest, not observed yet, or the controller is working. */
  | { action: 'none'; reason: string }
  /** Patch the partition (see partitionPatch) and record `event` with `message`. */
  | { action: 'set-partition'; from: number; to: number; event: PartitionEvent; message: string }
  /**
   * A pod (or the health check) keeps the rollout from stepping. `cause` is stable
   * while the cause lasts: record RolloutBlocked once per cause.
   */
  | { action: 'blocked'; pod: string; cause: string; message: string }
  /** Only time is missing (minReadySeconds, rate limit): decide again after retryAfterMs. */
  | { action: 'wait'; retryAfterMs: number; reason: string }
  /**
   * Forced rollback: the pod is stuck on a revision the set no longer wants; delete it
   * so the controller recreates it from a wanted one, and record `message`.
   */
  | { action: 'delete-pod'; pod: string; message: string }
  /** GET the url, then decide again with `healthCheck` set (ok = answered 2xx). */
  | { action: 'check-health'; url: string };

interface SetView {
  name: string;
  replicas: number;
  /** spec.updateStrategy.rollingUpdate.partition, 0 when unset (the API default). */
  partition: number;
  /** Ordinal of the pod at index 0 (spec.ordinals.start); the partition counts indexes, not ordinals. */
  start: number;
  updateRevision: string;
  currentRevision: string;
  minReadySeconds: number;
  now: Date;
  /** The set's pods by index (ordinal - start); undefined where a pod does not exist. */
  slots: (V1Pod | undefined)[];
}

/** A pod that keeps the rollout from stepping; `detail` follows "pod <name> ". */
interface Blocker {
  kind: 'blocked';
  pod: string;
  cause: string;
  detail: string;
}
/** A pod that is Ready but not yet for minReadySeconds. */
interface Delay {
  kind: 'wait';
  pod: string;
  inMs: number;
  reason: string;
}
type Problem = Blocker | Delay;

/**
 * Decides the next move of a health-gated rollout from the StatefulSet, its pods and
 * the clock. The partition only goes down one pod at a time, when the controller has
 * observed the spec, every pod but the next one is healthy on the revision its
 * index calls for, the health URL (if any) answered 2xx and the rate limit allows.
 */
export function decideRollout(input: RolloutInput): RolloutDecision {
  const { set } = input;
  const name = set.metadata?.name;
  if (!name) return none('the StatefulSet has no name');
  if (!isHealthGated(set)) return none(`${name} is not health-gated`);
  const strategy = set.spec?.updateStrategy?.type;
  if (strategy !== undefined && strategy !== 'RollingUpdate') {
    return none(`${name} has updateStrategy ${strategy}: no partition to step`);
  }
  const generation = set.metadata?.generation;
  const observed = set.status?.observedGeneration;
  if (generation === undefined || observed !== generation) {
    return none(`the StatefulSet controller has not observed generation ${generation} of ${name} yet (observed ${observed ?? 'none'})`);
  }
  const updateRevision = set.status?.updateRevision;
  if (!updateRevision) return none(`${name} has no updateRevision in its status yet`);

  const view = setView(input, name, updateRevision);
  const rollback = forcedRollback(view);
  if (rollback) return rollback;
  if (view.partition > view.replicas) {
    return hold(view, `partition ${view.partition} is above replicas ${view.replicas}`);
  }
  const allOnUpdate = view.slots.every(
    (pod, index) => (pod ? podRevision(pod) : revisionFor(view, index)) === view.updateRevision,
  );
  return allOnUpdate ? finish(view) : step(input, view);
}

function setView(input: RolloutInput, name: string, updateRevision: string): SetView {
  const { set } = input;
  const replicas = set.spec?.replicas ?? DEFAULT_REPLICAS;
  const start = set.spec?.ordinals?.start ?? 0;
  const own = set.spec?.minReadySeconds;
  const slots: (V1Pod | undefined)[] = Array.from({ length: replicas }, () => undefined);
  for (const pod of input.pods) {
    const ordinal = podOrdinal(pod.metadata?.name ?? '', name);
    if (ordinal === undefined) continue;
    const index = ordinal - start;
    if (index >= 0 && index < replicas) slots[index] = pod;
  }
  return {
    name,
    replicas,
    partition: set.spec?.updateStrategy?.rollingUpdate?.partition ?? 0,
    start,
    updateRevision,
    currentRevision: set.status?.currentRevision ?? updateRevision,
    // 0 and unset are one value on the wire (omitempty), so 0 cannot mean "none, on purpose"
    minReadySeconds: own !== undefined && own > 0 ? own : input.defaultMinReadySeconds,
    now: input.now,
    slots,
  };
}

/** The revision the controller gives a pod it creates at this index. */
function revisionFor(view: SetView, index: number): string {
  return index >= view.partition ? view.updateRevision : view.currentRevision;
}

function podName(view: SetView, index: number): string {
  return `${view.name}-${view.start + index}`;
}

/**
 * A pod stuck not Ready on a revision that is neither current nor update (the
 * template went back to the revision the healthy pods run, or on to a newer one) is
 * never replaced by the controller: it waits for that pod to become Ready first.
 * Deleting it lets the controller recreate it from a wanted revision. Highest
 * ordinal first, as the controller itself proceeds.
 */
function forcedRollback(view: SetView): RolloutDecision | undefined {
  for (let index = view.slots.length - 1; index >= 0; index--) {
    const pod = view.slots[index];
    if (!pod || isTerminating(pod)) continue;
    const revision = podRevision(pod);
    if (revision === undefined || revision === view.updateRevision || revision === view.currentRevision) continue;
    const health = podHealth(pod, view.now, view.minReadySeconds);
    if (health.ready || health.availableInMs !== undefined) continue;
    const name = podName(view, index);
    const wanted = revisionFor(view, index);
    return {
      action: 'delete-pod',
      pod: name,
      message: `Deleted pod ${name}: stuck not ready (${health.reason}) on revision ${revision}, which the template no longer has; the StatefulSet controller recreates it on revision ${wanted}`,
    };
  }
  return undefined;
}

/** Every pod runs (or will be created on) updateRevision: put the partition back to replicas. */
function finish(view: SetView): RolloutDecision {
  const atRest = view.updateRevision === view.currentRevision;
  if (view.partition === view.replicas) {
    return none(
      atRest
        ? `${view.name} is at rest: all ${view.replicas} pods on revision ${view.updateRevision}, partition held at ${view.replicas}`
        : `all pods of ${view.name} run revision ${view.updateRevision}; the StatefulSet controller has yet to record it as current`,
    );
  }
  const problem = worstProblem(view, allIndexes(view), () => undefined);
  // nothing is left to roll at rest, so holding is safe at once: a scale-up's new pods need not be waited for
  if (problem?.kind === 'blocked' && atRest) return hold(view, `${view.name} is at rest on revision ${view.updateRevision}`);
  if (problem) return report(view, problem);
  return {
    action: 'set-partition',
    from: view.partition,
    to: view.replicas,
    event: 'RolloutComplete',
    message: `Updated partition from ${view.partition} to ${view.replicas}: rollout complete, all ${view.replicas} pods run revision ${view.updateRevision} and are ready`,
  };
}

function step(input: RolloutInput, view: SetView): RolloutDecision {
  const { partition, updateRevision } = view;
  if (partition === 0) {
    const problem = worstProblem(view, allIndexes(view), () => updateRevision);
    if (problem) return report(view, problem);
    return none(`partition of ${view.name} is 0: the StatefulSet controller is updating the remaining pods`);
  }

  // Pods below the partition that already run updateRevision (the partition was put
  // back to replicas mid-rollout) are stepped over at once: no pod is replaced.
  let to = partition;
  while (to > 0 && runsUpdate(view, view.slots[to - 1])) to--;
  if (to < partition) {
    const highest = podName(view, partition - 1);
    const lowest = podName(view, to);
    const subject =
      partition - to === 1
        ? `pod ${highest} already runs`
        : `pods ${highest} ${partition - to === 2 ? 'and' : 'to'} ${lowest} already run`;
    return partitionUpdate(partition, to, `${subject} revision ${updateRevision}`);
  }

  const targetIndex = partition - 1;
  const target = view.slots[targetIndex];
  const targetName = podName(view, targetIndex);
  if (!target) return blocked(view, problemOf(targetName, 'missing', 'is missing'));
  if (isTerminating(target)) return blocked(view, problemOf(targetName, 'terminating', 'is terminating'));

  const others = allIndexes(view).filter((index) => index !== targetIndex);
  // Below the partition the controller leaves pods alone, so only health matters there;
  // a pod on an older revision (after a rollback or a newer template) is replaced when
  // the partition reaches it, and requiring currentRevision would stall that for good.
  const problem = worstProblem(view, others, (index) => (index >= partition ? updateRevision : undefined));
  if (problem) return report(view, problem);

  const url = input.set.metadata?.annotations?.[HEALTH_URL_ANNOTATION];
  if (url) {
    if (!input.healthCheck) return { action: 'check-health', url };
    if (!input.healthCheck.ok) {
      return {
        action: 'blocked',
        pod: targetName,
        cause: `health-check:${url}`,
        message: `Rollout blocked at partition ${partition}: health check ${url} failed (${input.healthCheck.detail}), pod ${targetName} not replaced`,
      };
    }
  }

  if (input.lastStepAt) {
    const nextStepMs = input.lastStepAt.getTime() + input.minStepIntervalMs;
    const retryAfterMs = nextStepMs - input.now.getTime();
    if (retryAfterMs > 0) {
      return {
        action: 'wait',
        retryAfterMs,
        reason: `rate limit: next step of ${view.name} in ${Math.ceil(retryAfterMs / MS_PER_SECOND)}s (at most one every ${input.minStepIntervalMs / MS_PER_SECOND}s)`,
      };
    }
  }

  const targetHealth = podHealth(target, view.now, view.minReadySeconds);
  // the target is replaced anyway: a broken one is stepped over so that it gets the new template
  const targetState =
    targetHealth.ready || targetHealth.availableInMs !== undefined
      ? 'ready'
      : `not ready (${targetHealth.reason}), stepped over`;
  const parts = [`pod ${targetName} ${targetState}`];
  if (others.length > 0) parts.push(`${listNames(others.map((index) => podName(view, index)))} healthy`);
  if (input.healthCheck) parts.push(`health check passed (${input.healthCheck.detail})`);
  return partitionUpdate(partition, targetIndex, parts.join(', '));
}

function runsUpdate(view: SetView, pod: V1Pod | undefined): boolean {
  return pod !== undefined && !isTerminating(pod) && podRevision(pod) === view.updateRevision;
}

/**
 * The problem that matters most among the pods at `indexes`: the lowest-ordinal pod
 * that blocks, else (only time missing) the one that needs the longest wait.
 * `expectedRevision` gives the revision a pod must run, undefined for any.
 */
function worstProblem(
  view: SetView,
  indexes: number[],
  expectedRevision: (index: number) => string | undefined,
): Problem | undefined {
  let longestWait: Delay | undefined;
  for (const index of indexes) {
    const problem = podProblem(view, index, expectedRevision(index));
    if (problem?.kind === 'blocked') return problem;
    if (problem && (!longestWait || problem.inMs > longestWait.inMs)) longestWait = problem;
  }
  return longestWait;
}

function podProblem(view: SetView, index: number, expectedRevision: string | undefined): Problem | undefined {
  const name = podName(view, index);
  const pod = view.slots[index];
  if (!pod) return problemOf(name, 'missing', 'is missing');
  if (isTerminating(pod)) return problemOf(name, 'terminating', 'is terminating');
  const revision = podRevision(pod);
  if (expectedRevision !== undefined && revision !== expectedRevision) {
    return problemOf(
      name,
      `revision ${revision ?? 'none'}`,
      `runs revision ${revision ?? '(no controller-revision-hash label)'}, not yet updateRevision ${expectedRevision}`,
    );
  }
  const health = podHealth(pod, view.now, view.minReadySeconds);
  if (health.ready) return undefined;
  if (health.availableInMs !== undefined) {
    return { kind: 'wait', pod: name, inMs: health.availableInMs, reason: `pod ${name} ${health.reason}` };
  }
  return problemOf(name, health.reason, `is not ready (${health.reason})`);
}

function problemOf(pod: string, cause: string, detail: string): Blocker {
  return { kind: 'blocked', pod, cause: `${pod}:${cause}`, detail };
}

function report(view: SetView, problem: Problem): RolloutDecision {
  return problem.kind === 'blocked' ? blocked(view, problem) : { action: 'wait', retryAfterMs: problem.inMs, reason: problem.reason };
}

function blocked(view: SetView, blocker: Blocker): RolloutDecision {
  return {
    action: 'blocked',
    pod: blocker.pod,
    cause: blocker.cause,
    message: `Rollout blocked at partition ${view.partition}: pod ${blocker.pod} ${blocker.detail}`,
  };
}

function none(reason: string): RolloutDecision {
  return { action: 'none', reason };
}

function hold(view: SetView, why: string): RolloutDecision {
  return {
    action: 'set-partition',
    from: view.partition,
    to: view.replicas,
    event: 'Hold',
    message: `Updated partition from ${view.partition} to ${view.replicas}: ${why}; held at replicas so that a template change rolls nothing until rollguard steps it`,
  };
}

function partitionUpdate(from: number, to: number, why: string): RolloutDecision {
  return { action: 'set-partition', from, to, event: 'PartitionUpdate', message: `Updated partition from ${from} to ${to}: ${why}` };
}

function allIndexes(view: SetView): number[] {
  return Array.from({ length: view.replicas }, (_, index) => index);
}

/** "a", "a and b", "a, b and c"; past MAX_NAMED_PODS a count. */
function listNames(names: string[]): string {
  if (names.length > MAX_NAMED_PODS) return `all ${names.length} other pods`;
  if (names.length <= 1) return names.join('');
  return `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`;
}
