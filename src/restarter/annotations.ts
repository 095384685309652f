import { createHash } from 'node:crypto';
import type { V1ObjectMeta, V1PodTemplateSpec } from '@kubernetes/client-node';
import { referencedObjects, type ObjectKind } from './references.js';

/** Label on a StatefulSet that opts it in; value "true". */
export const ENABLED_LABEL = 'rollguard.io/enabled';
/** Label on a ConfigMap or Secret that keeps it from ever being tracked; value "true". */
export const IGNORE_LABEL = 'rollguard.io/ignore';
/** Annotations on a StatefulSet: comma-separated names that it does not track. */
export const IGNORE_CONFIGMAPS_ANNOTATION = 'rollguard.io/ignore-configmaps';
export const IGNORE_SECRETS_ANNOTATION = 'rollguard.io/ignore-secrets';

export const ANNOTATION_PREFIX: Record<ObjectKind, string> = {
  ConfigMap: 'configmap.rollguard.io/',
  Secret: 'secret.rollguard.io/',
};

/** Value for a referenced object that does not exist. */
export const ABSENT = 'absent';

export interface ObjectVersion {
  uid: string;
  resourceVersion: string;
  /** The object carries IGNORE_LABEL "true". */
  ignored: boolean;
}

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
}

/** The name part of an annotation key: a qualified-name segment, as the API server validates it. */
export const ANNOTATION_SEGMENT = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const SEGMENT_MAX_LENGTH = 63;
/** 128 bits of sha256, in hex. */
const HASH_LENGTH = 32;
const NAME_PREFIX_LENGTH = SEGMENT_MAX_LENGTH - 1 - HASH_LENGTH;
// Object names (DNS-1123 subdomains) never contain "_", so a key with this tail cannot be a real name's key.
const SHORTENED_SEGMENT = new RegExp(`_[0-9a-f]{${HASH_LENGTH}}$`);

function keySegment(name: string): string {
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

function ignoredNames(annotations: Record<string, string> | undefined, key: string): Set<string> {
  const names = new Set<string>();
  for (const part of annotations?.[key]?.split(',') ?? []) {
    const name = part.trim();
    if (name) names.add(name);
  }
  return names;
}

/**
 * The annotations the set's pod template should carry: one per tracked reference,
 * `<uid>/<resourceVersion>` of the object or ABSENT when it does not exist.
 */
export function desiredAnnotations(
  set: { metadata?: V1ObjectMeta; spec?: { template?: V1PodTemplateSpec } },
  lookup: VersionLookup,
): DesiredAnnotation[] {
  const namespace = set.metadata?.namespace ?? '';
  const annotations = set.metadata?.annotations;
  const ignored: Record<ObjectKind, Set<string>> = {
    ConfigMap: ignoredNames(annotations, IGNORE_CONFIGMAPS_ANNOTATION),
    Secret: ignoredNames(annotations, IGNORE_SECRETS_ANNOTATION),
  };

  const current = set.spec?.template?.metadata?.annotations ?? {};
  const desired: DesiredAnnotation[] = [];
  for (const { kind, name } of referencedObjects(set.spec?.template)) {
    if (ignored[kind].has(name)) continue;
    const version = lookup(kind, namespace, name);
    if (version?.ignored) continue;
    const key = annotationKey(kind, name);
    const value = version ? `${version.uid}/${version.resourceVersion}` : ABSENT;
    desired.push({ key, kind, name, value: newerOf(value, current[key]) });
  }
  return desired;
}

/**
 * A replica whose cache lags behind another's must not move an annotation back to an older
 * version of the same object: that would roll the set twice (back, then forward again).
 * resourceVersions of one object are etcd revisions, so a larger one is newer.
 */
function newerOf(cached: string, current: string | undefined): string {
  if (current === undefined || cached === ABSENT) return cached;
  const [uid, rv] = cached.split('/');
  const [curUid, curRv] = current.split('/');
  if (uid !== curUid || !rv || !curRv || !/^\d+$/.test(rv) || !/^\d+$/.test(curRv)) return cached;
  return BigInt(curRv) > BigInt(rv) ? current : cached;
}

/** The template's annotations with every rollguard annotation replaced by `desired`. */
export function withDesiredAnnotations(
  current: Record<string, string> | undefined,
  desired: DesiredAnnotation[],
): Record<string, string> {
  // fromEntries defines own properties, so a key such as "__proto__" stays an ordinary key.
  return Object.fromEntries([
    ...Object.entries(current ?? {}).filter(([key]) => !isRollguardAnnotation(key)),
    ...desired.map(({ key, value }): [string, string] => [key, value]),
  ]);
}

/** The rollguard annotations to add, change or remove; empty when the template is up to date. */
export function annotationChanges(
  current: Record<string, string> | undefined,
  desired: DesiredAnnotation[],
): AnnotationChange[] {
  const changes: AnnotationChange[] = [];
  const wanted = new Set<string>();
  for (const { key, kind, name, value } of desired) {
    wanted.add(key);
    const from = current && Object.hasOwn(current, key) ? current[key] : undefined;
    if (from !== value) changes.push({ key, kind, name, from, to: value });
  }
  const stale = Object.keys(current ?? {})
    .filter((key) => isRollguardAnnotation(key) && !wanted.has(key))
    .sort();
  for (const key of stale) {
    changes.push({ key, ...annotationTarget(key), from: current?.[key] });
  }
  return changes;
}
