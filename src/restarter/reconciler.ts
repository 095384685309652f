import type { Operation } from 'fast-json-patch';
import type { Logger } from 'pino';
import { ConflictError, errorText, invalidFields, isConflict, isOutcomeUnknown, statusCode } from '../kube/api-status.js';
import { policyDenial, REASON_WRITE_DENIED } from '../kube/policy-denial.js';
import type { ReconcileResult, Reconciler } from '../kube/controller.js';
import type { EventRecorder, EventSubject } from '../kube/events.js';
import { describeWorkload, workloadApiVersion, workloadRef, type Workload, type WorkloadKind, type WorkloadRef } from '../kube/workloads.js';
import type { TokenBucket } from '../kube/token-bucket.js';
import type { Metrics } from '../metrics.js';
import {
  ABSENT,
  FROZEN_ANNOTATION,
  LAST_RESTART_ANNOTATION,
  RELOAD_ANNOTATION,
  RELOAD_FILES,
  RESTART_REASON_ANNOTATION,
  ROLLGUARD_DIALECT,
  annotationChanges,
  dialectOf,
  holdForMissing,
  planAnnotations,
  readKeysFor,
  type AnnotationChange,
  type DesiredAnnotation,
  type Dialect,
  type HeldBack,
  type MissingReference,
  type ObjectVersion,
  type VersionLookup,
} from './annotations.js';
import { describeChange } from './change-text.js';
import {
  REASON_TEMPLATE_IN_WORKLOAD_REF,
  REASON_UNSUPPORTED_FOR_KIND,
  annotationWritesBumpGeneration,
  templateElsewhere,
  templateElsewhereMessage,
  unsupportedFeatures,
  unsupportedMessage,
  type StatefulSetOnlyFeature,
} from './kind-features.js';
import { baselineRecord, checkedPlan, dataOutcome, dataStep, needsBaseline, needsHistory, type DataCheckItem, type DataOutcome, type InPlaceChange } from './data-check.js';
import type { DigestRead } from './digest-reader.js';
import { DIGESTS_ANNOTATION, parseDigestRecords } from './digests.js';
import { templateAnnotationOps, workloadAnnotationOps } from './patch.js';
import type { ObjectKind, ReadKeys } from './references.js';
import { recordCovers, type DigestRecord } from './digests.js';
import { numericResourceVersion, parseAnnotationValue } from './versions.js';
import { TIMING_ANNOTATION } from './timing.js';
import { EVENT_DUE_ANNOTATION, dueEventName, dueToTell, formatEventDue, parseEventDue, type EventDue } from './event-due.js';

/** Event reasons: a referenced object changed; references tracked for the first time (or newly); references dropped. */
export const REASON_CONFIG_CHANGED = 'ConfigChanged';
export const REASON_REFERENCES_ANNOTATED = 'ReferencesAnnotated';
export const REASON_REFERENCES_REMOVED = 'ReferencesRemoved';
export const PATCH_ACTION = 'PatchPodTemplate';

/** Event reason: a restart held back by the set's restart floor (--min-restart-interval). */
export const REASON_RESTARTS_DEFERRED = 'RestartsDeferred';
/** Warning Event reasons: a stored version the cache has not caught up with for long; a template value of another object; a write the API server refused as invalid. */
export const REASON_VERSION_HELD = 'VersionHeldBack';
export const REASON_FOREIGN_VERSION = 'ForeignVersion';
export const REASON_WRITE_INVALID = 'WriteInvalid';
/** Warning Event reason: a required object or key is gone, and the set is not restarted into pods that cannot start. */
export const REASON_REFERENCE_MISSING = 'ReferenceMissing';
/** Event reason: a data change the running pods read from their mounted files, not restarted (`rollguard.io/reload: files`). */
export const REASON_UPDATED_IN_PLACE = 'UpdatedInPlace';
/** Event reason: what a ReferenceMissing Warning named is back. */
export const REASON_REFERENCE_RESTORED = 'ReferenceRestored';
/** The restarter_warnings metric's reasons (a closed set). */
export type RestarterWarning = 'cache_lag' | 'foreign_version' | 'invalid' | 'reference_missing';

/** A hold on a lagging cache that lasts this long is told with a Warning (and goes on: the cache is the truth to come). */
const HOLD_WARNING_AFTER_MS = 30_000;

/** A write the API server refused as invalid (a 422 naming a field): told, and not retried until the workload changes. */
class InvalidWriteError extends Error {
  override readonly name = 'InvalidWriteError';
}

/** A mark whose Event could not be written (EVENT_DUE_ANNOTATION) is tried again this long after. */
const DUE_RETRY_MS = 10_000;

/** While the caches are still listing, every object would look absent; the item waits this long and tries again. */
const NOT_SYNCED_RETRY_MS = 1_000;
/** A cache behind a stored annotation (another replica's webhook had a fresher one) is given this long between looks. */
const CACHE_LAG_RETRY_MS = 250;
/**
 * A cache that stays behind a stored version this long makes one fresh read from the API server:
 * a stored version newer than the whole store can only come from an etcd restored from a backup.
 */
const FRESH_READ_AFTER_MS = 5_000;

/** The object as the API server has it now, and the store's current revision (a quorum read, no cache). */
export interface FreshRead {
  version: ObjectVersion | undefined;
  revision: string;
}

export interface ReconcilerDeps {
  workload(kind: WorkloadKind, namespace: string, name: string): Workload | undefined;
  lookup: VersionLookup;
  cachesSynced(): boolean;
  /** The newest resourceVersion the cache of `kind` reflects in `namespace`; '' when unknown. */
  cacheProgress(kind: ObjectKind, namespace: string): string;
  /** Reads one object from the API server, bypassing every cache. */
  readFresh(kind: ObjectKind, namespace: string, name: string): Promise<FreshRead>;
  patchWorkload(kind: WorkloadKind, namespace: string, name: string, ops: Operation[]): Promise<Workload>;
  /** recordOnce: the Event a template write is due (EVENT_DUE_ANNOTATION), under its own name; omitted: recorded as any other. */
  events: Pick<EventRecorder, 'record'> & Partial<Pick<EventRecorder, 'recordOnce'>>;
  restartLimiter: Pick<TokenBucket, 'take'>;
  /** At most one template patch per set in this window (the trailing change wins); 0: no floor. */
  minRestartIntervalMs: number;
  logger: Logger;
  metrics: Pick<Metrics, 'patches' | 'restarts' | 'restartsDeferred' | 'metadataOnlyChanges' | 'restarterWarnings'> & Partial<Pick<Metrics, 'dataCheckFailures' | 'updatedInPlace'>>;
  now?: () => Date;
  /** What a Deployment or DaemonSet is warned it asks for in vain (rollout/, handover/); omitted: none. */
  statefulSetOnly?: readonly StatefulSetOnlyFeature[];
  /** The dialects a workload may be restarted in, in precedence order (annotations.ts dialectOf); omitted: rollguard's alone. */
  dialects?: readonly Dialect[];
  /**
   * The data check: one object's digests from a fresh GET (shared by the sets that reference it),
   * and the id of the key digests are written under. Omitted: every version bump rolls.
   */
  data?: {
    read(kind: ObjectKind, namespace: string, name: string, seen: string): Promise<DigestRead>;
    /** The object as it was at `version`, from the API server's history; undefined: compacted away, or not that version. */
    readAt?(kind: ObjectKind, namespace: string, name: string, version: string): Promise<DigestRead | undefined>;
    currentKeyId(): Promise<string>;
  };
  /** TIMING_ANNOTATION's value (timing.ts formatTiming), carried by the writes of the set's annotations; omitted: not written. */
  timing?: string;
}

/** The runtime's result, and what the reconcile wrote. */
export interface RestarterReconcileResult extends ReconcileResult {
  /** The reason of the patch written, if one was. */
  patched?: string;
}

/** A template write that failed with no answer: it may have been stored, and then its restart is told when the set is seen with it. */
interface WriteInDoubt {
  uid: string;
  /** the set's resourceVersion the write tested: while the cache shows it, the write's fate is unknown */
  basedOn: string;
  reason: string;
  changes: AnnotationChange[];
  /** the Event the write was due */
  due: EventDue;
}

interface Plan {
  set: Workload;
  dialect: Dialect;
  desired: DesiredAnnotation[];
  changes: AnnotationChange[];
  heldBack: HeldBack[];
  /** Required objects and keys that are gone, their stored versions kept. */
  missing: MissingReference[];
  /** FROZEN_ANNOTATION as it should be; undefined when it is right already. */
  frozen?: string | null;
  /** DIGESTS_ANNOTATION as it should be; undefined when it is right already. */
  digests?: string | null;
  /** Changes the running pods see in their mounted files (`rollguard.io/reload: files`): recorded, told, not restarted. */
  inPlace?: InPlaceChange[];
}

/**
 * The JSON Patch that brings the set's template annotations from what the cache holds to
 * `desired`. It starts with a test of the cached resourceVersion: if anyone wrote the set since,
 * the API server refuses it whole, and nothing the writer did is overwritten.
 */
export function annotationPatch(kind: WorkloadKind, set: Workload, desired: DesiredAnnotation[], changes: AnnotationChange[]): Operation[] {
  const resourceVersion = set.metadata?.resourceVersion;
  if (!resourceVersion) {
    throw new Error(`${kind} ${set.metadata?.namespace}/${set.metadata?.name} has no metadata.resourceVersion to patch against`);
  }
  return [
    { op: 'test', path: '/metadata/resourceVersion', value: resourceVersion },
    ...templateAnnotationOps(set.spec?.template?.metadata, desired, changes),
  ];
}

/** Why the template is patched: a value changed, references were tracked (the first time, or new ones), or dropped. */
export function patchReason(current: Record<string, string> | undefined, changes: AnnotationChange[], dialect: Dialect = ROLLGUARD_DIALECT): string {
  const annotatedBefore = Object.keys(current ?? {}).some((key) => dialect.isOwnAnnotation(key));
  if (!annotatedBefore) return REASON_REFERENCES_ANNOTATED;
  if (changes.some((c) => c.from !== undefined && c.to !== undefined)) return REASON_CONFIG_CHANGED;
  if (changes.some((c) => c.from === undefined)) return REASON_REFERENCES_ANNOTATED;
  return REASON_REFERENCES_REMOVED;
}

/**
 * The plan with the freshly read versions of held-back references taken as they are (they are the
 * truth); one the fresh read shows gone while the pods require it keeps its stored version, missing.
 */
function withFreshVersions(plan: Plan, fresh: Map<string, ObjectVersion | undefined>): Plan {
  const required = plan.dialect.requirements?.(plan.set.spec?.template);
  const missing = [...plan.missing];
  const desired = plan.desired.map((d) => {
    const id = `${d.kind}/${d.name}`;
    if (!fresh.has(id)) return d;
    const version = fresh.get(id);
    if (!version && holdForMissing(d.value, required?.get(id), undefined)) {
      missing.push({ key: d.key, kind: d.kind, name: d.name, stored: d.value });
      return d;
    }
    return { ...d, value: version ? `${version.uid}/${version.resourceVersion}` : plan.dialect.missing };
  });
  const heldBack = plan.heldBack.filter((h) => !fresh.has(`${h.kind}/${h.name}`));
  return { ...plan, desired, missing, changes: annotationChanges(plan.set.spec?.template?.metadata?.annotations, desired, plan.dialect), heldBack };
}

function lastRestartOf(set: Workload): number | undefined {
  const at = Date.parse(set.metadata?.annotations?.[LAST_RESTART_ANNOTATION] ?? '');
  return Number.isNaN(at) ? undefined : at;
}

/** The kinds named at the start of each part of a restart reason ("ConfigMap app changed …; Secret …"). */
function kindsIn(reason: string): ObjectKind[] {
  const kinds = new Set<ObjectKind>();
  for (const part of reason.split('; ')) {
    const first = part.split(' ', 1)[0];
    if (first === 'ConfigMap' || first === 'Secret') kinds.add(first);
  }
  return [...kinds];
}

/**
 * Brings one workload's (StatefulSet, Deployment, DaemonSet, Rollout) restarter annotations to what its referenced objects' versions say,
 * from the caches; writes only when something differs, so a restart of rollguard (or a change of
 * leader) patches nothing that did not really change. Never moves a value backwards; at most one
 * template patch per set per restart floor; every patch has its Event and log line.
 */
export class RestarterReconciler implements Reconciler {
  private readonly lagSince = new Map<string, number>();
  /** When each set's current hold on a lagging cache began, and whether its Warning was told. */
  private readonly heldSince = new Map<string, { since: number; told: boolean }>();
  private readonly inDoubt = new Map<string, WriteInDoubt>();
  /** Sets whose current deferral has had its Event. */
  private readonly deferred = new Set<string>();
  /** Workloads told that a feature they ask for is StatefulSets only: what was told, so that it is told once, not with every rollout. */
  private readonly toldUnsupported = new Map<string, string>();
  /** Workloads warned that a required object or key is gone: what was told, so that it is told once, and its return told. */
  private readonly toldMissing = new Map<string, { text: string; what: string; uid: string }>();
  /** Workloads whose EVENT_DUE_ANNOTATION (the value) has its Event stored: not told again, and removed where that is free. */
  private readonly toldDue = new Map<string, string>();
  /**
   * Each set's last template write by this process: the floor counts from it too, so a PUT that
   * drops rollguard.io/last-restart-at while the webhook is down (kubectl replace of a manifest
   * without it) does not let the next write roll at once.
   */
  private readonly lastWrites = new Map<string, { uid: string; at: number }>();
  /** The workload's resourceVersion a write to it was refused as invalid against: the same set is not written again (the Warning is told once). */
  private readonly refusedAt = new Map<string, string>();
  private readonly now: () => Date;
  /** The digest key id last seen; a record under another one is re-keyed (a rotation). */
  private keyId?: string;

  constructor(private readonly deps: ReconcilerDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  /** How many workloads each per-workload map holds; for /status (`memory`). */
  memory(): { lag_since: number; held_since: number; in_doubt: number; deferred: number; told_unsupported: number; told_missing: number; told_due: number; last_writes: number; told_invalid: number } {
    return {
      told_missing: this.toldMissing.size,
      told_due: this.toldDue.size,
      lag_since: this.lagSince.size,
      held_since: this.heldSince.size,
      in_doubt: this.inDoubt.size,
      deferred: this.deferred.size,
      told_unsupported: this.toldUnsupported.size,
      last_writes: this.lastWrites.size,
      told_invalid: this.refusedAt.size,
    };
  }

  async reconcile(key: string, signal: AbortSignal): Promise<RestarterReconcileResult> {
    try {
      return await this.reconcileOnce(key, signal);
    } catch (err) {
      // told already; the same write would fail again: the workload's next change wakes it
      if (err instanceof InvalidWriteError) return {};
      throw err;
    }
  }

  private async reconcileOnce(key: string, signal: AbortSignal): Promise<RestarterReconcileResult> {
    const { deps } = this;
    if (!deps.cachesSynced()) return { requeueAfterMs: NOT_SYNCED_RETRY_MS };
    const ref = workloadRef(key);
    const { kind, namespace, name } = ref;
    const set = this.enabledSet(kind, namespace, name);
    if (!set) {
      this.toldUnsupported.delete(ref.key);
      this.toldMissing.delete(ref.key);
      this.toldDue.delete(ref.key);
      this.refusedAt.delete(ref.key);
      return this.forget(ref);
    }
    const refused = this.refusedAt.get(ref.key);
    if (refused !== undefined && refused === set.metadata?.resourceVersion) return {};
    this.refusedAt.delete(ref.key);
    await this.tellUnsupported(ref, set);
    await this.settleInDoubt(ref, set);
    const due = await this.settleDue(ref, set);
    if (due === 'written') return {};
    const result = await this.reconcileSet(ref, set, signal);
    // a mark whose Event could not be written is tried again, without holding anything else up
    if (due === 'untold' && (result.requeueAfterMs === undefined || result.requeueAfterMs > DUE_RETRY_MS)) return { ...result, requeueAfterMs: DUE_RETRY_MS };
    return result;
  }

  private async reconcileSet(ref: WorkloadRef, set: Workload, signal: AbortSignal): Promise<RestarterReconcileResult> {
    const { deps } = this;
    const { kind, namespace, name } = ref;
    if (set.metadata?.annotations?.[RESTART_REASON_ANNOTATION] !== undefined) return this.explainAdmission(ref, set);

    const planned = this.plan(kind, set);
    let plan = planned.plan;
    if (!plan) {
      await this.tellMissing(ref, set, planned.missing);
      return this.forget(ref);
    }
    let fromTheFuture: Map<string, ObjectVersion | undefined> | undefined;
    if (plan.heldBack.length > 0) {
      fromTheFuture = await this.readHeldBack(ref, plan);
      if (!fromTheFuture) return { requeueAfterMs: CACHE_LAG_RETRY_MS };
      plan = withFreshVersions(plan, fromTheFuture);
    }
    this.lagSince.delete(ref.key);
    this.heldSince.delete(ref.key);
    plan = await this.checkData(ref, plan);
    await this.tellMissing(ref, plan.set, plan.missing);
    if (plan.changes.length === 0) return this.writeFrozen(ref, plan);

    const wait = this.floorWait(ref.key, plan.set);
    if (wait > 0) return this.defer(ref, plan, wait);

    const asked = performance.now();
    await deps.restartLimiter.take(signal);
    // told to the controller, which sizes its workers to keep the pace
    const pacedMs = performance.now() - asked;
    // The wait for a turn may have been long: plan again from what the caches hold now.
    const fresh = this.enabledSet(kind, namespace, name);
    let again = fresh ? this.plan(kind, fresh).plan : undefined;
    if (!again) return { pacedMs };
    if (fromTheFuture && again.heldBack.length > 0) again = withFreshVersions(again, fromTheFuture);
    if (again.heldBack.length > 0) return { requeueAfterMs: 0, pacedMs };
    again = await this.checkData(ref, again);
    if (again.changes.length === 0) return { requeueAfterMs: 0, pacedMs };
    return { ...(await this.writeTemplate(ref, again)), pacedMs };
  }

  /**
   * The workload is gone from the caches: nothing about it is kept, also when no reconcile
   * follows (a replica that led once and leads no more; its next term's pass skips what is gone).
   */
  forgetWorkload(key: string): void {
    this.forgetPending(key);
    this.toldUnsupported.delete(key);
    this.toldMissing.delete(key);
    this.toldDue.delete(key);
    this.lastWrites.delete(key);
    this.refusedAt.delete(key);
  }

  private forget(ref: WorkloadRef): RestarterReconcileResult {
    this.forgetPending(ref.key);
    return {};
  }

  /** What a workload's next write waits on (a lagging cache, a deferral, a write in doubt); what it was told stays. */
  private forgetPending(key: string): void {
    this.lagSince.delete(key);
    this.heldSince.delete(key);
    this.deferred.delete(key);
    this.inDoubt.delete(key);
  }

  /** One Warning of the restarter's: counted, logged and recorded as an Event on the workload. */
  private async warn(ref: WorkloadRef, set: Workload, w: { metric: RestarterWarning; reason: string; message: string; fields: Record<string, unknown>; action?: string }): Promise<void> {
    this.deps.metrics.restarterWarnings.inc({ reason: w.metric });
    this.deps.logger.warn({ workload: ref.key, ...w.fields }, `${describeWorkload(ref)}: ${w.message}`);
    await this.deps.events.record(eventSubject(ref, set), { type: 'Warning', reason: w.reason, message: w.message, action: w.action ?? PATCH_ACTION });
  }

  /**
   * Once the cache shows the set past the version a write in doubt tested, that write either
   * landed (the set carries what it wrote: its restart is told now, as it would have been) or
   * did not (forgotten; the plan writes it again and tells it then).
   */
  private async settleInDoubt(ref: WorkloadRef, set: Workload): Promise<void> {
    const doubt = this.inDoubt.get(ref.key);
    if (!doubt || set.metadata?.resourceVersion === doubt.basedOn) return;
    this.inDoubt.delete(ref.key);
    const annotations = set.spec?.template?.metadata?.annotations ?? {};
    const landed = set.metadata?.uid === doubt.uid && doubt.changes.every((c) => annotations[c.key] === c.to);
    if (landed) await this.tellRestart(ref, set, set, doubt.reason, doubt.changes, doubt.due, true);
  }

  /**
   * The Event a write of the loop's is due (EVENT_DUE_ANNOTATION, written with the write): told
   * here when no process told it yet (the one that wrote it died before its Event landed), under
   * the mark's own name, so that a second telling (a deposed leader's, a restarted one's) adds
   * nothing. Then the mark is removed, where that makes no generation (not on a Deployment, whose
   * next template write replaces it). 'written': the removal was written (the set's watch event
   * brings it back); 'untold': the Event could not be written, the mark stays and is tried again.
   */
  private async settleDue(ref: WorkloadRef, set: Workload): Promise<'written' | 'untold' | undefined> {
    const value = set.metadata?.annotations?.[EVENT_DUE_ANNOTATION];
    if (value === undefined) {
      this.toldDue.delete(ref.key);
      return undefined;
    }
    if (this.toldDue.get(ref.key) !== value) {
      const due = parseEventDue(value);
      // another set's mark (a copy made without the webhook), one too old to tell, or one that does not parse: nothing to tell
      if (due && dueToTell(due, set.metadata?.uid, this.now().getTime())) {
        const told = await this.tellDue(ref, set, set, due);
        if (told === 'failed') return 'untold';
        if (told === 'created') {
          this.deps.logger.info(
            { workload: ref.key, reason: due.reason, at: due.at },
            `${describeWorkload(ref)}: the Event of its restart at ${due.at} was due and not written (rollguard stopped before it); written now: ${due.reason}: ${due.message}`,
          );
        }
      }
      this.toldDue.set(ref.key, value);
    }
    if (annotationWritesBumpGeneration(ref.kind)) return undefined;
    const ops: Operation[] = [
      { op: 'test', path: '/metadata/resourceVersion', value: set.metadata?.resourceVersion ?? '' },
      ...workloadAnnotationOps(set.metadata?.annotations, { [EVENT_DUE_ANNOTATION]: undefined, ...this.timingValue() }),
    ];
    await this.patch(ref, set, ops, 'the told Event mark');
    return 'written';
  }

  /** The Event a mark is due, under the mark's name: 'created' now, 'found' stored before, or 'failed'. */
  private async tellDue(ref: WorkloadRef, set: Workload, patched: Workload | undefined, due: EventDue): Promise<'created' | 'found' | 'failed'> {
    const subject = eventSubject(ref, set, patched);
    const spec = { type: due.type, reason: due.reason, message: due.message, action: PATCH_ACTION };
    const { recordOnce } = this.deps.events;
    if (!recordOnce) {
      await this.deps.events.record(subject, spec);
      return 'created';
    }
    const told = await recordOnce.call(this.deps.events, subject, spec, { name: dueEventName(subject.name, due), at: new Date(due.at) });
    if (told !== 'failed') this.toldDue.set(ref.key, formatEventDue(due));
    return told;
  }

  private enabledSet(kind: WorkloadKind, namespace: string, name: string): Workload | undefined {
    const set = this.deps.workload(kind, namespace, name);
    // The list/watch selects on the label already; this guards a set that lost it a moment ago.
    if (!set || set.metadata?.deletionTimestamp || !this.dialectOf(kind, set)) return undefined;
    return set;
  }

  private dialectOf(kind: WorkloadKind, set: Workload): Dialect | undefined {
    return dialectOf(this.deps.dialects ?? [ROLLGUARD_DIALECT], set.metadata?.labels, kind);
  }

  private plan(kind: WorkloadKind, set: Workload): { plan?: Plan; missing: MissingReference[] } {
    const namespace = set.metadata?.namespace ?? '';
    const dialect = this.dialectOf(kind, set) ?? ROLLGUARD_DIALECT;
    const result = planAnnotations({
      dialect,
      namespace,
      annotations: set.metadata?.annotations,
      template: set.spec?.template,
      stored: set.spec?.template?.metadata?.annotations,
      storedAt: set.metadata?.resourceVersion,
      lookup: this.deps.lookup,
      cacheProgress: (kind) => this.deps.cacheProgress(kind, namespace),
    });
    const changes = annotationChanges(set.spec?.template?.metadata?.annotations, result.desired, dialect);
    const wantFrozen = result.frozen.length > 0 ? result.frozen.join(',') : null;
    const haveFrozen = set.metadata?.annotations?.[FROZEN_ANNOTATION] ?? null;
    const frozen = wantFrozen === haveFrozen ? undefined : wantFrozen;
    // where a write of the workload's own annotations is a new generation, records wait for a template write
    const records = !annotationWritesBumpGeneration(kind) && this.mayNeedRecords(set, result.desired, dialect);
    if (changes.length === 0 && frozen === undefined && result.heldBack.length === 0 && !records) return { missing: result.missing };
    return { plan: { set, dialect, desired: result.desired, changes, heldBack: result.heldBack, missing: result.missing, frozen }, missing: result.missing };
  }

  /**
   * Held-back references are decided on one fresh read from the API server, not on a cache:
   * - stored `absent` and an older cached version (a lagging cache may remember a deleted
   *   object): at once, the fresh read is the truth;
   * - a stored version newer than the cache's: the cache lags, and is waited for with no time
   *   limit; after a while one fresh read tells it from a stored version newer than the whole
   *   store (an etcd restored from a backup), which alone is written back, and logged.
   * Returns the fresh versions to write, or undefined to wait.
   */
  private async readHeldBack(ref: WorkloadRef, plan: Plan): Promise<Map<string, ObjectVersion | undefined> | undefined> {
    const now = this.now().getTime();
    const since = this.lagSince.get(ref.key) ?? now;
    this.lagSince.set(ref.key, since);
    const onlyAbsent = plan.heldBack.every((held) => held.stored === ABSENT);
    if (!onlyAbsent && now - since < FRESH_READ_AFTER_MS) return undefined;
    this.lagSince.set(ref.key, now);
    const namespace = plan.set.metadata?.namespace ?? '';
    const fresh = new Map<string, ObjectVersion | undefined>();
    for (const held of plan.heldBack) {
      const read = await this.deps.readFresh(held.kind, namespace, held.name);
      if (held.stored === ABSENT) {
        fresh.set(`${held.kind}/${held.name}`, read.version);
        continue;
      }
      if (!read.version && holdForMissing(held.stored, plan.dialect.requirements?.(plan.set.spec?.template)?.get(`${held.kind}/${held.name}`), undefined)) {
        // deleted while this cache lagged, and the pods require it: kept, told as missing (withFreshVersions)
        fresh.set(`${held.kind}/${held.name}`, undefined);
        continue;
      }
      const revision = numericResourceVersion(read.revision);
      const stored = parseAnnotationValue(held.stored);
      const fromTheFuture = revision !== undefined && stored.kind === 'version' && stored.resourceVersion > revision;
      if (!fromTheFuture) {
        const freshAt = numericResourceVersion(read.version?.resourceVersion);
        if (stored.kind === 'version' && freshAt !== undefined && freshAt >= stored.resourceVersion) {
          // the object is at the stored version or past it: the cache lags, and is waited for
          await this.tellLongHold(ref, plan.set, held, now);
          return undefined;
        }
        // the object never had the stored version: the value is another object's (the template was copied from
        // another namespace's set, or restored from a backup); its pods read this one's
        await this.tellForeign(ref, plan.set, held, read.version);
        fresh.set(`${held.kind}/${held.name}`, read.version);
        continue;
      }
      this.deps.logger.warn(
        { workload: ref.key, kind: held.kind, name: held.name, stored: held.stored, revision: read.revision },
        `${describeWorkload(ref)}: ${held.kind} ${held.name} is annotated ${held.stored}, newer than the store's revision ${read.revision} (etcd restored from a backup?); writing the current version`,
      );
      fresh.set(`${held.kind}/${held.name}`, read.version);
    }
    return fresh;
  }

  /** A hold on a lagging cache that lasts: one Warning per hold, and the metric. */
  private async tellLongHold(ref: WorkloadRef, set: Workload, held: HeldBack, now: number): Promise<void> {
    const hold = this.heldSince.get(ref.key) ?? { since: now, told: false };
    this.heldSince.set(ref.key, hold);
    if (hold.told || now - hold.since < HOLD_WARNING_AFTER_MS) return;
    hold.told = true;
    const message = `${held.kind} ${held.name}: the template names ${held.stored}, which the API server has, but rollguard's cache has not shown for ${Math.round((now - hold.since) / 1000)} s (it shows ${held.candidate}); the set is not rolled until it does`;
    await this.warn(ref, set, { metric: 'cache_lag', reason: REASON_VERSION_HELD, message, fields: { kind: held.kind, name: held.name, stored: held.stored, cached: held.candidate } });
  }

  /** A template value that names a version the object never had: rewritten to the object's, and said so. */
  private async tellForeign(ref: WorkloadRef, set: Workload, held: HeldBack, version: ObjectVersion | undefined): Promise<void> {
    const now = version ? `${version.uid}/${version.resourceVersion}` : ABSENT;
    const message = `${held.kind} ${held.name}: the template names ${held.stored}, a version this object never had (copied from another namespace's or a restored set?); it is now ${now}, and the template is brought to it`;
    await this.warn(ref, set, { metric: 'foreign_version', reason: REASON_FOREIGN_VERSION, message, fields: { kind: held.kind, name: held.name, stored: held.stored, now } });
  }

  private floorWait(key: string, set: Workload): number {
    const written = this.lastWrites.get(key);
    const own = written && written.uid === set.metadata?.uid ? written.at : undefined;
    const stored = lastRestartOf(set);
    const last = own === undefined ? stored : Math.max(own, stored ?? own);
    if (last === undefined || this.deps.minRestartIntervalMs <= 0) return 0;
    return Math.max(0, last + this.deps.minRestartIntervalMs - this.now().getTime());
  }

  private async defer(ref: WorkloadRef, plan: Plan, waitMs: number): Promise<RestarterReconcileResult> {
    if (!this.deferred.has(ref.key)) {
      this.deferred.add(ref.key);
      this.deps.metrics.restartsDeferred.inc();
      const at = new Date(this.now().getTime() + waitMs).toISOString();
      const message = `Restart deferred until ${at} (at most one per ${this.deps.minRestartIntervalMs / 1000} s): ${plan.changes.map(describeChange).join('; ')}`;
      this.deps.logger.info({ workload: ref.key, until: at }, `${describeWorkload(ref)}: ${message}`);
      await this.deps.events.record(eventSubject(ref, plan.set), { type: 'Normal', reason: REASON_RESTARTS_DEFERRED, message, action: PATCH_ACTION });
    }
    return { requeueAfterMs: waitMs };
  }

  private async writeTemplate(ref: WorkloadRef, plan: Plan): Promise<RestarterReconcileResult> {
    const { set, desired, changes } = plan;
    const current = set.spec?.template?.metadata?.annotations;
    const reason = patchReason(current, changes, plan.dialect);
    const at = this.now().toISOString();
    // the Event rides in the write as due, so that it outlives this process (settleDue)
    const due: EventDue = { uid: set.metadata?.uid ?? '', at, type: 'Normal', reason, message: changes.map(describeChange).join('; ') };
    const ops = [
      ...annotationPatch(ref.kind, set, desired, changes),
      ...workloadAnnotationOps(set.metadata?.annotations, {
        ...this.recordValues(plan),
        [LAST_RESTART_ANNOTATION]: at,
        [EVENT_DUE_ANNOTATION]: formatEventDue(due),
        ...this.timingValue(),
      }),
    ];
    let patched: Workload;
    try {
      patched = await this.patch(ref, set, ops, 'the pod template annotations');
    } catch (err) {
      if (!(err instanceof ConflictError) && isOutcomeUnknown((err as Error).cause)) {
        this.inDoubt.set(ref.key, { uid: set.metadata?.uid ?? '', basedOn: set.metadata?.resourceVersion ?? '', reason, changes, due });
      }
      throw err;
    }
    this.inDoubt.delete(ref.key);
    this.deferred.delete(ref.key);
    this.lastWrites.set(ref.key, { uid: set.metadata?.uid ?? '', at: Date.parse(at) });
    await this.tellRestart(ref, set, patched, reason, changes, due, false);
    return { patched: reason };
  }

  /** Every template write has its metrics, a log line and an Event naming the set and both versions. */
  private async tellRestart(ref: WorkloadRef, set: Workload, patched: Workload | undefined, reason: string, changes: AnnotationChange[], due: EventDue, answerLost: boolean): Promise<void> {
    const { deps } = this;
    const message = due.message;
    const workloadKind = ref.kind;
    deps.metrics.patches.inc({ reason, kind: workloadKind });
    if (reason === REASON_CONFIG_CHANGED) {
      const kinds = new Set(changes.filter((c) => c.from !== undefined && c.to !== undefined && c.kind).map((c) => c.kind));
      for (const kind of kinds) if (kind) deps.metrics.restarts.inc({ kind, workload_kind: workloadKind });
    }
    deps.logger.info(
      {
        workload: ref.key,
        reason,
        resourceVersion: (patched ?? set).metadata?.resourceVersion,
        changes: changes.map((c) => ({ kind: c.kind, name: c.name, key: c.key, from: c.from, to: c.to })),
        ...(answerLost ? { answerLost: true } : {}),
      },
      `${describeWorkload(ref)} restarts: ${message}${answerLost ? " (the write's answer was lost; the set carries it)" : ''}`,
    );
    // not stored: the mark the write carries stays, and the set's next reconcile tells it
    await this.tellDue(ref, set, patched, due);
  }

  /** The timing record rides along with a write of the set's annotations, never a reason for one (on a Deployment that write would be a generation). */
  private timingValue(): Record<string, string> {
    return this.deps.timing === undefined ? {} : { [TIMING_ANNOTATION]: this.deps.timing };
  }

  /** The frozen list and the digest records where the plan changes them (null: removed). */
  private recordValues(plan: Plan): Record<string, string | undefined> {
    return {
      ...(plan.frozen === undefined ? {} : { [FROZEN_ANNOTATION]: plan.frozen ?? undefined }),
      ...(plan.digests === undefined ? {} : { [DIGESTS_ANNOTATION]: plan.digests ?? undefined }),
    };
  }

  /** Only the frozen list or the digest records differ: a write of the set's own metadata, which rolls nothing. */
  private async writeFrozen(ref: WorkloadRef, plan: Plan): Promise<RestarterReconcileResult> {
    const inPlace = plan.inPlace ?? [];
    // digest records alone are not worth a new generation; they ride along with the next write (a change served in place is worth its record)
    if (plan.frozen === undefined && inPlace.length === 0 && annotationWritesBumpGeneration(ref.kind)) return {};
    const records = this.recordValues(plan);
    if (workloadAnnotationOps(plan.set.metadata?.annotations, records).length === 0) return {};
    const ops = workloadAnnotationOps(plan.set.metadata?.annotations, { ...records, ...this.timingValue() });
    const patched = await this.patch(ref, plan.set, [{ op: 'test', path: '/metadata/resourceVersion', value: plan.set.metadata?.resourceVersion ?? '' }, ...ops], 'the frozen references and data digests');
    if (plan.frozen !== undefined) this.deps.logger.debug({ workload: ref.key, frozen: plan.frozen }, `${describeWorkload(ref)}: frozen references now ${plan.frozen ?? 'none'}`);
    for (const served of inPlace) await this.tellInPlace(ref, plan.set, patched, served);
    return {};
  }

  /** A change the running pods read from their mounted files: recorded with the digests (written before), logged, counted, told. */
  private async tellInPlace(ref: WorkloadRef, set: Workload, patched: Workload, served: InPlaceChange): Promise<void> {
    const { kind, name } = served.planned;
    const keys = served.keys === null ? 'its data' : `${served.keys.length === 1 ? 'key' : 'keys'} ${served.keys.join(', ')}`;
    const message = `${kind} ${name} changed ${keys} (${served.from} → ${served.to}): served in place to the running pods through their mounted files (${RELOAD_ANNOTATION}: ${RELOAD_FILES}), no restart`;
    this.deps.metrics.updatedInPlace?.inc({ kind, workload_kind: ref.kind });
    this.deps.logger.info({ workload: ref.key, kind, object: name, from: served.from, to: served.to, keys: served.keys }, `${describeWorkload(ref)}: ${message}`);
    await this.deps.events.record(eventSubject(ref, set, patched), { type: 'Normal', reason: REASON_UPDATED_IN_PLACE, message, action: PATCH_ACTION });
  }

  /** Whether a reference of the template lacks a digest record that is right for its value (then one read makes it). */
  private mayNeedRecords(set: Workload, desired: DesiredAnnotation[], dialect: Dialect): boolean {
    if (!this.deps.data || !dialect.baselineDigests) return false;
    const records = parseDigestRecords(set.metadata?.annotations);
    const current = set.spec?.template?.metadata?.annotations ?? {};
    const readsOf = readKeysFor(dialect, set.spec?.template);
    const stale = [...records.keys()].some((k) => !desired.some((d) => d.key === k));
    // before the first check loads the keys, any record's key id stands
    const namespace = set.metadata?.namespace ?? '';
    return (
      stale ||
      desired.some(
        (d) =>
          current[d.key] === d.value &&
          needsBaseline(d.value, records.get(d.key), this.keyId ?? records.get(d.key)?.keyId ?? '', readsOf(d.kind, d.name)) &&
          this.cachedAt(d, namespace, records.get(d.key), readsOf(d.kind, d.name)),
      )
    );
  }

  /**
   * Whether the cache shows the object where a read can make a record: at the template's version,
   * or within the record's. Else (a frozen reference, an object that moved on) a read would make
   * none, and is not made.
   */
  private cachedAt(d: DesiredAnnotation, namespace: string, record: DigestRecord | undefined, reads: ReadKeys): boolean {
    const version = this.deps.lookup(d.kind, namespace, d.name);
    if (!version) return false;
    const value = `${version.uid}/${version.resourceVersion}`;
    if (value === d.value) return true;
    const at = numericResourceVersion(version.resourceVersion);
    const upTo = recordCovers(record, d.value, reads) ? parseAnnotationValue(record.version) : undefined;
    return at !== undefined && upTo?.kind === 'version' && at <= upTo.resourceVersion;
  }

  /**
   * The data check. A planned bump of a version (a newer resourceVersion, or a recreated object)
   * is decided on the object's data: one GET, shared by every set that references it, compared
   * with the digest recorded for the version the template names. Equal: no bump, the newer version
   * recorded as equivalent. Different: the bump, with the changed keys for its Event. References
   * without a record get one from a read while the object is still at the template's version.
   */
  private async checkData(ref: WorkloadRef, plan: Plan): Promise<Plan> {
    const data = this.deps.data;
    if (!data) return plan;
    let currentKeyId: string;
    try {
      currentKeyId = await data.currentKeyId();
    } catch (err) {
      // without the key every bump rolls, as before the data check: a change is never missed
      this.deps.metrics.dataCheckFailures?.inc({ reason: 'key' });
      this.deps.logger.warn({ workload: ref.key, err: errorText(err) }, `${describeWorkload(ref)}: no data digest key (${errorText(err)}); version bumps roll without a data check`);
      return plan;
    }
    this.keyId = currentKeyId;
    const readData = async (d: DesiredAnnotation): Promise<DigestRead | undefined> => {
      try {
        return await data.read(d.kind, namespace, d.name, d.value);
      } catch (err) {
        this.deps.metrics.dataCheckFailures?.inc({ reason: 'read' });
        this.deps.logger.warn({ workload: ref.key, kind: d.kind, object: d.name, err: errorText(err) }, `${describeWorkload(ref)}: reading ${d.kind} ${d.name} for its data digest failed (${errorText(err)}); a bump rolls without a data check`);
        return undefined;
      }
    };
    // a Deployment keeps no record but with a template write: a baseline from history would be read again on every reconcile
    const history = data.readAt && plan.dialect.baselineDigests && !annotationWritesBumpGeneration(ref.kind) ? data.readAt.bind(data) : undefined;
    const readHistory = async (item: DataCheckItem, stored: string): Promise<DigestRecord | undefined> => {
      const { kind, name } = item.planned;
      try {
        const read = await history?.(kind, namespace, name, stored);
        const made = read ? baselineRecord(stored, undefined, read, currentKeyId) : undefined;
        this.deps.logger.debug({ workload: ref.key, kind, object: name, stored, found: made !== undefined }, `${describeWorkload(ref)}: no digest record for ${kind} ${name} at ${stored}; ${made ? 'read it from the API server\'s history' : 'that version is no longer in the API server\'s history: the bump rolls'}`);
        return made;
      } catch (err) {
        this.deps.metrics.dataCheckFailures?.inc({ reason: 'read' });
        this.deps.logger.warn({ workload: ref.key, kind, object: name, err: errorText(err) }, `${describeWorkload(ref)}: reading ${kind} ${name} at ${stored} for its data digest failed (${errorText(err)}); a bump rolls without a data check`);
        return undefined;
      }
    };
    const namespace = plan.set.metadata?.namespace ?? '';
    const template = plan.set.spec?.template?.metadata?.annotations ?? {};
    const records = parseDigestRecords(plan.set.metadata?.annotations);
    const readsOf = readKeysFor(plan.dialect, plan.set.spec?.template);
    const required = plan.dialect.requirements?.(plan.set.spec?.template);
    const restartReads = plan.set.metadata?.annotations?.[RELOAD_ANNOTATION] === RELOAD_FILES ? plan.dialect.restartKeys?.(plan.set.spec?.template) : undefined;
    const items: DataCheckItem[] = plan.desired.map((planned) => {
      const id = `${planned.kind}/${planned.name}`;
      const requirement = required?.get(id);
      const fixed = restartReads?.get(id);
      return {
        planned,
        stored: Object.hasOwn(template, planned.key) ? template[planned.key] : undefined,
        record: records.get(planned.key),
        reads: readsOf(planned.kind, planned.name),
        ...(requirement ? { required: requirement } : {}),
        ...(fixed ? { restartReads: fixed } : {}),
      };
    });
    const outcomes: DataOutcome[] = [];
    const checked: DataCheckItem[] = [];
    const missing = [...plan.missing];
    for (const given of items) {
      const step = dataStep(given, plan.dialect, currentKeyId, () => this.cachedAt(given.planned, namespace, given.record, given.reads ?? 'all'));
      const item = history && needsHistory(given, step) ? { ...given, record: (await readHistory(given, step.stored)) ?? given.record } : given;
      const outcome = dataOutcome(item, step, step.read ? await readData(item.planned) : undefined, currentKeyId);
      if (outcome.metadataOnly) {
        const { kind, name } = item.planned;
        const { from, to } = outcome.metadataOnly;
        this.deps.logger.debug({ workload: ref.key, kind, object: name, from, to }, `${describeWorkload(ref)}: ${kind} ${name} changed metadata only (${from} → ${to}); no restart`);
        this.deps.metrics.metadataOnlyChanges.inc();
      }
      if (outcome.unread) {
        const { kind, name } = item.planned;
        const { from, to, keys } = outcome.unread;
        const read = item.reads === undefined || item.reads === 'all' ? 'every key' : item.reads.length === 0 ? 'no key' : `only ${item.reads.join(', ')}`;
        this.deps.logger.debug(
          { workload: ref.key, kind, object: name, from, to, keys, reads: item.reads },
          `${describeWorkload(ref)}: ${kind} ${name} changed ${keys.length === 1 ? 'key' : 'keys'} ${keys.join(', ')} (${from} → ${to}), and the template reads ${read}; no restart`,
        );
      }
      if (outcome.missingKeys) {
        const { kind, name, key } = item.planned;
        missing.push({ key, kind, name, stored: outcome.missingKeys.from, keys: outcome.missingKeys.keys });
      }
      checked.push(item);
      outcomes.push(outcome);
    }
    return { ...plan, missing, ...checkedPlan(checked, outcomes, template, plan.set.metadata?.annotations?.[DIGESTS_ANNOTATION] ?? null, plan.dialect) };
  }

  /**
   * The webhook folded a version bump into an owner's template change and said so in the set's
   * RESTART_REASON_ANNOTATION: the restart happened with that write. Its removal carries the
   * Event as due (EVENT_DUE_ANNOTATION), then the Event is told: a process that dies between the
   * two leaves it to the next, and a retry never tells it twice.
   */
  private async explainAdmission(ref: WorkloadRef, set: Workload): Promise<RestarterReconcileResult> {
    const reason = set.metadata?.annotations?.[RESTART_REASON_ANNOTATION] ?? '';
    const message = `${reason} (applied at admission, with the owner's change to the template)`;
    const due: EventDue = { uid: set.metadata?.uid ?? '', at: this.now().toISOString(), type: 'Normal', reason: REASON_CONFIG_CHANGED, message };
    const ops: Operation[] = [
      { op: 'test', path: '/metadata/resourceVersion', value: set.metadata?.resourceVersion ?? '' },
      ...workloadAnnotationOps(set.metadata?.annotations, { [RESTART_REASON_ANNOTATION]: undefined, [EVENT_DUE_ANNOTATION]: formatEventDue(due), ...this.timingValue() }),
    ];
    const patched = await this.patch(ref, set, ops, 'the restart reason');
    const workloadKind = ref.kind;
    this.deps.metrics.patches.inc({ reason: REASON_CONFIG_CHANGED, kind: workloadKind });
    for (const kind of kindsIn(reason)) this.deps.metrics.restarts.inc({ kind, workload_kind: workloadKind });
    this.deps.logger.info({ workload: ref.key, reason: REASON_CONFIG_CHANGED, admission: true }, `${describeWorkload(ref)} restarted: ${message}`);
    await this.tellDue(ref, set, patched, due);
    // the set is queued again by its own watch event: its other annotations are looked at then
    return {};
  }

  /**
   * A required object or key that is gone holds the set at the version its pods run with: a
   * Warning once per state (what is missing), the metric with it; a Normal Event once it is all back.
   */
  private async tellMissing(ref: WorkloadRef, set: Workload, missing: readonly MissingReference[]): Promise<void> {
    const uid = set.metadata?.uid ?? '';
    const told = this.toldMissing.get(ref.key);
    if (missing.length === 0) {
      if (!told) return;
      this.toldMissing.delete(ref.key);
      if (told.uid !== uid) return;
      const message = `Back: ${told.what}; nothing was restarted for it`;
      this.deps.logger.info({ workload: ref.key }, `${describeWorkload(ref)}: ${message}`);
      await this.deps.events.record(eventSubject(ref, set), { type: 'Normal', reason: REASON_REFERENCE_RESTORED, message, action: PATCH_ACTION });
      return;
    }
    const { text, what } = missingText(missing);
    if (told?.text === text && told.uid === uid) return;
    this.toldMissing.set(ref.key, { text, what, uid });
    await this.warn(ref, set, { metric: 'reference_missing', reason: REASON_REFERENCE_MISSING, message: text, fields: { missing }, action: 'Hold' });
  }

  /**
   * A Deployment or DaemonSet that asks for a StatefulSet-only feature gets a Warning that says
   * so, once per object and request (its annotations and their values): a resync, a status write
   * or a rollout tells nothing again; a changed request, or a new leader, tells it once more.
   */
  private async tellUnsupported(ref: WorkloadRef, set: Workload): Promise<void> {
    const { kind } = ref;
    const requests = unsupportedFeatures(kind, set.metadata?.annotations, this.deps.statefulSetOnly ?? []);
    // a Rollout that runs another workload's template (spec.workloadRef) has nothing of its own to restart
    const elsewhere = templateElsewhere(kind, set);
    if (requests.length === 0 && !elsewhere) {
      this.toldUnsupported.delete(ref.key);
      return;
    }
    const asked = Object.fromEntries(requests.flatMap((r) => r.annotations).map((k) => [k, set.metadata?.annotations?.[k]]));
    const told = JSON.stringify([set.metadata?.uid, asked, elsewhere ?? null]);
    if (this.toldUnsupported.get(ref.key) === told) return;
    this.toldUnsupported.set(ref.key, told);
    if (requests.length > 0) {
      const message = unsupportedMessage(kind, requests);
      this.deps.logger.warn({ workload: ref.key, features: requests.map((r) => r.feature) }, `${describeWorkload(ref)}: ${message}`);
      await this.deps.events.record(eventSubject(ref, set), { type: 'Warning', reason: REASON_UNSUPPORTED_FOR_KIND, message, action: 'Ignore' });
    }
    if (elsewhere) {
      const message = templateElsewhereMessage(elsewhere);
      this.deps.logger.warn({ workload: ref.key, workloadRef: elsewhere }, `${describeWorkload(ref)}: ${message}`);
      await this.deps.events.record(eventSubject(ref, set), { type: 'Warning', reason: REASON_TEMPLATE_IN_WORKLOAD_REF, message, action: 'Ignore' });
    }
  }

  private async patch(ref: WorkloadRef, set: Workload, ops: Operation[], what: string): Promise<Workload> {
    try {
      return await this.deps.patchWorkload(ref.kind, ref.namespace, ref.name, ops);
    } catch (err) {
      const denied = policyDenial(err);
      if (denied) await this.deps.events.record(eventSubject(ref, set), { type: 'Warning', reason: REASON_WRITE_DENIED, message: denied, action: PATCH_ACTION });
      const invalid = denied ? [] : invalidFields(err);
      if (invalid.length > 0) {
        const message = `The API server refused the write of ${what} as invalid: ${invalid.map((f) => `${f.field}: ${f.message}`).join('; ')}; not retried until ${ref.kind} ${ref.name} changes`;
        if (set.metadata?.resourceVersion !== undefined) this.refusedAt.set(ref.key, set.metadata.resourceVersion);
        await this.warn(ref, set, { metric: 'invalid', reason: REASON_WRITE_INVALID, message, fields: { fields: invalid.map((f) => f.field) } });
        throw new InvalidWriteError(`${describeWorkload(ref)}: ${message}`, { cause: err });
      }
      if (isConflict(err)) {
        throw new ConflictError(
          `${describeWorkload(ref)} changed since resourceVersion ${set.metadata?.resourceVersion} (HTTP ${statusCode(err)}); will retry from the newer version`,
          { cause: err },
        );
      }
      throw new Error(`patching ${what} of ${describeWorkload(ref)}: ${errorText(err)}`, { cause: err });
    }
  }
}

/** The Warning's words for what is gone: each object or its keys, and that the set was not restarted. */
export function missingText(missing: readonly MissingReference[]): { text: string; what: string } {
  const sorted = [...missing].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const what = sorted.map((m) => (m.keys === undefined ? `${m.kind} ${m.name}` : `${m.kind} ${m.name} ${m.keys.length === 1 ? 'key' : 'keys'} ${m.keys.join(', ')}`)).join('; ');
  const parts = sorted.map((m) =>
    m.keys === undefined
      ? `${m.kind} ${m.name} is gone (template keeps ${m.stored})`
      : `${m.kind} ${m.name} lacks ${m.keys.length === 1 ? 'key' : 'keys'} ${m.keys.join(', ')} (template keeps ${m.stored})`,
  );
  return { what, text: `${parts.join('; ')}; its pods cannot start without it (the reference is not optional), so the set was not restarted` };
}

function eventSubject(ref: WorkloadRef, set: Workload, patched?: Workload): EventSubject {
  return {
    apiVersion: workloadApiVersion(ref.kind),
    kind: ref.kind,
    namespace: set.metadata?.namespace ?? '',
    name: set.metadata?.name ?? '',
    uid: set.metadata?.uid ?? '',
    resourceVersion: (patched ?? set).metadata?.resourceVersion,
  };
}
