import { createHash } from 'node:crypto';
import type { V1ObjectMeta, V1PodTemplateSpec } from '@kubernetes/client-node';
import type { CachedVersion } from '../kube/metadata-cache.js';
import { WORKLOAD_KINDS, type WorkloadKind } from '../kube/workloads.js';
import { keysRead, referencedObjects, requirements, restartKeys, type Reference, type ObjectKind, type ReadKeys, type Requirement } from './references.js';
import { knownEquivalent, parseDigestRecords, type ObjectData } from './digests.js';
import { ABSENT, numericResourceVersion, parseAnnotationValue, replaces } from './versions.js';

/** Label on a StatefulSet that opts it in; value "true". */
export const ENABLED_LABEL = 'rollguard.io/enabled';
/** Label on a ConfigMap or Secret that keeps it from ever being tracked; value "true". */
export const IGNORE_LABEL = 'rollguard.io/ignore';
/** Annotations on a StatefulSet: comma-separated names that it does not track. */
/** On a workload: `files` says its application re-reads its mounted files, so a change they alone carry restarts nothing. */
export const RELOAD_ANNOTATION = 'rollguard.io/reload';
export const RELOAD_FILES = 'files';
export const IGNORE_CONFIGMAPS_ANNOTATION = 'rollguard.io/ignore-configmaps';
export const IGNORE_SECRETS_ANNOTATION = 'rollguard.io/ignore-secrets';

export const ANNOTATION_PREFIX: Record<ObjectKind, string> = {
  ConfigMap: 'configmap.rollguard.io/',
  Secret: 'secret.rollguard.io/',
};

export { ABSENT } from './versions.js';
/**
 * Annotation on a workload (outside its pod template, so writing it rolls nothing): the
 * references whose object is labelled ignore, as `Kind/name`, comma-separated. Their template
 * annotations stay frozen at their last value, also once the object is deleted, when no cache
 * can tell any more that it was ignored. Only the reconcile loop writes it.
 */
export const FROZEN_ANNOTATION = 'rollguard.io/frozen';
/**
 * Annotation on a workload that the webhook writes when it folds a version bump into an owner's
 * template change (one rollout instead of two): what changed, in words. Admission has no side
 * effects, so the leader turns it into the Event and removes it.
 */
export const RESTART_REASON_ANNOTATION = 'rollguard.io/restart-reason';
/**
 * Annotation on a workload (outside its template): when rollguard's loop last patched its
 * template, RFC 3339. The restart floor counts from it, so a restart or a leader change of
 * rollguard keeps it; and the webhook knows the loop's own writes by it.
 */
export const LAST_RESTART_ANNOTATION = 'rollguard.io/last-restart-at';

/** What the caches know of one object: uid, resourceVersion, and whether it carries IGNORE_LABEL "true". */
export type ObjectVersion = CachedVersion;

/** The known version of an object; undefined when it does not exist. */
export type VersionLookup = (kind: ObjectKind, namespace: string, name: string) => ObjectVersion | undefined;

export interface DesiredAnnotation {
  key: string;
  kind: ObjectKind;
  name: string;
  value: string;
}

/** `from` undefined: the annotation is added; `to` undefined: it is removed. */
export interface AnnotationChange {
  key: string;
  kind?: ObjectKind;
  name?: string;
  from?: string;
  to?: string;
  /** The data keys whose digest changed; null: the data changed, keys not nameable; absent: not compared. */
  dataKeys?: string[] | null;
}

/** The name part of an annotation key: a qualified-name segment, as the API server validates it. */
export const ANNOTATION_SEGMENT = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const SEGMENT_MAX_LENGTH = 63;
/** 128 bits of sha256, in hex. */
const HASH_LENGTH = 32;
const NAME_PREFIX_LENGTH = SEGMENT_MAX_LENGTH - 1 - HASH_LENGTH;
// Object names (DNS-1123 subdomains) never contain "_", so a key with this tail cannot be a real name's key.
const SHORTENED_SEGMENT = new RegExp(`_[0-9a-f]{${HASH_LENGTH}}$`);

/** The name part of a key for `name`: the name itself when valid, else a deterministic shortened form. */
export function keySegment(name: string): string {
  if (name.length <= SEGMENT_MAX_LENGTH && ANNOTATION_SEGMENT.test(name)) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, HASH_LENGTH);
  // The readable part only has to keep the segment valid; the hash of the whole name makes it unique.
  const readable = name
    .slice(0, NAME_PREFIX_LENGTH)
    .replace(/[^-A-Za-z0-9_.]/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '');
  return `${readable || 'x'}_${hash}`;
}

export function annotationKey(kind: ObjectKind, name: string): string {
  return ANNOTATION_PREFIX[kind] + keySegment(name);
}

function kindOfAnnotation(key: string): ObjectKind | undefined {
  for (const kind of ['ConfigMap', 'Secret'] as const) {
    const prefix = ANNOTATION_PREFIX[kind];
    if (key.length > prefix.length && key.startsWith(prefix)) return kind;
  }
  return undefined;
}

export function isRollguardAnnotation(key: string): boolean {
  return kindOfAnnotation(key) !== undefined;
}

/**
 * The object a rollguard annotation key stands for. The name is known only when
 * the key holds it whole; a shortened key cannot be turned back into its name.
 */
export function annotationTarget(key: string): { kind: ObjectKind; name?: string } | undefined {
  const kind = kindOfAnnotation(key);
  if (!kind) return undefined;
  const segment = key.slice(ANNOTATION_PREFIX[kind].length);
  return SHORTENED_SEGMENT.test(segment) ? { kind } : { kind, name: segment };
}

/**
 * A template value of the form `<uid>/<digest of the object's data>`, which a dialect may write
 * instead of a version: kept while one read of the object gives the same digest.
 */
export interface ContentDigest {
  /** The parts of a value in this form; undefined for any other value. */
  parse(value: string): { uid: string; digest: string } | undefined;
  /** The digest of what pods can read of the object. */
  of(kind: ObjectKind, object: ObjectData): string;
}

/**
 * The annotation language a workload is restarted in: which label opts it in and which keeps an
 * object out, which kinds speak it, which keys and values its template carries, which
 * references and opt-outs count. rollguard's own is the default; main.ts hands in the others
 * (`--compat stackable`: commons-operator's, src/compat/stackable.ts).
 */
export interface Dialect {
  /** For logs. */
  name: string;
  /** The label (value "true") that opts a workload in: one label-filtered watch per kind the dialect speaks. */
  enabledLabel: string;
  /** The label (value "true") on a ConfigMap or Secret that keeps it from being tracked. */
  ignoreLabel: string;
  /** The workload kinds that speak it. */
  kinds: readonly WorkloadKind[];
  annotationKey(kind: ObjectKind, name: string): string;
  /** Whether the template annotation `key` is this dialect's (and so planned, changed or removed by it). */
  isOwnAnnotation(key: string): boolean;
  annotationTarget(key: string): { kind: ObjectKind; name?: string } | undefined;
  references(template: unknown): Reference[];
  /**
   * The keys the template reads of each referenced object, by `Kind/name`: a change to other keys
   * rolls nothing. Omitted: every reference reads its object whole, so any data change rolls.
   */
  keysRead?(template: unknown): Map<string, ReadKeys>;
  /**
   * What the template's pods cannot start without, by `Kind/name` (references.ts requirements):
   * a required object that is deleted, or a required key that is removed, holds the stored value
   * instead of rolling into pods that cannot start. Omitted: nothing is held (every deletion rolls).
   */
  requirements?(template: unknown): Map<string, Requirement>;
  /**
   * The keys the template reads of each object where a running pod never sees a change (env,
   * envFrom, a `subPath` mount), by `Kind/name` (references.ts restartKeys). Omitted: the dialect
   * serves nothing in place, whatever the workload says.
   */
  restartKeys?(template: unknown): Map<string, ReadKeys>;
  /** The names the workload's own annotations opt out, per kind. */
  ignoredNames(annotations: Record<string, string> | undefined): Record<ObjectKind, Set<string>>;
  /** The value of a reference whose object does not exist. */
  missing: string;
  /** The value an opted-out reference gets when nothing is stored yet; undefined: it is not tracked. */
  ignoredValue?: string;
  /** Stored values that mean "no version": compared as ABSENT, so the object's appearance replaces them. */
  noVersion(value: string): boolean;
  /** Whether the loop writes a digest record for an unchanged reference (a write to the set's metadata). */
  baselineDigests: boolean;
  /** The content-digest values the dialect's writer may have stored; absent: it writes none. */
  contentDigest?: ContentDigest;
}

export const ROLLGUARD_DIALECT: Dialect = {
  name: 'rollguard',
  enabledLabel: ENABLED_LABEL,
  ignoreLabel: IGNORE_LABEL,
  kinds: WORKLOAD_KINDS,
  annotationKey,
  isOwnAnnotation: isRollguardAnnotation,
  annotationTarget,
  references: referencedObjects,
  keysRead: (template) => keysRead(template),
  requirements: (template) => requirements(template),
  restartKeys: (template) => restartKeys(template),
  ignoredNames: (annotations) => ({
    ConfigMap: ignoredNames(annotations, IGNORE_CONFIGMAPS_ANNOTATION),
    Secret: ignoredNames(annotations, IGNORE_SECRETS_ANNOTATION),
  }),
  missing: ABSENT,
  noVersion: (value) => value === ABSENT,
  baselineDigests: true,
};

/**
 * The dialect a workload with `labels` is restarted in: the first of `dialects` (in precedence
 * order) whose label opts it in and, when `kind` is given, that speaks that kind; undefined: not opted in.
 */
export function dialectOf(dialects: readonly Dialect[], labels: Record<string, string> | null | undefined, kind?: string): Dialect | undefined {
  return dialects.find((d) => labels?.[d.enabledLabel] === 'true' && (kind === undefined || (d.kinds as readonly string[]).includes(kind)));
}

/**
 * The keys the template reads of `kind`/`name` in `dialect`; `all` where the dialect does not narrow.
 * The template is walked on the first call, not before: most plans never ask (a review of a new
 * set asks nothing), and the walk was a seventh of an admission review's CPU time.
 */
export function readKeysFor(dialect: Dialect, template: unknown): (kind: ObjectKind, name: string) => ReadKeys {
  let reads: Map<string, ReadKeys> | undefined;
  return (kind, name) => {
    reads ??= dialect.keysRead?.(template) ?? new Map();
    return reads.get(`${kind}/${name}`) ?? 'all';
  };
}

function ignoredNames(annotations: Record<string, string> | undefined, key: string): Set<string> {
  const names = new Set<string>();
  for (const part of annotations?.[key]?.split(',') ?? []) {
    const name = part.trim();
    if (name) names.add(name);
  }
  return names;
}

/** What the planner reads of one workload and the caches. */
export interface PlanInput {
  namespace: string;
  /** The workload's own annotations: opt-outs, frozen references. */
  annotations: Record<string, string> | undefined;
  template: V1PodTemplateSpec | undefined;
  /** The rollguard values stored now (the template's, or on an UPDATE the old object's). */
  stored: Record<string, string> | undefined;
  /** The resourceVersion of the object that holds `stored`. */
  storedAt?: string;
  lookup: VersionLookup;
  /** How far the cache of `kind` has seen, in this namespace; omitted: the lookup is authoritative. */
  cacheProgress?: (kind: ObjectKind) => string;
  /** Omitted: rollguard's own. */
  dialect?: Dialect;
  /**
   * Whether a required object that is gone keeps the stored version (see MissingReference);
   * default true. A CREATE passes false: a new set's pods cannot start either way, and a copied
   * value says nothing about them.
   */
  holdMissing?: boolean;
}

/**
 * A reference whose object is gone while the template's pods cannot start without it: the stored
 * version is kept (no rollout into CreateContainerConfigError), and the loop warns.
 */
export interface MissingReference {
  key: string;
  kind: ObjectKind;
  name: string;
  /** the version the template keeps */
  stored: string;
  /** data keys missing from an object that exists; omitted: the object itself is gone */
  keys?: string[];
}

/** A reference whose cached version is older than the stored one: a lagging cache, or a stored value from the future. */
export interface HeldBack {
  key: string;
  kind: ObjectKind;
  name: string;
  stored: string;
  candidate: string;
}

export interface AnnotationPlan {
  desired: DesiredAnnotation[];
  heldBack: HeldBack[];
  /** Required objects that are gone, their stored versions kept (a cache behind the stored version holds them back instead). */
  missing: MissingReference[];
  /** FROZEN_ANNOTATION's entries as they should be, sorted. */
  frozen: string[];
}

export function frozenEntry(kind: ObjectKind, name: string): string {
  return `${kind}/${name}`;
}

function frozenEntries(annotations: Record<string, string> | undefined): Set<string> {
  return new Set((annotations?.[FROZEN_ANNOTATION] ?? '').split(',').map((e) => e.trim()).filter((e) => e !== ''));
}

function ownValue(map: Record<string, string> | undefined, key: string): string | undefined {
  return map && Object.hasOwn(map, key) && typeof map[key] === 'string' ? map[key] : undefined;
}

/**
 * The annotations the workload's pod template should carry, one per tracked reference:
 * `<uid>/<resourceVersion>` of the object, or ABSENT when it does not exist. Never a value older
 * than the stored one (see `replaces`): a candidate refused as older is held back, the stored
 * value kept. An opted-out reference (ignore label, ignore-* annotation) keeps its stored value,
 * frozen, so that opting out restarts nothing; without a stored value it is not tracked. A
 * candidate that the workload's DIGESTS_ANNOTATION knows to hold the stored version's data, in
 * the keys the template reads of it, keeps the stored value: a metadata-only change, or one to
 * keys no pod reads, rolls nothing.
 */
export function planAnnotations(input: PlanInput): AnnotationPlan {
  const dialect = input.dialect ?? ROLLGUARD_DIALECT;
  const ignored = dialect.ignoredNames(input.annotations);
  const wasFrozen = frozenEntries(input.annotations);
  const digests = parseDigestRecords(input.annotations);
  const storedAt = numericResourceVersion(input.storedAt);
  const readsOf = readKeysFor(dialect, input.template);
  const required = input.holdMissing === false ? undefined : dialect.requirements?.(input.template);
  const desired: DesiredAnnotation[] = [];
  const heldBack: HeldBack[] = [];
  const missing: MissingReference[] = [];
  const frozen: string[] = [];
  for (const { kind, name } of dialect.references(input.template)) {
    const key = dialect.annotationKey(kind, name);
    const stored = ownValue(input.stored, key);
    const version = input.lookup(kind, input.namespace, name);
    const entry = frozenEntry(kind, name);
    // a frozen reference whose object is gone stays frozen: no cache can tell it was ignored
    const labelIgnored = version?.ignored === true || (version === undefined && wasFrozen.has(entry));
    if (ignored[kind].has(name) || labelIgnored) {
      const kept = stored ?? dialect.ignoredValue;
      if (kept === undefined) continue;
      // a stored "no version" needs no freezing: a deleted object's value would be the same
      if (labelIgnored && stored !== undefined && !dialect.noVersion(stored)) frozen.push(entry);
      desired.push({ key, kind, name, value: kept });
      continue;
    }
    const candidate = version ? `${version.uid}/${version.resourceVersion}` : dialect.missing;
    if (stored === undefined || stored === candidate) {
      desired.push({ key, kind, name, value: candidate });
      continue;
    }
    const progress = input.cacheProgress ? numericResourceVersion(input.cacheProgress(kind)) ?? 0n : undefined;
    if (version === undefined && holdForMissing(stored, required?.get(entry), progress)) {
      desired.push({ key, kind, name, value: stored });
      missing.push({ key, kind, name, stored });
      continue;
    }
    // a dialect's own "no version" value (Stackable's changes-ignored) is compared as absent
    const asCompared = (value: string): string => (dialect.noVersion(value) ? ABSENT : value);
    if (asCompared(candidate) === asCompared(stored)) {
      desired.push({ key, kind, name, value: stored });
      continue;
    }
    if (replaces(asCompared(candidate), asCompared(stored), { cacheProgress: progress, storedAt })) {
      // the workload's digest record says the candidate holds the stored version's data in the keys read: nothing the pods read changed
      desired.push({ key, kind, name, value: knownEquivalent(digests.get(key), stored, candidate, readsOf(kind, name)) ? stored : candidate });
    } else {
      desired.push({ key, kind, name, value: stored });
      heldBack.push({ key, kind, name, stored: asCompared(stored), candidate });
    }
  }
  return { desired, heldBack, missing, frozen: frozen.sort() };
}

/**
 * Whether a reference whose object is not there keeps `stored` (and is told as missing): the pods
 * require the object, the stored value is a version, and the absence is news: the cache has seen
 * the stored version (`cacheProgress`; undefined: the lookup is authoritative, a fresh read). A
 * cache behind the stored version goes the usual way (held back; a fresh read decides).
 */
export function holdForMissing(stored: string, requirement: Requirement | undefined, cacheProgress: bigint | undefined): boolean {
  if (!requirement?.object) return false;
  const parsed = parseAnnotationValue(stored);
  return parsed.kind === 'version' && (cacheProgress === undefined || cacheProgress >= parsed.resourceVersion);
}

/** planAnnotations for a workload as it is stored: its template holds the stored values. */
export function desiredAnnotations(
  set: { metadata?: V1ObjectMeta; spec?: { template?: V1PodTemplateSpec } },
  lookup: VersionLookup,
  cacheProgress?: (kind: ObjectKind) => string,
  dialect?: Dialect,
): DesiredAnnotation[] {
  return planAnnotations({
    dialect,
    namespace: set.metadata?.namespace ?? '',
    annotations: set.metadata?.annotations,
    template: set.spec?.template,
    stored: set.spec?.template?.metadata?.annotations,
    storedAt: set.metadata?.resourceVersion,
    lookup,
    cacheProgress,
  }).desired;
}

/** The template without rollguard's own annotations: what the owner wrote. */
export function templateBesidesRollguard(template: V1PodTemplateSpec | null | undefined, dialect: Dialect = ROLLGUARD_DIALECT): unknown {
  if (!template) return template;
  const annotations = template.metadata?.annotations;
  if (!annotations) return template;
  const others = Object.fromEntries(Object.entries(annotations).filter(([key]) => !dialect.isOwnAnnotation(key)));
  // a map of rollguard's keys alone is the owner's absent map (`kubectl replace` of the manifest the set was created from)
  if (Object.keys(others).length === 0) {
    const { annotations: _dropped, ...metadata } = template.metadata ?? {};
    return { ...template, metadata };
  }
  return { ...template, metadata: { ...template.metadata, annotations: others } };
}

/** The rollguard annotations of a stored template, as desired annotations: what restoring them writes. */
export function storedAnnotations(stored: Record<string, string> | null | undefined, dialect: Dialect = ROLLGUARD_DIALECT): DesiredAnnotation[] {
  const desired: DesiredAnnotation[] = [];
  for (const [key, value] of Object.entries(stored ?? {})) {
    const target = dialect.annotationTarget(key);
    if (target && typeof value === 'string') desired.push({ key, kind: target.kind, name: target.name ?? key, value });
  }
  return desired;
}

/** The template's annotations with every rollguard annotation replaced by `desired`. */
export function withDesiredAnnotations(
  current: Record<string, string> | undefined,
  desired: DesiredAnnotation[],
  dialect: Dialect = ROLLGUARD_DIALECT,
): Record<string, string> {
  // fromEntries defines own properties, so a key such as "__proto__" stays an ordinary key.
  return Object.fromEntries([
    ...Object.entries(current ?? {}).filter(([key]) => !dialect.isOwnAnnotation(key)),
    ...desired.map(({ key, value }): [string, string] => [key, value]),
  ]);
}

/** The rollguard annotations to add, change or remove; empty when the template is up to date. */
export function annotationChanges(
  current: Record<string, string> | undefined,
  desired: DesiredAnnotation[],
  dialect: Dialect = ROLLGUARD_DIALECT,
): AnnotationChange[] {
  const changes: AnnotationChange[] = [];
  const wanted = new Set<string>();
  for (const { key, kind, name, value } of desired) {
    wanted.add(key);
    const from = current && Object.hasOwn(current, key) ? current[key] : undefined;
    if (from !== value) changes.push({ key, kind, name, from, to: value });
  }
  const stale = Object.keys(current ?? {})
    .filter((key) => dialect.isOwnAnnotation(key) && !wanted.has(key))
    .sort();
  for (const key of stale) {
    changes.push({ key, ...dialect.annotationTarget(key), from: current?.[key] });
  }
  return changes;
}
