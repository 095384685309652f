import type { V1PodTemplateSpec } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import { isJsonObject, sameJson } from '../kube/json.js';
import type { Mutator } from '../admission/mutators.js';
import { restarterView, type RestarterView } from '../admission/workload-view.js';
import {
  FROZEN_ANNOTATION,
  LAST_RESTART_ANNOTATION,
  RESTART_REASON_ANNOTATION,
  ROLLGUARD_DIALECT,
  annotationChanges,
  planAnnotations,
  storedAnnotations,
  templateBesidesRollguard,
  type DesiredAnnotation,
  type Dialect,
  type VersionLookup,
} from './annotations.js';
import { describeChange } from './change-text.js';
import { templateAnnotationOps, workloadAnnotationOps } from './patch.js';
import type { ObjectKind } from './references.js';
import { TIMING_ANNOTATION } from './timing.js';
import { DIGESTS_ANNOTATION } from './digests.js';
import { EVENT_DUE_ANNOTATION } from './event-due.js';
import { parseAnnotationValue } from './versions.js';

/**
 * The restarter's records on the workload itself (outside its template): only rollguard writes
 * them. A user's operation that carries the whole object (`kubectl replace`, a PUT re-apply,
 * `kubectl rollout undo` of a Deployment, which copies an old ReplicaSet's annotations) must not
 * drop or roll them back, and a copy of another set (`kubectl get -o yaml`, a restore) must not
 * bring that set's records along.
 */
export const RESTARTER_RECORDS = [LAST_RESTART_ANNOTATION, DIGESTS_ANNOTATION, FROZEN_ANNOTATION, TIMING_ANNOTATION, RESTART_REASON_ANNOTATION, EVENT_DUE_ANNOTATION] as const;

export interface RestarterMutatorDeps {
  /** Until the caches have synced every version would look absent: only what needs no cache is done. */
  cachesSynced: boolean;
  /** Versions from the in-memory caches; no API call. */
  lookup: VersionLookup;
  /** How far the cache of `kind` has seen in `namespace`. */
  cacheProgress?: (kind: ObjectKind, namespace: string) => string;
  /** The dialect of a workload with these labels; omitted, undefined, or one that does not speak the request's kind: rollguard's. */
  dialectOf?: (labels: Record<string, string> | undefined) => Dialect | undefined;
  /** TIMING_ANNOTATION's value, written into a CREATE (a new object's generation is 1 whatever it carries); omitted: none. */
  timing?: string;
  /**
   * rollguard's own ServiceAccount username (kube/identity.ts): an UPDATE it makes is the loop's
   * and passes as written, any other is a user's, whose RESTARTER_RECORDS are kept as the old
   * object has them. Omitted (rollguard runs with a person's credentials): the loop's writes are
   * told by a changed LAST_RESTART_ANNOTATION, and records are not restored.
   */
  ownUser?: string;
}

/**
 * The pod template's rollguard annotations at admission.
 * - CREATE: every reference gets the version the caches know, so the first rollout is the only one.
 * - UPDATE, template unchanged besides rollguard's keys (an annotate, a re-apply, a scale, our own
 *   partition step): the old object's values are kept as they are, from `oldObject`, with no cache.
 *   A version bump of an unchanged template is the loop's: debounced, paced, with an Event.
 * - UPDATE by rollguard's own loop (it changes LAST_RESTART_ANNOTATION in every template patch):
 *   taken as written; the loop has planned it, debounced, paced and explained it.
 * - UPDATE that changes the template anyway: new references get the current version and stale ones
 *   go; changed objects are bumped in the same write (one rollout, not two), and the bump is
 *   written into RESTART_REASON_ANNOTATION so that the leader records its Event.
 * Never a value older than the stored one (planAnnotations).
 */
export function restarterMutator(deps: RestarterMutatorDeps): Mutator {
  return (request, object) => {
    const workload = restarterView(object);
    const labelled = deps.dialectOf?.(workload.metadata.labels);
    const dialect = labelled && (labelled.kinds as readonly string[]).includes(request.kind.kind) ? labelled : ROLLGUARD_DIALECT;
    const template = workload.spec?.template ?? undefined;
    // On CREATE the object's own namespace is often still empty; the request's is authoritative.
    const namespace = request.namespace || workload.metadata?.namespace || '';
    const current = template?.metadata?.annotations ?? undefined;
    const old = request.operation === 'UPDATE' && isJsonObject(request.oldObject) ? restarterView(request.oldObject) : undefined;
    const oldTemplate = old?.spec?.template ?? undefined;
    const templateChanged = old === undefined || !sameJson(templateBesidesRollguard(oldTemplate, dialect), templateBesidesRollguard(template, dialect));

    const byRollguard = deps.ownUser !== undefined ? request.userInfo?.username === deps.ownUser : old !== undefined && writtenByTheLoop(old, workload);
    if (old && byRollguard) return [];
    // the workload's own annotations are set in one call at the end: a map that a PUT dropped is added once, whole
    const records = recordsFor(old, deps);
    const setOps = (extra: Record<string, string | undefined> = {}): Operation[] => workloadAnnotationOps(workload.metadata?.annotations, { ...records, ...extra });
    if (old && (!templateChanged || !deps.cachesSynced)) {
      // keep what the old object carried; what the caches would add is the loop's
      const kept = storedAnnotations(oldTemplate?.metadata?.annotations, dialect);
      const desired = templateChanged ? keptForReferences(kept, template, current, dialect) : kept;
      return [...templateAnnotationOps(template?.metadata, desired, annotationChanges(current, desired, dialect)), ...setOps()];
    }
    if (!deps.cachesSynced) return setOps();

    const plan = planAnnotations({
      dialect,
      namespace,
      // the records as this write will leave them: the digests and frozen list of the set, not of a copy or a PUT
      annotations: withRecords(workload.metadata?.annotations, records),
      template,
      // a new object's template may carry another set's values (a copy): only those of the objects the caches know stand
      stored: old ? oldTemplate?.metadata?.annotations : ownObjectsOnly(current, namespace, deps.lookup, dialect),
      storedAt: old?.metadata?.resourceVersion,
      // a new set's pods cannot start without a required object either way; an UPDATE keeps the version its pods run with
      holdMissing: old !== undefined,
      lookup: deps.lookup,
      cacheProgress: deps.cacheProgress ? (kind) => deps.cacheProgress!(kind, namespace) : undefined,
    });
    const ops = templateAnnotationOps(template?.metadata, plan.desired, annotationChanges(current, plan.desired, dialect));
    if (!old) return [...ops, ...setOps()];
    const bumps = annotationChanges(oldTemplate?.metadata?.annotations ?? undefined, plan.desired, dialect).filter((c) => c.from !== undefined && c.to !== undefined);
    if (bumps.length === 0) return [...ops, ...setOps()];
    const reason = bumps.map(describeChange).join('; ');
    const unconsumed = old.metadata?.annotations?.[RESTART_REASON_ANNOTATION];
    const value = unconsumed && unconsumed !== reason && !unconsumed.endsWith(`; ${reason}`) ? `${unconsumed}; ${reason}` : reason;
    return [...ops, ...setOps({ [RESTART_REASON_ANNOTATION]: value })];
  };
}

/**
 * RESTARTER_RECORDS as the write should leave them. CREATE: none of a copy's (another set's
 * records), the timing record if given. A user's UPDATE when rollguard knows its own identity:
 * the old object's, whatever the new one says. Else: as written.
 */
function recordsFor(old: RestarterView | undefined, deps: RestarterMutatorDeps): Record<string, string | undefined> {
  if (!old) {
    const none: Record<string, string | undefined> = Object.fromEntries(RESTARTER_RECORDS.map((key) => [key, undefined]));
    return deps.timing === undefined ? none : { ...none, [TIMING_ANNOTATION]: deps.timing };
  }
  if (deps.ownUser === undefined) return {};
  const before = old.metadata?.annotations;
  return Object.fromEntries(RESTARTER_RECORDS.map((key) => [key, before && Object.hasOwn(before, key) ? before[key] : undefined]));
}

/** The workload's annotations with `records` set (a string) or removed (undefined). */
function withRecords(annotations: Record<string, string> | undefined, records: Record<string, string | undefined>): Record<string, string> | undefined {
  if (Object.keys(records).length === 0) return annotations;
  const kept = Object.entries(annotations ?? {}).filter(([key]) => !Object.hasOwn(records, key));
  const set = Object.entries(records).filter((entry): entry is [string, string] => entry[1] !== undefined);
  return Object.fromEntries([...kept, ...set]);
}

/**
 * A new template's values without those that name another object than the one the caches know
 * under that name (another namespace's, or a deleted one's, copied with `kubectl get -o yaml`
 * or restored from a backup): such a value says nothing about what this set's pods read.
 */
export function ownObjectsOnly(values: Record<string, string> | undefined, namespace: string, lookup: VersionLookup, dialect: Dialect): Record<string, string> | undefined {
  if (!values) return values;
  return Object.fromEntries(
    Object.entries(values).filter(([key, value]) => {
      const target = dialect.annotationTarget(key);
      if (!target?.name || typeof value !== 'string') return true;
      const parsed = parseAnnotationValue(value);
      const known = lookup(target.kind, namespace, target.name);
      return parsed.kind !== 'version' || known === undefined || known.uid === parsed.uid;
    }),
  );
}

/** The loop writes its restart time with every template patch; nobody else has a reason to. */
function writtenByTheLoop(old: RestarterView, workload: RestarterView): boolean {
  const before = old.metadata?.annotations?.[LAST_RESTART_ANNOTATION];
  const after = workload.metadata?.annotations?.[LAST_RESTART_ANNOTATION];
  return after !== undefined && after !== before;
}

/** For each reference of the new template: the old object's value, else the one the owner wrote; none without either. */
function keptForReferences(kept: DesiredAnnotation[], template: V1PodTemplateSpec | undefined, current: Record<string, string> | undefined, dialect: Dialect): DesiredAnnotation[] {
  const old = new Map(kept.map((d) => [d.key, d.value]));
  const desired: DesiredAnnotation[] = [];
  for (const { kind, name } of dialect.references(template)) {
    const key = dialect.annotationKey(kind, name);
    const value = old.get(key) ?? (current && Object.hasOwn(current, key) ? current[key] : undefined);
    if (value !== undefined) desired.push({ key, kind, name, value });
  }
  return desired;
}
