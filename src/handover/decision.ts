import type { V1Pod } from '@kubernetes/client-node';
import { isTerminating, podOrdinal, podRevision } from '../rollout/pods.js';
import { matches } from './selector.js';
import { describeAction, HANDOVER_PAUSE_TIMEOUT_ANNOTATION as HANDOVER_PAUSE_TIMEOUT, type HandoverAction, type HandoverSettings } from './settings.js';
import {
  evictionAllowedRecently,
  HANDOVER_CANCEL_VALUE,
  HANDOVER_REQUEST_ANNOTATION,
  HANDOVER_REQUEST_VALUE,
  HANDOVER_STATE_ANNOTATION,
  type HandoverState,
  type HandoverTrigger,
  type ReadState,
} from './state.js';

export const REASON_HANDOVER_STARTED = 'HandoverStarted';
export const REASON_HANDOVER_SUCCEEDED = 'HandoverSucceeded';
export const REASON_HANDOVER_FAILED = 'HandoverFailed';
export const REASON_HANDOVER_FALLBACK = 'HandoverFallback';
export const REASON_HANDOVER_SKIPPED = 'HandoverSkipped';
export const REASON_HANDOVER_CANCELLED = 'HandoverCancelled';
export const REASON_PRIMARY_SCALED_DOWN = 'PrimaryScaledDown';

/** While a call is answered and the labels have not moved, look again this often (pod events wake the set sooner). */
export const VERIFY_POLL_MS = 1_000;

/**
 * How a handover ended, for the handovers metric. A closed set: `cancelled` by the annotation on
 * the primary's pod, `gave_up` after the pause timeout; `abandoned` also when the step it was for
 * is gone (a rollback, a scale-down no longer held).
 */
export type HandoverResult = 'succeeded' | 'paused' | 'proceeded' | 'abandoned' | 'cancelled' | 'gave_up';

/** What the call of one attempt did: `failed` when the answer says it did not start (refused, 4xx, 5xx but 503). */
export interface CallAnswer {
  attempt: number;
  fallback: boolean;
  failed: boolean;
  detail: string;
}

export interface HandoverInput {
  namespace: string;
  setName: string;
  settings: HandoverSettings;
  state: ReadState;
  /** The set's pods, with their labels and the request annotation. */
  pods: readonly V1Pod[];
  /** Pods the rollout's next write would have replaced (a step, a forced rollback); empty when none. */
  replacing: readonly string[];
  updateRevision: string | undefined;
  /**
   * A held scale-down to this many replicas: `replacing` are the pods it removes, and the
   * candidate must be a pod that stays (index below `replicas`).
   */
  scaleDownTo?: { replicas: number; ordinalStart: number };
  now: Date;
  answer?: CallAnswer;
}

export interface HandoverEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface HandoverCall {
  action: HandoverAction;
  /** The pod the action is performed on. */
  target: string;
  primary: string;
  candidate: string;
  attempt: number;
  fallback: boolean;
}

export type HandoverStep =
  /** Nothing to hand over: the rollout may do what it decided. */
  | { kind: 'open' }
  /** The rollout must not step; `cause` is stable while the cause lasts. */
  | { kind: 'blocked'; pod: string; cause: string; message: string }
  /** A handover is in flight and only time is missing. */
  | { kind: 'wait'; retryAfterMs: number; reason: string }
  /** A handover that gave up holds the step until the set or its pods change (a cancel, a rollback, the role moved). */
  | { kind: 'held'; reason: string }
  /**
   * Write `state` on the set (undefined: remove it) behind the resourceVersion test; only if
   * that succeeds record `event`, make `call`, count `result` and remove the request on `clearRequest`.
   */
  | {
      kind: 'write';
      state: HandoverState | undefined;
      event?: HandoverEvent;
      call?: HandoverCall;
      result?: HandoverResult;
      durationMs?: number;
      clearRequest?: string;
      /** Remove the cancel (HANDOVER_CANCEL_VALUE) from this pod. */
      clearCancel?: string;
      log: string;
    }
  /** A request on a pod that is not the primary, or a cancel with nothing to cancel: remove it (while it still says `value`) and say so. */
  | { kind: 'clear-request'; pod: string; value: string; event: HandoverEvent };

export function isReady(pod: V1Pod): boolean {
  return !isTerminating(pod) && pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
}

function nameOf(pod: V1Pod): string {
  return pod.metadata?.name ?? '';
}

function byOrdinal(setName: string): (a: V1Pod, b: V1Pod) => number {
  const ordinal = (pod: V1Pod): number => podOrdinal(nameOf(pod), setName) ?? Number.MAX_SAFE_INTEGER;
  return (a, b) => ordinal(a) - ordinal(b);
}

/**
 * The pod the role should go to: Ready, not terminating, not the primary, and not a pod whose
 * eviction the guard allowed moments ago (at `now`); one on the update revision if any is (the
 * rollout then needs no second handover), else the one rolled last (the lowest ordinal:
 * partitions step down from the highest).
 */
export function chooseCandidate(
  pods: readonly V1Pod[],
  primary: string,
  setName: string,
  updateRevision: string | undefined,
  now: Date,
  scaleDownTo?: HandoverInput['scaleDownTo'],
): string | undefined {
  const ready = readyOthers(pods, primary, setName, scaleDownTo).filter((p) => !evictionAllowedRecently(p, now));
  const updated = ready.filter((p) => updateRevision !== undefined && podRevision(p) === updateRevision);
  return nameOf(updated[0] ?? ready[0] ?? {}) || undefined;
}

function readyOthers(pods: readonly V1Pod[], primary: string, setName: string, scaleDownTo?: HandoverInput['scaleDownTo']): V1Pod[] {
  const stays = (pod: V1Pod): boolean => {
    if (!scaleDownTo) return true;
    const ordinal = podOrdinal(nameOf(pod), setName);
    return ordinal !== undefined && ordinal - scaleDownTo.ordinalStart < scaleDownTo.replicas;
  };
  return pods.filter((p) => nameOf(p) !== primary && isReady(p) && stays(p)).sort(byOrdinal(setName));
}

/**
 * No candidate only because every other Ready pod is being evicted: wait for them to go (and
 * come back), rather than count it a failure; the marks are stale within a minute.
 */
function waitForStayingPod(input: HandoverInput, primary: string): HandoverStep | undefined {
  const evicted = readyOthers(input.pods, primary, input.setName, input.scaleDownTo).filter((p) => evictionAllowedRecently(p, input.now));
  if (evicted.length === 0) return undefined;
  return { kind: 'wait', retryAfterMs: VERIFY_POLL_MS, reason: `every other Ready pod of ${input.setName} is being evicted (${evicted.map(nameOf).join(', ')}); waiting for one that stays` };
}

function labelsOf(pod: V1Pod | undefined): Record<string, string> | undefined {
  return pod?.metadata?.labels;
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10}s`;
}

function elapsed(since: string | undefined, now: Date): number {
  const at = since === undefined ? NaN : new Date(since).getTime();
  return Number.isNaN(at) ? 0 : Math.max(0, now.getTime() - at);
}

/** What the labels show, in words, for a HandoverFailed Event. */
function labelsSeen(primaries: readonly V1Pod[], from: string): string {
  if (primaries.length === 0) return 'no pod matches the primary selector';
  const names = primaries.map(nameOf);
  if (names.length === 1 && names[0] === from) return `${from} still matches the primary selector`;
  const notReady = primaries.filter((p) => !isReady(p)).map(nameOf);
  return `${names.join(', ')} ${names.length === 1 ? 'matches' : 'match'} the primary selector${notReady.length > 0 ? ` (not Ready: ${notReady.join(', ')})` : ''}`;
}

/**
 * The primary's pod when its ordinal lies at or above `replicas`: a scale-down removes it,
 * and the StatefulSet controller deletes such pods at once, with no eviction to intercept.
 */
export function scaledDownPrimary(pods: readonly V1Pod[], settings: HandoverSettings, setName: string, replicas: number, start: number): V1Pod | undefined {
  return pods.find((p) => {
    const ordinal = podOrdinal(nameOf(p), setName);
    return ordinal !== undefined && ordinal - start >= replicas && matches(settings.selector, labelsOf(p));
  });
}

/**
 * The next move of a set's handover, from its settings, the state annotation, its pods (labels
 * decide, never an answer) and the clock. Pure; HandoverRunner carries it out.
 */
export function decideHandover(input: HandoverInput): HandoverStep {
  const { settings, pods, setName } = input;
  const primaries = pods.filter((p) => !isTerminating(p) && matches(settings.selector, labelsOf(p))).sort(byOrdinal(setName));
  if (input.state.kind === 'unreadable') {
    return {
      kind: 'write',
      state: undefined,
      event: { type: 'Warning', reason: REASON_HANDOVER_FAILED, message: `Removed ${HANDOVER_STATE_ANNOTATION}: ${JSON.stringify(input.state.raw.slice(0, 200))} is not a handover rollguard wrote; deciding afresh from the labels` },
      log: 'unreadable handover state removed',
    };
  }
  if (input.state.kind === 'state') return continueHandover(input, input.state.state, primaries);

  const cancelled = pods.find((p) => !isTerminating(p) && p.metadata?.annotations?.[HANDOVER_REQUEST_ANNOTATION] === HANDOVER_CANCEL_VALUE);
  if (cancelled) return cancelWithoutHandover(nameOf(cancelled));

  const requested = pods
    .filter((p) => !isTerminating(p) && p.metadata?.annotations?.[HANDOVER_REQUEST_ANNOTATION] === HANDOVER_REQUEST_VALUE)
    .sort(byOrdinal(setName));
  const first = requested[0];
  if (first) {
    const only = primaries.length === 1 ? primaries[0] : undefined;
    if (only && nameOf(only) === nameOf(first)) return start(input, only, 'requested');
    return {
      kind: 'clear-request',
      pod: nameOf(first),
      value: HANDOVER_REQUEST_VALUE,
      event: {
        type: 'Normal',
        reason: REASON_HANDOVER_SKIPPED,
        message: `Handover requested on pod ${nameOf(first)}, which is not the primary (${labelsSeen(primaries, nameOf(first))}): nothing to hand over; request removed`,
      },
    };
  }

  if (input.replacing.length === 0) return { kind: 'open' };
  const pod = input.replacing[0]!;
  if (primaries.length !== 1) {
    const several = primaries.length > 1;
    return {
      kind: 'blocked',
      pod,
      cause: several ? 'primary:several' : 'primary:none',
      message: `${input.scaleDownTo ? 'Scale-down held' : 'Rollout blocked'} before pod ${pod}: ${several ? `${primaries.length} pods (${primaries.map(nameOf).join(', ')}) match` : 'no pod matches'} the primary selector ${JSON.stringify(settings.selectorText)}, so rollguard cannot tell that replacing ${pod} is safe`,
    };
  }
  const primary = primaries[0]!;
  if (!input.replacing.includes(nameOf(primary))) return { kind: 'open' };
  return start(input, primary, input.scaleDownTo ? 'scale-down' : 'rollout');
}

function start(input: HandoverInput, primary: V1Pod, trigger: HandoverTrigger): HandoverStep {
  const { settings, now, setName } = input;
  const from = nameOf(primary);
  const candidate = chooseCandidate(input.pods, from, setName, input.updateRevision, now, input.scaleDownTo);
  if (candidate === undefined) {
    const wait = waitForStayingPod(input, from);
    if (wait) return wait;
  }
  const base: HandoverState = {
    from,
    fromUid: primary.metadata?.uid ?? '',
    to: candidate ?? '',
    trigger,
    startedAt: now.toISOString(),
    attempt: 1,
    fallback: false,
  };
  if (candidate === undefined) {
    const why = `no other pod of ${setName}${input.scaleDownTo ? ` that the scale-down to ${input.scaleDownTo.replicas} keeps` : ''} is Ready to take the primary role from ${from}`;
    if (trigger === 'requested') {
      return {
        kind: 'write',
        state: undefined,
        event: { type: 'Warning', reason: REASON_HANDOVER_FAILED, message: `Handover requested on pod ${from} not started: ${why}; request removed` },
        result: 'abandoned',
        clearRequest: from,
        log: 'requested handover without a candidate',
      };
    }
    if (settings.onFailure === 'proceed') {
      return {
        kind: 'write',
        state: { ...base, outcome: 'proceed' },
        event: { type: 'Warning', reason: REASON_HANDOVER_FAILED, message: `No handover before ${stopping(trigger)} pod ${from}: ${why}; proceeding (handover-on-failure: proceed), the application fails over` },
        result: 'proceeded',
        log: 'no candidate, proceeding',
      };
    }
    return { kind: 'blocked', pod: from, cause: 'handover:no-candidate', message: `${trigger === 'scale-down' ? 'Scale-down held' : 'Rollout blocked'} before pod ${from}, the primary: ${why}` };
  }
  const state: HandoverState = { ...base, calledAt: now.toISOString() };
  return {
    kind: 'write',
    state,
    event: startedEvent(state, settings, startedWhy(trigger, from)),
    call: callOf(state, settings),
    log: 'handover started',
  };
}

/** How the write the handover comes before stops the pod, in Event messages. */
function stopping(trigger: HandoverTrigger): string {
  return trigger === 'scale-down' ? 'the scale-down removes' : 'replacing';
}

function startedWhy(trigger: HandoverTrigger, from: string): string {
  if (trigger === 'requested') return 'asked by the annotation on the pod';
  return trigger === 'scale-down' ? `before a scale-down removes pod ${from}` : `before the rollout replaces pod ${from}`;
}

function startedEvent(state: HandoverState, settings: HandoverSettings, why: string): HandoverEvent {
  const action = state.fallback ? settings.fallback : settings.action;
  const attempt = state.fallback ? 'the fallback' : `attempt ${state.attempt} of ${settings.retries}`;
  return {
    type: 'Normal',
    reason: state.fallback ? REASON_HANDOVER_FALLBACK : REASON_HANDOVER_STARTED,
    message: `Handing the primary role over from ${state.from} to ${state.to} (${attempt}, ${action ? describeAction(action) : 'no action'}), ${why}`,
  };
}

function callOf(state: HandoverState, settings: HandoverSettings): HandoverCall | undefined {
  const action = state.fallback ? settings.fallback : settings.action;
  if (!action) return undefined;
  const target = action.kind === 'http' && action.on === 'candidate' ? state.to : state.from;
  return { action, target, primary: state.from, candidate: state.to, attempt: state.attempt, fallback: state.fallback };
}

function continueHandover(input: HandoverInput, state: HandoverState, primaries: readonly V1Pod[]): HandoverStep {
  const { settings, now, pods, setName } = input;
  const fromPod = pods.find((p) => nameOf(p) === state.from);
  const clearRequest = state.trigger === 'requested' ? state.from : undefined;
  const fromGone = !fromPod || fromPod.metadata?.uid !== state.fromUid || isTerminating(fromPod);
  const stillPrimary = fromPod !== undefined && !fromGone && matches(settings.selector, labelsOf(fromPod));
  const newPrimary = primaries.find((p) => nameOf(p) !== state.from && isReady(p));

  if (!stillPrimary && newPrimary && !(state.outcome === 'proceed' && fromGone)) {
    const durationMs = elapsed(state.startedAt, now);
    return {
      kind: 'write',
      state: undefined,
      event: {
        type: 'Normal',
        reason: REASON_HANDOVER_SUCCEEDED,
        message: `Handed the primary role over from ${state.from} to ${nameOf(newPrimary)} in ${seconds(durationMs)} (${state.fallback ? 'by the fallback' : `attempt ${state.attempt}`})${state.trigger === 'requested' ? '; request removed' : ''}`,
      },
      result: 'succeeded',
      durationMs,
      ...(clearRequest ? { clearRequest } : {}),
      log: 'handover succeeded',
    };
  }
  if (fromGone) {
    // the step that replaced the pod went on as chosen (proceed), or the pod went away under us
    if (state.outcome === 'proceed') return { kind: 'write', state: undefined, log: 'primary pod replaced after a failed handover (proceed)' };
    // an application demotes before it promotes: a pod deleted in between takes nothing with it, the role may
    // still arrive until the call's deadline; the call's own answer died with the pod, so only the labels tell
    const leftMs = state.calledAt === undefined ? 0 : settings.timeoutMs - elapsed(state.calledAt, now);
    if (leftMs > 0) {
      return { kind: 'wait', retryAfterMs: Math.min(leftMs, VERIFY_POLL_MS), reason: `${state.from} went away mid-handover; waiting for a Ready pod to take the primary role (${seconds(leftMs)} left)` };
    }
    return {
      kind: 'write',
      state: undefined,
      event: { type: 'Warning', reason: REASON_HANDOVER_FAILED, message: `Handover from ${state.from} ended: the pod was deleted or replaced before the role moved (${labelsSeen(primaries, state.from)})` },
      result: 'abandoned',
      log: 'primary pod went away mid-handover',
    };
  }
  if (fromPod.metadata?.annotations?.[HANDOVER_REQUEST_ANNOTATION] === HANDOVER_CANCEL_VALUE) return cancelHandover(input, state);
  // a rollout replaces only pods off the update revision: one on it (the template went back) needs no handover
  if (state.trigger === 'rollout' && input.updateRevision !== undefined && podRevision(fromPod) === input.updateRevision) {
    return {
      kind: 'write',
      state: undefined,
      event: {
        type: 'Normal',
        reason: REASON_HANDOVER_SKIPPED,
        message: `Handover from ${state.from} ended: the rollout no longer replaces ${state.from}, which runs the update revision ${input.updateRevision} (the template went back, e.g. kubectl rollout undo); ${state.from} stays primary`,
      },
      result: 'abandoned',
      log: 'rolled back: the primary runs the update revision, handover dropped',
    };
  }
  // applied after every attempt failed, as on-failure proceed chose: nothing was skipped
  if (state.trigger === 'scale-down' && !input.scaleDownTo && state.outcome === 'proceed') {
    return { kind: 'write', state: undefined, log: 'scale-down went on after a failed handover (proceed)' };
  }
  if (state.trigger === 'scale-down' && !input.scaleDownTo) {
    // the scale-down it was for is no longer held (raised again, or its record removed)
    return {
      kind: 'write',
      state: undefined,
      event: { type: 'Normal', reason: REASON_HANDOVER_SKIPPED, message: `Handover from ${state.from} ended: the scale-down it was for is no longer held; ${state.from} stays primary` },
      result: 'abandoned',
      log: 'scale-down no longer held, handover dropped',
    };
  }
  if (state.outcome === 'proceed') return { kind: 'open' };
  if (state.outcome === 'gave-up') return { kind: 'held', reason: `the handover from ${state.from} gave up; waiting for a cancel, a rollback or the role to move` };

  if (state.calledAt === undefined) {
    const leftMs = state.outcome === 'paused' ? settings.pauseTimeoutMs - elapsed(state.pausedAt ?? state.startedAt, now) : Infinity;
    if (leftMs <= 0) return giveUp(input, state);
    const nextInMs = state.nextAt === undefined ? 0 : new Date(state.nextAt).getTime() - now.getTime();
    if (nextInMs > 0) return { kind: 'wait', retryAfterMs: Math.min(nextInMs, leftMs), reason: `next handover attempt of ${setName} in ${seconds(nextInMs)}` };
    // re-read before every attempt: an application that moved the role by itself needs no call
    if (!stillPrimary) return { kind: 'wait', retryAfterMs: VERIFY_POLL_MS, reason: `${state.from} no longer matches the primary selector; waiting for a Ready pod to match` };
    const candidate = chooseCandidate(pods, state.from, setName, input.updateRevision, now, input.scaleDownTo);
    if (candidate === undefined) {
      return waitForStayingPod(input, state.from) ?? attemptFailed(input, state, `no other pod is Ready to take the role`);
    }
    const next: HandoverState = { ...state, to: candidate, calledAt: now.toISOString() };
    delete next.nextAt;
    const paused = state.outcome === 'paused';
    return {
      kind: 'write',
      state: next,
      ...(paused ? {} : { event: startedEvent(next, settings, startedWhy(state.trigger, state.from)) }),
      call: callOf(next, settings),
      log: paused ? 'paused handover: trying again' : 'handover attempt',
    };
  }

  const answer = input.answer && input.answer.attempt === state.attempt && input.answer.fallback === state.fallback ? input.answer : undefined;
  const deadlineInMs = settings.timeoutMs - elapsed(state.calledAt, now);
  if (answer?.failed !== true && deadlineInMs > 0) {
    return { kind: 'wait', retryAfterMs: Math.min(deadlineInMs, VERIFY_POLL_MS), reason: `waiting for the primary label to move from ${state.from} (${seconds(deadlineInMs)} left)` };
  }
  const said = answer
    ? `the endpoint answered ${answer.detail}`
    : 'no answer was recorded (rollguard restarted, or the call outlived the timeout)';
  return attemptFailed(input, state, `${said}; after ${seconds(elapsed(state.calledAt, now))} ${labelsSeen(primaries, state.from)}`);
}

function attemptFailed(input: HandoverInput, state: HandoverState, what: string): HandoverStep {
  const { settings, now } = input;
  const nextAt = new Date(now.getTime() + settings.intervalMs).toISOString();
  const retry = (changes: Partial<HandoverState>): HandoverState => {
    const next: HandoverState = { ...state, ...changes, nextAt };
    delete next.calledAt;
    return next;
  };
  const which = state.fallback ? 'the fallback' : `attempt ${state.attempt} of ${settings.retries}`;
  const failed = `Handover of the primary role from ${state.from} to ${state.to} failed (${which}): ${what}`;
  const warn = (message: string): HandoverEvent => ({ type: 'Warning', reason: REASON_HANDOVER_FAILED, message });
  const interval = seconds(settings.intervalMs);

  if (state.outcome === 'paused') {
    return { kind: 'write', state: retry({ attempt: state.attempt + 1 }), log: `paused handover: attempt failed: ${what}` };
  }
  if (!state.fallback && state.attempt < settings.retries) {
    return { kind: 'write', state: retry({ attempt: state.attempt + 1 }), event: warn(`${failed}; next attempt in ${interval}`), log: 'handover attempt failed' };
  }
  if (!state.fallback && settings.fallback) {
    return { kind: 'write', state: retry({ attempt: state.attempt + 1, fallback: true }), event: warn(`${failed}; the fallback (${describeAction(settings.fallback)}) in ${interval}`), log: 'handover attempts failed, fallback next' };
  }
  if (state.trigger === 'requested') {
    return { kind: 'write', state: undefined, event: warn(`${failed}; every attempt failed, ${state.from} stays primary; request removed`), result: 'abandoned', clearRequest: state.from, log: 'requested handover failed' };
  }
  if (settings.onFailure === 'proceed') {
    return {
      kind: 'write',
      state: { ...retry({}), outcome: 'proceed' },
      event: warn(`${failed}; every attempt failed: ${state.trigger === 'scale-down' ? 'scaling down, removing' : 'replacing'} ${state.from} anyway (handover-on-failure: proceed), the application fails over`),
      result: 'proceeded',
      log: 'handover failed, proceeding',
    };
  }
  return {
    kind: 'write',
    state: { ...retry({ attempt: state.attempt + 1, fallback: false }), outcome: 'paused', pausedAt: now.toISOString() },
    event: warn(
      state.trigger === 'scale-down'
        ? `${failed}; every attempt failed: the scale-down stays held, pod ${state.from} stays primary and is not removed; rollguard tries again every ${interval} for ${duration(settings.pauseTimeoutMs)}`
        : `${failed}; every attempt failed: the rollout is paused at pod ${state.from}, which stays primary and is not replaced; rollguard tries again every ${interval} for ${duration(settings.pauseTimeoutMs)}`,
    ),
    result: 'paused',
    log: 'handover failed, rollout paused',
  };
}

/** A pause timeout in Event messages: `1h`, `90s`, `2h30m`. */
function duration(ms: number): string {
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const sec = Math.round((ms % 60_000) / 1000);
  return [h ? `${h}h` : '', m ? `${m}m` : '', sec || (!h && !m) ? `${sec}s` : ''].join('');
}

/** What a person can do about a held step, in the Warning that says it is held for them. */
function waysOn(setName: string, from: string): string {
  return `to go on: move the role yourself; or fix the endpoint and try again (kubectl annotate statefulset ${setName} ${HANDOVER_STATE_ANNOTATION}-); or cancel (kubectl annotate pod ${from} ${HANDOVER_REQUEST_ANNOTATION}=${HANDOVER_CANCEL_VALUE}: no handover, the application fails over); or roll back`;
}

/** Paused past the pause timeout: no more calls; the step stays held, for a person. */
function giveUp(input: HandoverInput, state: HandoverState): HandoverStep {
  const { settings } = input;
  const next: HandoverState = { ...state, outcome: 'gave-up' };
  delete next.nextAt;
  const held = state.trigger === 'scale-down' ? 'the scale-down stays held' : `the rollout stays paused at pod ${state.from}`;
  return {
    kind: 'write',
    state: next,
    event: {
      type: 'Warning',
      reason: REASON_HANDOVER_FAILED,
      message: `Handover of the primary role from ${state.from} gave up after ${duration(settings.pauseTimeoutMs)} paused (${state.attempt - 1} attempts, ${HANDOVER_PAUSE_TIMEOUT}): no more calls; ${held}, ${state.from} stays primary; ${waysOn(input.setName, state.from)}`,
    },
    result: 'gave_up',
    log: 'paused handover gave up',
  };
}

/** The cancel on the primary's pod: the step the handover guards goes on without one; a requested handover is dropped. */
function cancelHandover(input: HandoverInput, state: HandoverState): HandoverStep {
  const by = `${HANDOVER_REQUEST_ANNOTATION}=${HANDOVER_CANCEL_VALUE} on the pod`;
  if (state.trigger === 'requested' || state.outcome === 'proceed') {
    return {
      kind: 'write',
      state: state.trigger === 'requested' ? undefined : state,
      event: {
        type: 'Normal',
        reason: REASON_HANDOVER_CANCELLED,
        message:
          state.trigger === 'requested'
            ? `Requested handover from ${state.from} cancelled (${by}): ${state.from} stays primary; cancel removed`
            : `Cancel on pod ${state.from} removed: its handover had ended already, the step goes on as decided`,
      },
      ...(state.trigger === 'requested' ? { result: 'cancelled' as const } : {}),
      clearCancel: state.from,
      log: 'handover cancelled',
    };
  }
  const next: HandoverState = { ...state, outcome: 'proceed' };
  delete next.calledAt;
  delete next.nextAt;
  const step = state.trigger === 'scale-down' ? `the scale-down to ${input.scaleDownTo?.replicas ?? '?'} replicas removes` : 'the rollout replaces';
  return {
    kind: 'write',
    state: next,
    event: {
      type: 'Warning',
      reason: REASON_HANDOVER_CANCELLED,
      message: `Handover from ${state.from} cancelled (${by}) after ${state.attempt} ${state.attempt === 1 ? 'attempt' : 'attempts'}: ${step} ${state.from} without a handover, the application fails over; cancel removed`,
    },
    result: 'cancelled',
    clearCancel: state.from,
    log: 'handover cancelled, proceeding without one',
  };
}

/** A cancel on a pod while no handover is in flight: nothing to cancel. */
function cancelWithoutHandover(pod: string): HandoverStep {
  return {
    kind: 'clear-request',
    pod,
    value: HANDOVER_CANCEL_VALUE,
    event: { type: 'Normal', reason: REASON_HANDOVER_SKIPPED, message: `Cancel on pod ${pod} removed: no handover is in flight` },
  };
}
