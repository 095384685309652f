import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import type { Logger } from 'pino';
import { ConflictError, errorText, isConflict, statusCode } from '../kube/api-status.js';
import type { EventRecorder, EventSpec, EventSubject } from '../kube/events.js';
import { objectKey, splitObjectKey } from '../kube/informer.js';
import type { Metrics } from '../metrics.js';
import { BlockedCauses } from './blocked-causes.js';
import {
  DEFAULT_REPLICAS,
  HEALTH_URL_ANNOTATION,
  decideRollout,
  isHealthGated,
  type PartitionEvent,
  type RolloutDecision,
} from './decision.js';
import { policyDenial, REASON_WRITE_DENIED } from '../kube/policy-denial.js';
import type { HealthResult } from './health-probe.js';
import { heldPartition, partitionPatch } from './hold.js';
import { lastStepAt, lastStepOp } from './last-step.js';
import type { DisruptionGate, GateRequest, GateVerdict } from './disruption-gate.js';
import { podsReplacedBy } from './replaced-pods.js';
import { applyScaleDownOps, dropRecordOps, heldScaleDown, WANTED_REPLICAS_ANNOTATION, type HeldScaleDownOf } from './scale-down-hold.js';

/** Event reasons besides the decision's own (PartitionUpdate, RolloutComplete, Hold). */
export const REASON_ROLLOUT_BLOCKED = 'RolloutBlocked';
export const REASON_FORCED_ROLLBACK = 'ForcedRollback';
/** A held scale-down (rollguard.io/wanted-replicas): applied, or its record dropped. */
export const REASON_SCALED_DOWN = 'ScaledDown';
export const REASON_SCALE_DOWN_DROPPED = 'ScaleDownDropped';
const ACTION_SCALE = 'Scale';
/** A hold written because the spec changed is the same kind of change as the decision's own holds. */
const HOLD_EVENT: PartitionEvent = 'Hold';
const ACTION_UPDATE_PARTITION = 'UpdatePartition';
const ACTION_DELETE_POD = 'DeletePod';
const ACTION_WAIT = 'Wait';

/**
 * A health check result is used for the decision right after it arrives; one older than this
 * (the queue was slow, the set changed meanwhile) is asked again rather than trusted.
 */
const HEALTH_RESULT_MAX_AGE_MS = 5_000;
const MS_PER_SECOND = 1000;

export interface RolloutReconcilerDeps {
  statefulSet(namespace: string, name: string): V1StatefulSet | undefined;
  /** The pods the StatefulSet controls, from the cache. */
  podsOf(namespace: string, setName: string): V1Pod[];
  pod(namespace: string, name: string): V1Pod | undefined;
  patchStatefulSet(namespace: string, name: string, ops: Operation[]): Promise<V1StatefulSet>;
  /** Deletes the pod only if it still has this uid and resourceVersion. */
  deletePod(namespace: string, name: string, preconditions: { uid: string; resourceVersion: string }): Promise<void>;
  probeHealth(set: V1StatefulSet, url: string, signal: AbortSignal): Promise<HealthResult>;
  /** Queues the set for another reconcile (a health check finished). */
  enqueue(key: string): void;
  events: Pick<EventRecorder, 'record'>;
  metrics: Pick<Metrics, 'rolloutSteps' | 'rolloutBlockedSeconds' | 'rolloutLastStep'>;
  logger: Logger;
  minStepIntervalMs: number;
  defaultMinReadySeconds: number;
  /** See BlockedCausesOptions.reportAfterMs. */
  blockedReportAfterMs: number;
  /** See BlockedCausesOptions.recheckMs. */
  blockedRecheckMs: number;
  /** Aborts health checks in flight when the controller stops. */
  signal: AbortSignal;
  /** Asked before every write that would stop pods (main.ts hands in src/handover's); omitted: nothing guards them. */
  gate?: DisruptionGate;
  now?: () => Date;
}

export interface RolloutReconcileResult {
  /** Look again after this long: only time is missing, or a block is re-examined. */
  requeueAfterMs?: number;
}

/** What /status tells about one set while its rollout runs. */
export interface RolloutSetState {
  /** The message of the block in force, reported or not yet. */
  blockedOn?: string;
  /** The pod the block is about, and whether it is the set's health URL that fails (for /status, which names no URL). */
  blockedBy?: { pod: string; healthCheck: boolean };
  /** When the block in force was first seen. */
  blockedSince?: Date;
  lastStepAt?: Date;
}

interface HealthEntry {
  url: string;
  result: HealthResult;
  at: number;
}

function partitionOf(set: V1StatefulSet): number {
  return set.spec?.updateStrategy?.rollingUpdate?.partition ?? 0;
}

function replicasOf(set: V1StatefulSet): number {
  return set.spec?.replicas ?? DEFAULT_REPLICAS;
}

/** No rollout under way: every pod on one revision, or the set is too new to have one. */
function atRest(set: V1StatefulSet): boolean {
  const status = set.status;
  return !status?.updateRevision || status.currentRevision === status.updateRevision;
}

function keyOf(set: V1StatefulSet): string {
  return objectKey(set.metadata?.namespace ?? '', set.metadata?.name ?? '');
}

/** Why a hold is written, for its Event. */
function holdReason(previous: V1StatefulSet | undefined, current: V1StatefulSet): string {
  if (previous === undefined) return 'rollguard found the set health-gated and at rest';
  if (!isHealthGated(previous)) return 'the set became health-gated';
  const template = (set: V1StatefulSet): string => JSON.stringify(set.spec?.template ?? {});
  if (replicasOf(previous) !== replicasOf(current) && template(previous) === template(current)) {
    return `the set was scaled from ${replicasOf(previous)} to ${replicasOf(current)} replicas at rest`;
  }
  return 'the spec changed';
}

/**
 * The I/O around decideRollout for one health-gated StatefulSet: holds the partition when the
 * spec changed (if the webhook did not), decides, and carries the decision out with writes
 * that fail on a stale view (a test of the resourceVersion; delete preconditions) so that
 * nothing is done twice. One instance per leadership term: its memory starts empty, and what
 * must survive a restart lives in the cluster (partition, last-step annotation).
 */
export class RolloutReconciler {
  /** Sets whose partition must go back to replicas before anything else, with the reason. */
  private readonly pendingHold = new Map<string, string>();
  private readonly lastSteps = new Map<string, Date>();
  /** The resourceVersion each set had when this process last wrote it; the cache has not caught up while it still shows it. */
  private readonly writtenFrom = new Map<string, string>();
  private readonly healthResults = new Map<string, HealthEntry>();
  private readonly healthInFlight = new Map<string, Promise<void>>();
  private readonly blocked: BlockedCauses;
  private readonly now: () => Date;

  constructor(private readonly deps: RolloutReconcilerDeps) {
    this.now = deps.now ?? (() => new Date());
    this.blocked = new BlockedCauses({
      reportAfterMs: deps.blockedReportAfterMs,
      recheckMs: deps.blockedRecheckMs,
      onBlockedSeconds: (seconds) => deps.metrics.rolloutBlockedSeconds.inc(seconds),
    });
  }

  /**
   * Told of every change to a set the cache reveals (previous undefined: first seen). Remembers
   * a hold when heldPartition calls for one: the reconcile that follows writes it. A set first
   * seen mid-rollout is not held: rollguard restarted, and resumes from the partition it finds.
   */
  noteSetChange(previous: V1StatefulSet | undefined, current: V1StatefulSet): void {
    const key = keyOf(current);
    this.deps.gate?.noteSetChange(previous, current, () => this.deps.podsOf(current.metadata?.namespace ?? '', current.metadata?.name ?? ''), (spec) => this.record(current, spec));
    if (previous === undefined && !atRest(current)) return;
    if (heldPartition(previous, current) !== undefined) {
      this.pendingHold.set(key, holdReason(previous, current));
      return;
    }
    // a later write of the partition alone (a person's, or a webhook's) is newer intent than the pending hold
    if (previous !== undefined && partitionOf(previous) !== partitionOf(current)) this.pendingHold.delete(key);
  }

  /** The set is gone or no longer gated: nothing about it is kept. */
  forget(key: string): void {
    this.pendingHold.delete(key);
    this.lastSteps.delete(key);
    this.writtenFrom.delete(key);
    this.healthResults.delete(key);
    this.deps.gate?.forget(key);
    this.blocked.clear(key, this.now().getTime());
  }

  state(key: string): RolloutSetState {
    const blocked = this.blocked.current(key);
    const { namespace, name } = splitObjectKey(key);
    const set = this.deps.statefulSet(namespace, name);
    const last = set ? lastStepAt(set, this.lastSteps.get(key), this.now()) : this.lastSteps.get(key);
    return {
      blockedOn: blocked?.message,
      blockedBy: blocked ? { pod: blocked.pod, healthCheck: blocked.cause.startsWith('health-check:') } : undefined,
      blockedSince: blocked ? new Date(blocked.since) : undefined,
      lastStepAt: last,
    };
  }

  /** Resolves once every health check in flight has ended (they abort with the signal). */
  async settled(): Promise<void> {
    await Promise.all([...this.healthInFlight.values(), this.deps.gate?.settled()]);
  }

  async reconcile(key: string): Promise<RolloutReconcileResult> {
    const { namespace, name } = splitObjectKey(key);
    const set = this.deps.statefulSet(namespace, name);
    if (!set || set.metadata?.deletionTimestamp || !isHealthGated(set)) {
      this.forget(key);
      return {};
    }
    const resourceVersion = set.metadata?.resourceVersion ?? '';
    // our last write is not in the cache yet; its watch event queues the set again
    if (this.writtenFrom.get(key) === resourceVersion) return {};
    this.writtenFrom.delete(key);

    const holdWhy = this.pendingHold.get(key);
    if (holdWhy !== undefined) {
      if (await this.hold(key, set, holdWhy)) return {};
      this.pendingHold.delete(key);
    }

    const now = this.now();
    const pods = this.deps.podsOf(namespace, name);
    const held = heldScaleDown(set);
    if (held.kind !== 'none') return this.scaleDown(key, set, pods, held, now);
    const healthCheck = this.takeHealthResult(key, set, now);
    const decision = decideRollout({
      set,
      pods,
      now,
      lastStepAt: lastStepAt(set, this.lastSteps.get(key), now),
      minStepIntervalMs: this.deps.minStepIntervalMs,
      defaultMinReadySeconds: this.deps.defaultMinReadySeconds,
      healthCheck,
    });
    const verdict = await this.askGate(key, set, pods, podsReplacedBy(decision, set, pods), now);
    if (!verdict.open) return this.gateClosed(key, set, verdict, decision.action !== 'blocked', now);
    return this.apply(key, set, decision, now);
  }

  /** May the pods a write stops go now? Open when no gate is handed in. */
  private askGate(key: string, set: V1StatefulSet, pods: readonly V1Pod[], stopping: readonly string[], now: Date, scaleDown?: GateRequest['scaleDown']): Promise<GateVerdict> {
    const { gate } = this.deps;
    if (!gate) return Promise.resolve({ open: true });
    return gate.mayStop({
      key,
      set,
      pods,
      stopping,
      ...(scaleDown ? { scaleDown } : {}),
      write: async (ops) => {
        if (ops.length > 0) await this.patch(key, set, ops);
      },
      record: (spec) => this.record(set, spec),
      now,
    });
  }

  /** The gate said not yet: its block is the rollout's, anything else waits (a block of the rollout's own stays). */
  private gateClosed(key: string, set: V1StatefulSet, verdict: Extract<GateVerdict, { open: false }>, clearBlock: boolean, now: Date): Promise<RolloutReconcileResult> | RolloutReconcileResult {
    if (verdict.blocked) return this.apply(key, set, { action: 'blocked', ...verdict.blocked }, now);
    if (clearBlock) this.blocked.clear(key, now.getTime());
    return verdict.requeueAfterMs !== undefined ? { requeueAfterMs: verdict.requeueAfterMs } : {};
  }

  /**
   * A held scale-down (scale-down-hold.ts): the pods it removes pass the gate first, then
   * replicas = wanted in one write with the record removed. The rollout waits meanwhile: one
   * move of a role in flight per set. A record that asks for nothing is dropped.
   */
  private async scaleDown(key: string, set: V1StatefulSet, pods: V1Pod[], held: HeldScaleDownOf<'unreadable' | 'stale' | 'held'>, now: Date): Promise<RolloutReconcileResult> {
    const log = this.deps.logger;
    if (held.kind !== 'held') {
      await this.patch(key, set, dropRecordOps(held.raw));
      const message =
        held.kind === 'unreadable'
          ? `Removed ${WANTED_REPLICAS_ANNOTATION}: ${JSON.stringify(held.raw.slice(0, 100))} is not a replica count; nothing is scaled down`
          : `Removed ${WANTED_REPLICAS_ANNOTATION}=${held.wanted}: replicas is ${held.replicas} now, nothing is left to scale down`;
      log.info({ statefulSet: key, wanted: held.raw }, message);
      await this.record(set, { type: held.kind === 'unreadable' ? 'Warning' : 'Normal', reason: REASON_SCALE_DOWN_DROPPED, message, action: ACTION_SCALE });
      return {};
    }
    const verdict = await this.askGate(key, set, pods, held.removing, now, held);
    if (!verdict.open) return this.gateClosed(key, set, verdict, true, now);
    this.deps.gate?.removing(set, pods.filter((p) => held.removing.includes(p.metadata?.name ?? '')));
    await this.patch(key, set, applyScaleDownOps(set, held));
    this.blocked.clear(key, now.getTime());
    const message = `Scaled down from ${held.replicas} to ${held.wanted} replicas (${WANTED_REPLICAS_ANNOTATION}): ${verdict.why ?? 'nothing guards the pods it removes'}`;
    log.info({ statefulSet: key, from: held.replicas, to: held.wanted }, message);
    await this.record(set, { type: verdict.warning ? 'Warning' : 'Normal', reason: REASON_SCALED_DOWN, message, action: ACTION_SCALE });
    return {};
  }

  private async apply(key: string, set: V1StatefulSet, decision: RolloutDecision, now: Date): Promise<RolloutReconcileResult> {
    const log = this.deps.logger;
    switch (decision.action) {
      case 'none': {
        // while the StatefulSet controller catches up with a write, a block is paused, not over
        const lagging = set.metadata?.generation !== set.status?.observedGeneration;
        if (!lagging) this.blocked.clear(key, now.getTime());
        log.debug({ statefulSet: key, reason: decision.reason }, 'rollout: nothing to do');
        return {};
      }
      case 'wait':
        this.blocked.clear(key, now.getTime());
        log.debug({ statefulSet: key, retryAfterMs: decision.retryAfterMs, reason: decision.reason }, 'rollout: waiting');
        return { requeueAfterMs: decision.retryAfterMs };
      case 'check-health':
        this.startHealthCheck(key, set, decision.url);
        return {};
      case 'blocked': {
        const verdict = this.blocked.observe(key, decision, now.getTime());
        if (verdict.record) {
          log.warn({ statefulSet: key, pod: decision.pod, cause: decision.cause }, decision.message);
          await this.record(set, { type: 'Warning', reason: REASON_ROLLOUT_BLOCKED, message: decision.message, action: ACTION_WAIT });
        }
        return { requeueAfterMs: verdict.recheckInMs };
      }
      case 'set-partition':
        await this.setPartition(key, set, decision, now);
        return {};
      case 'delete-pod':
        await this.deletePod(key, set, decision.pod, decision.message, now);
        return {};
    }
  }

  /** Writes partition = replicas for a pending hold; false when there was nothing to write. */
  private async hold(key: string, set: V1StatefulSet, why: string): Promise<boolean> {
    const from = partitionOf(set);
    const to = replicasOf(set);
    const ops = partitionPatch(set, to);
    if (ops.length === 0) return false;
    await this.patch(key, set, ops);
    this.pendingHold.delete(key);
    this.blocked.clear(key, this.now().getTime());
    const message = `Updated partition from ${from} to ${to}: ${why}; held at replicas so that a template change rolls nothing until rollguard steps it`;
    this.deps.logger.info({ statefulSet: key, from, to }, message);
    await this.record(set, { type: 'Normal', reason: HOLD_EVENT, message, action: ACTION_UPDATE_PARTITION });
    return true;
  }

  private async setPartition(
    key: string,
    set: V1StatefulSet,
    decision: Extract<RolloutDecision, { action: 'set-partition' }>,
    now: Date,
  ): Promise<void> {
    const ops = partitionPatch(set, decision.to);
    if (ops.length === 0) return;
    const stepsDown = decision.event === 'PartitionUpdate';
    // the step and its time in one write: a restart can never see the one without the other
    if (stepsDown) ops.push(lastStepOp(set, now));
    await this.patch(key, set, ops);
    if (stepsDown) {
      this.lastSteps.set(key, now);
      this.deps.metrics.rolloutSteps.inc();
      this.deps.metrics.rolloutLastStep.set(now.getTime() / MS_PER_SECOND);
    }
    this.blocked.clear(key, now.getTime());
    this.deps.logger.info({ statefulSet: key, from: decision.from, to: decision.to, event: decision.event }, decision.message);
    await this.record(set, { type: 'Normal', reason: decision.event, message: decision.message, action: ACTION_UPDATE_PARTITION });
  }

  private async deletePod(key: string, set: V1StatefulSet, podName: string, message: string, now: Date): Promise<void> {
    const { namespace } = splitObjectKey(key);
    const pod = this.deps.pod(namespace, podName);
    const uid = pod?.metadata?.uid;
    const resourceVersion = pod?.metadata?.resourceVersion;
    if (!uid || !resourceVersion) return;
    try {
      await this.deps.deletePod(namespace, podName, { uid, resourceVersion });
    } catch (err) {
      const code = statusCode(err);
      // already gone: whoever deleted it did what we meant to
      if (code === 404) return;
      if (isConflict(err)) {
        throw new ConflictError(`pod ${namespace}/${podName} changed since uid ${uid} resourceVersion ${resourceVersion} (HTTP ${code}); deciding again`, { cause: err });
      }
      throw new Error(`deleting pod ${namespace}/${podName} of StatefulSet ${key} for a forced rollback: ${errorText(err)}`, { cause: err });
    }
    this.blocked.clear(key, now.getTime());
    this.deps.logger.warn({ statefulSet: key, pod: podName, uid }, message);
    await this.record(set, { type: 'Warning', reason: REASON_FORCED_ROLLBACK, message, action: ACTION_DELETE_POD });
  }

  /** PATCHes the set with `ops` behind a test of the cached resourceVersion, so a stale view fails. */
  private async patch(key: string, set: V1StatefulSet, ops: Operation[]): Promise<V1StatefulSet> {
    const { namespace, name } = splitObjectKey(key);
    const resourceVersion = set.metadata?.resourceVersion;
    if (!resourceVersion) throw new Error(`StatefulSet ${key} has no metadata.resourceVersion to patch against`);
    try {
      const patched = await this.deps.patchStatefulSet(namespace, name, [
        { op: 'test', path: '/metadata/resourceVersion', value: resourceVersion },
        ...ops,
      ]);
      this.writtenFrom.set(key, resourceVersion);
      return patched;
    } catch (err) {
      const denied = policyDenial(err);
      if (denied) await this.record(set, { type: 'Warning', reason: REASON_WRITE_DENIED, message: denied, action: ACTION_UPDATE_PARTITION });
      if (isConflict(err)) {
        throw new ConflictError(`StatefulSet ${key} changed since resourceVersion ${resourceVersion} (HTTP ${statusCode(err)}); deciding again`, { cause: err });
      }
      throw new Error(`patching the partition of StatefulSet ${key}: ${errorText(err)}`, { cause: err });
    }
  }

  private takeHealthResult(key: string, set: V1StatefulSet, now: Date): HealthResult | undefined {
    const entry = this.healthResults.get(key);
    if (!entry) return undefined;
    this.healthResults.delete(key);
    const url = set.metadata?.annotations?.[HEALTH_URL_ANNOTATION];
    if (entry.url !== url || now.getTime() - entry.at > HEALTH_RESULT_MAX_AGE_MS) return undefined;
    return entry.result;
  }

  /** GETs the URL off the queue; the set is queued again with the result. */
  private startHealthCheck(key: string, set: V1StatefulSet, url: string): void {
    if (this.healthInFlight.has(key) || this.deps.signal.aborted) return;
    const check = this.deps
      .probeHealth(set, url, this.deps.signal)
      .catch((err: unknown): HealthResult => ({ ok: false, detail: `GET failed: ${errorText(err)}` }))
      .then((result) => {
        this.deps.logger.debug({ statefulSet: key, url, ok: result.ok, detail: result.detail }, 'health check');
        this.healthResults.set(key, { url, result, at: this.now().getTime() });
      })
      .finally(() => {
        this.healthInFlight.delete(key);
        if (!this.deps.signal.aborted) this.deps.enqueue(key);
      });
    this.healthInFlight.set(key, check);
  }

  private async record(set: V1StatefulSet, spec: EventSpec): Promise<void> {
    const subject: EventSubject = {
      apiVersion: 'apps/v1',
      kind: 'StatefulSet',
      namespace: set.metadata?.namespace ?? '',
      name: set.metadata?.name ?? '',
      uid: set.metadata?.uid ?? '',
    };
    await this.deps.events.record(subject, spec);
  }
}
