import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import jsonpatch from 'fast-json-patch';
import type { Logger } from 'pino';
import type { TargetLookups } from '../egress/resolve.js';
import { errorText, statusCode } from '../kube/api-status.js';
import type { EventSpec } from '../kube/events.js';
import type { Metrics } from '../metrics.js';
import type { GateVerdict } from '../rollout/disruption-gate.js';
import { isTerminating } from '../rollout/pods.js';
import { callHttpAction, credentialsFrom, type HandoverCredentials } from './call.js';
import { decideHandover, REASON_PRIMARY_SCALED_DOWN, scaledDownPrimary, type CallAnswer, type HandoverCall, type HandoverInput, type HandoverStep } from './decision.js';
import { handoverSettings, HANDOVER_CREDENTIALS_ANNOTATION, type HandoverSettings } from './settings.js';
import {
  evictionAllowedRecently,
  HANDOVER_CANCEL_VALUE,
  HANDOVER_CANDIDATE_ANNOTATION,
  HANDOVER_REQUEST_ANNOTATION,
  HANDOVER_REQUEST_VALUE,
  handoverStateOps,
  readHandoverState,
  setPodAnnotation,
  type HandoverState,
} from './state.js';

const NOT_FOUND = 404;
const UNPROCESSABLE = 422;

export interface HandoverRunnerDeps {
  /** JSON Patch of a pod, e.g. its annotations; gives the pod as that write left it. */
  patchPod(namespace: string, name: string, ops: Operation[]): Promise<V1Pod>;
  /** The Secret's data (base64 values), undefined when it does not exist. */
  readSecret(namespace: string, name: string): Promise<Record<string, string> | undefined>;
  lookups: TargetLookups;
  /** Queues the set again (a call answered). */
  enqueue(key: string): void;
  metrics: Pick<Metrics, 'handovers' | 'handoverDuration'>;
  logger: Logger;
  signal: AbortSignal;
}

/**
 * The I/O around decideHandover for one set, asked through the handover gate (gate.ts) before
 * the rollout carries out its own decision (one reconcile per set at a time: one handover in
 * flight). Calls run off the queue; their answer waits here for the next reconcile.
 */
export class HandoverRunner {
  private readonly answers = new Map<string, CallAnswer>();
  private readonly inFlight = new Map<string, Promise<void>>();
  /**
   * Requests this term removed: pod key → the pod's resourceVersion when it decided to. While
   * the cache still shows that version, the request it shows is one already handled.
   */
  private readonly cleared = new Map<string, { set: string; resourceVersion: string }>();
  /** By set: uids of primary pods a scale-down removes, already reported; a uid leaves once its pod is gone from the set's pods. */
  private readonly scaledDown = new Map<string, Set<string>>();

  constructor(private readonly deps: HandoverRunnerDeps) {}

  /** The set is gone or asks for no handover: nothing about it is kept. */
  forget(key: string): void {
    this.answers.delete(key);
    this.scaledDown.delete(key);
    for (const [podKey, entry] of this.cleared) if (entry.set === key) this.cleared.delete(podKey);
  }

  /** How many sets or pods each per-object map holds; for tests and /status. */
  memory(): { answers: number; in_flight: number; cleared: number; scaled_down: number } {
    return { answers: this.answers.size, in_flight: this.inFlight.size, cleared: this.cleared.size, scaled_down: this.scaledDown.size };
  }

  async settled(): Promise<void> {
    await Promise.all([...this.inFlight.values()]);
  }

  /**
   * `write` patches the set behind its resourceVersion (a conflict throws: decided again on
   * the fresh set); `record` records an Event on the set.
   */
  async gate(
    key: string,
    set: V1StatefulSet,
    pods: readonly V1Pod[],
    replacing: readonly string[],
    io: { write(ops: Operation[]): Promise<void>; record(spec: EventSpec): Promise<void>; now: Date },
    scaleDownTo?: HandoverInput['scaleDownTo'],
  ): Promise<GateVerdict> {
    const parsed = handoverSettings(set);
    if (parsed === undefined) return { open: true };
    const namespace = set.metadata?.namespace ?? '';
    const setName = set.metadata?.name ?? '';
    if (!parsed.ok) {
      const pod = replacing[0];
      return pod === undefined
        ? { open: true }
        : { open: false, blocked: { pod, cause: 'handover:settings', message: `${scaleDownTo ? 'Scale-down held' : 'Rollout blocked'} before pod ${pod}: the handover settings are invalid: ${parsed.reason}` } };
    }
    await this.reportScaleDown(key, set, pods, parsed.settings, io.record);
    const current = this.withoutHandledRequests(namespace, pods);
    const step: HandoverStep = decideHandover({
      namespace,
      setName,
      settings: parsed.settings,
      state: readHandoverState(set),
      pods: current,
      replacing,
      updateRevision: set.status?.updateRevision,
      ...(scaleDownTo ? { scaleDownTo } : {}),
      now: io.now,
      answer: this.answers.get(key),
    });
    const log = this.deps.logger;
    switch (step.kind) {
      case 'open':
        return { open: true };
      case 'blocked':
        return { open: false, blocked: { pod: step.pod, cause: step.cause, message: step.message } };
      case 'wait':
        log.debug({ statefulSet: key, reason: step.reason }, 'handover: waiting');
        return { open: false, requeueAfterMs: step.retryAfterMs };
      case 'held':
        log.debug({ statefulSet: key, reason: step.reason }, 'handover: held');
        return { open: false };
      case 'clear-request':
        await this.clearRequest(key, namespace, step.pod, current, step.value);
        log.info({ statefulSet: key, pod: step.pod }, step.event.message);
        await io.record({ ...step.event, action: 'Handover' });
        return { open: false, requeueAfterMs: 0 };
      case 'write': {
        await io.write(handoverStateOps(set, step.state));
        this.answers.delete(key);
        log.info({ statefulSet: key, state: step.state, call: step.call && { target: step.call.target, attempt: step.call.attempt, fallback: step.call.fallback } }, `handover: ${step.log}`);
        if (step.event) await io.record({ ...step.event, action: 'Handover' });
        if (step.result) this.deps.metrics.handovers.inc({ result: step.result });
        if (step.durationMs !== undefined) this.deps.metrics.handoverDuration.observe(step.durationMs / 1000);
        if (step.clearRequest) await this.clearRequest(key, namespace, step.clearRequest, current);
        if (step.clearCancel) await this.clearRequest(key, namespace, step.clearCancel, current, HANDOVER_CANCEL_VALUE);
        if (step.call && step.state) this.startCall(key, set, pods, step.call, parsed.settings.timeoutMs, step.state);
        // the write's watch event queues the set again
        return { open: false };
      }
    }
  }

  /**
   * Told of every change of a set: a scale-down is seen here, in the same instant the
   * StatefulSet controller sees it, while the pod it removes is still in the cache.
   */
  noteSetChange(previous: V1StatefulSet | undefined, current: V1StatefulSet, pods: readonly V1Pod[], record: (spec: EventSpec) => Promise<void>): void {
    if (!previous || (current.spec?.replicas ?? 1) >= (previous.spec?.replicas ?? 1)) return;
    const parsed = handoverSettings(current);
    if (!parsed?.ok) return;
    const key = `${current.metadata?.namespace ?? ''}/${current.metadata?.name ?? ''}`;
    this.reportScaleDown(key, current, pods, parsed.settings, record).catch((err: unknown) => {
      this.deps.logger.warn({ statefulSet: key, err: errorText(err) }, 'recording a scale-down of the primary failed');
    });
  }

  /**
   * Pods a held scale-down rollguard applied itself removes: its own Events (ScaledDown, and
   * HandoverFailed when it proceeded) said why, so no PrimaryScaledDown follows for them.
   */
  acknowledgeRemoval(key: string, pods: readonly V1Pod[]): void {
    for (const pod of pods) if (pod.metadata?.uid) this.reportedFor(key).add(pod.metadata.uid);
  }

  private reportedFor(key: string): Set<string> {
    let uids = this.scaledDown.get(key);
    if (!uids) this.scaledDown.set(key, (uids = new Set()));
    return uids;
  }

  /** A Warning, once per pod, when a scale-down removes the primary: too late to hand over, never silent. */
  private async reportScaleDown(key: string, set: V1StatefulSet, pods: readonly V1Pod[], settings: HandoverSettings, record: (spec: EventSpec) => Promise<void>): Promise<void> {
    const replicas = set.spec?.replicas ?? 1;
    const pod = scaledDownPrimary(pods, settings, set.metadata?.name ?? '', replicas, set.spec?.ordinals?.start ?? 0);
    const reported = this.scaledDown.get(key);
    if (reported) {
      const present = new Set(pods.map((p) => p.metadata?.uid));
      for (const gone of [...reported].filter((u) => !present.has(u))) reported.delete(gone);
      if (reported.size === 0) this.scaledDown.delete(key);
    }
    const uid = pod?.metadata?.uid;
    if (!pod || !uid || this.scaledDown.get(key)?.has(uid)) return;
    this.reportedFor(key).add(uid);
    const message = `Scaled down to ${replicas} replicas: pod ${pod.metadata?.name ?? ''}, the primary, is removed by the StatefulSet controller without a handover (a scale-down deletes pods directly); scale down only after moving the role, e.g. kubectl annotate pod ${pod.metadata?.name ?? ''} rollguard.io/handover=requested`;
    this.deps.logger.warn({ statefulSet: key, pod: pod.metadata?.name }, message);
    await record({ type: 'Warning', reason: REASON_PRIMARY_SCALED_DOWN, message, action: 'Handover' });
  }

  private startCall(key: string, set: V1StatefulSet, pods: readonly V1Pod[], call: HandoverCall, timeoutMs: number, state: HandoverState): void {
    if (this.deps.signal.aborted) return;
    const namespace = set.metadata?.namespace ?? '';
    const setName = set.metadata?.name ?? '';
    const settings = handoverSettings(set);
    if (!settings?.ok) return;
    const run = async (): Promise<{ failed: boolean; detail: string }> => {
      const unfit = await this.claimCandidate(namespace, call.candidate, new Date(new Date(state.calledAt ?? Date.now()).getTime() + timeoutMs));
      if (unfit !== undefined) return { failed: true, detail: `not called: ${unfit}` };
      if (call.action.kind === 'annotate') {
        await this.annotate(namespace, call.target, call.action.key, call.action.value);
        return { failed: false, detail: `annotation ${call.action.key}=${call.action.value} set on pod ${call.target}` };
      }
      let credentials: HandoverCredentials | undefined;
      const secret = settings.settings.credentials;
      if (secret !== undefined) {
        const data = await this.deps.readSecret(namespace, secret);
        if (data === undefined) return { failed: true, detail: `not called: Secret ${secret} (${HANDOVER_CREDENTIALS_ANNOTATION}) does not exist` };
        const read = credentialsFrom(data);
        if (typeof read === 'string') return { failed: true, detail: `not called: Secret ${secret}: ${read}` };
        credentials = read;
      }
      return callHttpAction(call, { namespace, setName, serviceName: set.spec?.serviceName, settings: settings.settings, pods, lookups: this.deps.lookups, credentials, timeoutMs, signal: this.deps.signal });
    };
    const done = run()
      .catch((err: unknown) => ({ failed: true, detail: `failed: ${errorText(err)}` }))
      .then((result) => {
        this.deps.logger.info({ statefulSet: key, target: call.target, attempt: call.attempt, fallback: call.fallback, failed: result.failed, detail: result.detail }, 'handover: action done');
        this.answers.set(key, { attempt: state.attempt, fallback: state.fallback, ...result });
      })
      .finally(() => {
        this.inFlight.delete(key);
        if (!this.deps.signal.aborted) this.deps.enqueue(key);
      });
    this.inFlight.set(key, done);
  }

  /**
   * Claims the candidate until the attempt's deadline before anything may make it the primary,
   * and says why not to call when the pod this write returned is going away: the eviction
   * guard marks a pod before it allows its eviction, and defers a claimed one (see state.ts).
   */
  private async claimCandidate(namespace: string, candidate: string, until: Date): Promise<string | undefined> {
    if (candidate === '') return undefined;
    let pod: V1Pod;
    try {
      pod = await this.annotate(namespace, candidate, HANDOVER_CANDIDATE_ANNOTATION, until.toISOString());
    } catch (err) {
      if (statusCode(err) === NOT_FOUND) return `the candidate ${candidate} is gone`;
      throw err;
    }
    if (isTerminating(pod)) return `the candidate ${candidate} is terminating`;
    if (evictionAllowedRecently(pod, new Date())) return `the candidate ${candidate} is being evicted`;
    return undefined;
  }

  private annotate(namespace: string, pod: string, key: string, value: string): Promise<V1Pod> {
    return setPodAnnotation((ops) => this.deps.patchPod(namespace, pod, ops), key, value);
  }

  /** The pods with the requests this term already removed taken off, where the cache has not caught up. */
  private withoutHandledRequests(namespace: string, pods: readonly V1Pod[]): readonly V1Pod[] {
    return pods.map((pod) => {
      const podKey = `${namespace}/${pod.metadata?.name ?? ''}`;
      const at = this.cleared.get(podKey)?.resourceVersion;
      if (at === undefined) return pod;
      if (at !== pod.metadata?.resourceVersion) {
        this.cleared.delete(podKey);
        return pod;
      }
      const annotations = { ...pod.metadata?.annotations };
      delete annotations[HANDOVER_REQUEST_ANNOTATION];
      return { ...pod, metadata: { ...pod.metadata, annotations } };
    });
  }

  /** Removes the request (or a cancel), only while it still says `value`; a pod gone or changed has nothing left to remove. */
  private async clearRequest(key: string, namespace: string, pod: string, seen: readonly V1Pod[], value = HANDOVER_REQUEST_VALUE): Promise<void> {
    const resourceVersion = seen.find((p) => p.metadata?.name === pod)?.metadata?.resourceVersion;
    if (resourceVersion !== undefined) this.cleared.set(`${namespace}/${pod}`, { set: key, resourceVersion });
    const path = `/metadata/annotations/${jsonpatch.escapePathComponent(HANDOVER_REQUEST_ANNOTATION)}`;
    try {
      await this.deps.patchPod(namespace, pod, [
        { op: 'test', path, value },
        { op: 'remove', path },
      ]);
    } catch (err) {
      const code = statusCode(err);
      if (code === NOT_FOUND || code === UNPROCESSABLE) return;
      throw new Error(`removing ${HANDOVER_REQUEST_ANNOTATION} from pod ${namespace}/${pod}: ${errorText(err)}`, { cause: err });
    }
  }
}
