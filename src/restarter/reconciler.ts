import type { Operation } from 'fast-json-patch';
import type { V1StatefulSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { policyDenial, REASON_WRITE_DENIED } from '../kube/policy-denial.js';
import type { EventRecorder, EventSubject } from '../kube/events.js';
import { splitObjectKey } from '../kube/informer.js';
import type { TokenBucket } from '../kube/token-bucket.js';
import type { Metrics } from '../metrics.js';
import {
  ABSENT,
  ENABLED_LABEL,
  annotationChanges,
  desiredAnnotations,
  isRollguardAnnotation,
  withDesiredAnnotations,
  type AnnotationChange,
  type DesiredAnnotation,
  type VersionLookup,
} from './annotations.js';
import type { ObjectKind } from './references.js';

/** Event reasons: a referenced object changed; references tracked for the first time (or newly); references dropped. */
export const REASON_CONFIG_CHANGED = 'ConfigChanged';
export const REASON_REFERENCES_ANNOTATED = 'ReferencesAnnotated';
export const REASON_REFERENCES_REMOVED = 'ReferencesRemoved';
export const PATCH_ACTION = 'PatchPodTemplate';

/** While the caches are still listing, every object would look absent; the item waits this long and tries again. */
const NOT_SYNCED_RETRY_MS = 1_000;
/** A cache behind an annotation (written by a webhook replica with a fresher cache) is given this long between looks… */
const CACHE_LAG_RETRY_MS = 250;
/** …and at most this long in all, so an annotation carrying a made-up resourceVersion cannot stall the set. */
const CACHE_LAG_MAX_MS = 60_000;

/** The API server refused the patch because the set changed since the cache saw it; retry with fresh state. */
export class ConflictError extends Error {
  override readonly name = 'ConflictError';
}

export interface ReconcilerDeps {
  statefulSet(namespace: string, name: string): V1StatefulSet | undefined;
  lookup: VersionLookup;
  cachesSynced(): boolean;
  /** The newest resourceVersion the cache of `kind` reflects in `namespace`; '' when unknown. */
  cacheProgress(kind: ObjectKind, namespace: string): string;
  patchStatefulSet(namespace: string, name: string, ops: Operation[]): Promise<V1StatefulSet>;
  events: Pick<EventRecorder, 'record'>;
  restartLimiter: Pick<TokenBucket, 'take'>;
  logger: Logger;
  metrics: Pick<Metrics, 'patches' | 'restarts'>;
}

export interface ReconcileResult {
  /** The reason of the patch written, if one was. */
  patched?: string;
  /** Look again after this long; no error, just not yet. */
  requeueAfterMs?: number;
}

interface Plan {
  set: V1StatefulSet;
  desired: DesiredAnnotation[];
  changes: AnnotationChange[];
}

function escapePointer(segment: string): string {
  return segment.replaceAll('~', '~0').replaceAll('/', '~1');
}

/**
 * The JSON Patch that brings the set's template annotations from what the cache holds to
 * `desired`. It starts with a test of the cached resourceVersion: if anyone wrote the set since,
 * the API server refuses it whole, and nothing the writer did is overwritten.
 */
export function annotationPatch(set: V1StatefulSet, desired: DesiredAnnotation[], changes: AnnotationChange[]): Operation[] {
  const resourceVersion = set.metadata?.resourceVersion;
  if (!resourceVersion) {
    throw new Error(`StatefulSet ${set.metadata?.namespace}/${set.metadata?.name} has no metadata.resourceVersion to patch against`);
  }
  const ops: Operation[] = [{ op: 'test', path: '/metadata/resourceVersion', value: resourceVersion }];
  const meta = set.spec?.template?.metadata;
  const current = meta?.annotations;
  if (!meta) {
    ops.push({ op: 'add', path: '/spec/template/metadata', value: { annotations: withDesiredAnnotations(undefined, desired) } });
  } else if (!current) {
    ops.push({ op: 'add', path: '/spec/template/metadata/annotations', value: withDesiredAnnotations(undefined, desired) });
  } else {
    for (const change of changes) {
      const path = `/spec/template/metadata/annotations/${escapePointer(change.key)}`;
      if (change.to === undefined) ops.push({ op: 'remove', path });
      else if (change.from === undefined) ops.push({ op: 'add', path, value: change.to });
      else ops.push({ op: 'replace', path, value: change.to });
    }
  }
  return ops;
}

function parseValue(value: string): { uid: string; resourceVersion: string } | undefined {
  if (value === ABSENT) return undefined;
  const slash = value.indexOf('/');
  return slash < 0 ? { uid: '', resourceVersion: value } : { uid: value.slice(0, slash), resourceVersion: value.slice(slash + 1) };
}

/** One change in words: which object, of which kind, and both versions. */
export function describeChange(change: AnnotationChange): string {
  const object = change.kind && change.name ? `${change.kind} ${change.name}` : `the object of annotation ${change.key}`;
  if (change.to === undefined) return `no longer tracking ${object}`;
  const to = parseValue(change.to);
  if (change.from === undefined) return `tracking ${object} (resourceVersion ${to ? to.resourceVersion : ABSENT})`;
  const from = parseValue(change.from);
  if (!from && to) return `${object} appeared (resourceVersion ${ABSENT} → ${to.resourceVersion})`;
  if (from && !to) return `${object} was deleted (resourceVersion ${from.resourceVersion} → ${ABSENT})`;
  if (from && to && from.uid !== to.uid) {
    return `${object} was recreated (uid ${from.uid} → ${to.uid}, resourceVersion ${from.resourceVersion} → ${to.resourceVersion})`;
  }
  return `${object} changed (resourceVersion ${from?.resourceVersion ?? ABSENT} → ${to?.resourceVersion ?? ABSENT})`;
}

/** Why the template is patched: a value changed, references were tracked (the first time, or new ones), or dropped. */
export function patchReason(current: Record<string, string> | undefined, changes: AnnotationChange[]): string {
  const annotatedBefore = Object.keys(current ?? {}).some(isRollguardAnnotation);
  if (!annotatedBefore) return REASON_REFERENCES_ANNOTATED;
  if (changes.some((c) => c.from !== undefined && c.to !== undefined)) return REASON_CONFIG_CHANGED;
  if (changes.some((c) => c.from === undefined)) return REASON_REFERENCES_ANNOTATED;
  return REASON_REFERENCES_REMOVED;
}

function numericResourceVersion(value: string | undefined): bigint | undefined {
  const rv = value === undefined ? undefined : parseValue(value)?.resourceVersion;
  return rv !== undefined && /^\d+$/.test(rv) ? BigInt(rv) : undefined;
}

function conflictCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  // 409: resourceVersion conflict; 422: the patch's test of the resourceVersion failed.
  return code === 409 || code === 422 ? code : undefined;
}

/**
 * Brings one StatefulSet's restarter annotations to what its referenced objects' versions say,
 * from the caches alone; writes only when something differs, so a restart of rollguard (or a
 * change of leader) patches nothing that did not really change.
 */
export class Reconciler {
  private readonly lagSince = new Map<string, number>();

  constructor(private readonly deps: ReconcilerDeps) {}

  async reconcile(key: string, signal: AbortSignal): Promise<ReconcileResult> {
    const { deps } = this;
    if (!deps.cachesSynced()) return { requeueAfterMs: NOT_SYNCED_RETRY_MS };
    const { namespace, name } = splitObjectKey(key);
    const first = this.plan(namespace, name);
    if (!first) {
      this.lagSince.delete(key);
      return {};
    }
    if (this.cacheBehind(key, namespace, first.changes)) return { requeueAfterMs: CACHE_LAG_RETRY_MS };
    this.lagSince.delete(key);

    await deps.restartLimiter.take(signal);
    // The wait for a turn may have been long: plan again from what the caches hold now.
    const plan = this.plan(namespace, name);
    if (!plan) return {};
    const { set, desired, changes } = plan;
    const current = set.spec?.template?.metadata?.annotations;
    const reason = patchReason(current, changes);
    let patched: V1StatefulSet;
    try {
      patched = await deps.patchStatefulSet(namespace, name, annotationPatch(set, desired, changes));
    } catch (err) {
      const denied = policyDenial(err);
      if (denied) await deps.events.record(eventSubject(set, set), { type: 'Warning', reason: REASON_WRITE_DENIED, message: denied, action: PATCH_ACTION });
      const code = conflictCode(err);
      if (code !== undefined) {
        throw new ConflictError(
          `StatefulSet ${key} changed since resourceVersion ${set.metadata?.resourceVersion} (HTTP ${code}); will retry from the newer version`,
          { cause: err },
        );
      }
      throw new Error(`patching the pod template annotations of StatefulSet ${key}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }

    const descriptions = changes.map(describeChange);
    const message = descriptions.join('; ');
    deps.metrics.patches.inc({ reason });
    if (reason === REASON_CONFIG_CHANGED) {
      const kinds = new Set(changes.filter((c) => c.from !== undefined && c.to !== undefined && c.kind).map((c) => c.kind));
      for (const kind of kinds) deps.metrics.restarts.inc({ kind });
    }
    deps.logger.info(
      {
        statefulSet: key,
        reason,
        resourceVersion: patched.metadata?.resourceVersion,
        changes: changes.map((c) => ({ kind: c.kind, name: c.name, key: c.key, from: c.from, to: c.to })),
      },
      `StatefulSet ${key} restarts: ${message}`,
    );
    await deps.events.record(eventSubject(set, patched), { type: 'Normal', reason, message, action: PATCH_ACTION });
    return { patched: reason };
  }

  private plan(namespace: string, name: string): Plan | undefined {
    const set = this.deps.statefulSet(namespace, name);
    // The list/watch selects on the label already; this guards a set that lost it a moment ago.
    if (!set || set.metadata?.deletionTimestamp || set.metadata?.labels?.[ENABLED_LABEL] !== 'true') return undefined;
    const desired = desiredAnnotations(set, this.deps.lookup);
    const changes = annotationChanges(set.spec?.template?.metadata?.annotations, desired);
    return changes.length === 0 ? undefined : { set, desired, changes };
  }

  /**
   * True while an annotation names a resourceVersion newer than the cache has reached: another
   * replica's webhook wrote it from a fresher cache, and "correcting" it now would roll the set
   * back and forth. Gives up after CACHE_LAG_MAX_MS.
   */
  private cacheBehind(key: string, namespace: string, changes: AnnotationChange[]): boolean {
    const behind = changes.some((change) => {
      const annotated = numericResourceVersion(change.from);
      if (annotated === undefined || change.kind === undefined) return false;
      const progress = this.deps.cacheProgress(change.kind, namespace);
      return /^\d+$/.test(progress) && annotated > BigInt(progress);
    });
    if (!behind) return false;
    const since = this.lagSince.get(key) ?? Date.now();
    this.lagSince.set(key, since);
    if (Date.now() - since < CACHE_LAG_MAX_MS) return true;
    this.deps.logger.warn({ statefulSet: key }, `StatefulSet ${key} carries resourceVersions newer than the cache has seen for ${CACHE_LAG_MAX_MS} ms; correcting them`);
    return false;
  }
}

function eventSubject(set: V1StatefulSet, patched: V1StatefulSet): EventSubject {
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    namespace: set.metadata?.namespace ?? '',
    name: set.metadata?.name ?? '',
    uid: set.metadata?.uid ?? '',
    resourceVersion: patched.metadata?.resourceVersion,
  };
}
