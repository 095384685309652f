import { ABSENT, ROLLGUARD_DIALECT, dialectOf, keySegment, type Dialect } from '../restarter/annotations.js';
import { referencedObjects, type ObjectKind } from '../restarter/references.js';
import { stackableContentDigest } from './content-digest.js';

/**
 * The annotation language of Stackable's commons-operator restarter, spoken by rollguard under
 * `--compat stackable` so that a set it annotated needs no write, and a switch back neither.
 */

/** Label on a StatefulSet that opts it in; value "true". */
export const STACKABLE_ENABLED_LABEL = 'restarter.stackable.tech/enabled';
/** Label on a ConfigMap or Secret that keeps it from being tracked; value "true". */
export const STACKABLE_IGNORE_LABEL = 'restarter.stackable.tech/ignore';
/** Annotations on a StatefulSet, `<prefix><anything>: <object name>`, that opt one object out each. */
export const STACKABLE_IGNORE_CONFIGMAP_PREFIX = 'restarter.stackable.tech/ignore-configmap.';
export const STACKABLE_IGNORE_SECRET_PREFIX = 'restarter.stackable.tech/ignore-secret.';
/** The value for a reference commons-operator does not follow: missing, labelled ignore, or opted out. */
export const CHANGES_IGNORED = 'changes-ignored';
/** commons-operator's field manager, for reading managedFields after a migration. */
export const STACKABLE_FIELD_MANAGER = 'restarter.stackable.tech/statefulset';

export const STACKABLE_ANNOTATION_PREFIX: Record<ObjectKind, string> = {
  ConfigMap: 'configmap.restarter.stackable.tech/',
  Secret: 'secret.restarter.stackable.tech/',
};

/** The compatibility modes of `--compat`. */
export const COMPAT_MODES = ['', 'stackable'] as const;
export type CompatMode = (typeof COMPAT_MODES)[number];

/**
 * The key is the raw name, as commons-operator writes it. A name that is no valid key segment
 * (over 63 characters) made commons-operator's whole write fail, so no set carries such a key:
 * rollguard shortens it as in its own dialect instead of failing the same way.
 */
export function stackableAnnotationKey(kind: ObjectKind, name: string): string {
  return STACKABLE_ANNOTATION_PREFIX[kind] + keySegment(name);
}

// as in rollguard's dialect: "_" never occurs in an object name, so this tail marks a shortened key
const SHORTENED_SEGMENT = /_[0-9a-f]{32}$/;

/** The object a key stands for; the name only when the key holds it whole. */
export function stackableAnnotationTarget(key: string): { kind: ObjectKind; name?: string } | undefined {
  for (const kind of ['ConfigMap', 'Secret'] as const) {
    const prefix = STACKABLE_ANNOTATION_PREFIX[kind];
    if (key.length <= prefix.length || !key.startsWith(prefix)) continue;
    const segment = key.slice(prefix.length);
    return SHORTENED_SEGMENT.test(segment) ? { kind } : { kind, name: segment };
  }
  return undefined;
}

/** The names a StatefulSet's `ignore-configmap.*` / `ignore-secret.*` annotations opt out (the values are the names). */
export function stackableIgnoredNames(annotations: Record<string, string> | undefined): Record<ObjectKind, Set<string>> {
  const ignored: Record<ObjectKind, Set<string>> = { ConfigMap: new Set(), Secret: new Set() };
  for (const [key, value] of Object.entries(annotations ?? {})) {
    if (typeof value !== 'string') continue;
    if (key.startsWith(STACKABLE_IGNORE_CONFIGMAP_PREFIX)) ignored.ConfigMap.add(value.trim());
    else if (key.startsWith(STACKABLE_IGNORE_SECRET_PREFIX)) ignored.Secret.add(value.trim());
  }
  return ignored;
}

const DIGEST_VALUE = /^[^/]+\/[0-9a-f]{32}$/;

/**
 * The parts of the form newer commons-operator builds write, `<uid>/<128 bits of SHA-256 of the
 * data, in hex>`; undefined for any other value. The loop keeps such a value while one read of the
 * object gives the same digest (`content-digest.ts`), so taking such a set over rolls nothing.
 */
export function contentDigestValue(value: string): { uid: string; digest: string } | undefined {
  if (!DIGEST_VALUE.test(value)) return undefined;
  const slash = value.indexOf('/');
  return { uid: value.slice(0, slash), digest: value.slice(slash + 1) };
}

export function isContentDigestValue(value: string): boolean {
  return contentDigestValue(value) !== undefined;
}

export const STACKABLE_DIALECT: Dialect = {
  name: 'stackable',
  enabledLabel: STACKABLE_ENABLED_LABEL,
  ignoreLabel: STACKABLE_IGNORE_LABEL,
  // commons-operator restarts StatefulSets only; another kind with its label speaks rollguard's dialect, or none
  kinds: ['StatefulSet'],
  annotationKey: stackableAnnotationKey,
  isOwnAnnotation: (key) => stackableAnnotationTarget(key) !== undefined,
  annotationTarget: stackableAnnotationTarget,
  references: (template) => referencedObjects(template, { projected: false }),
  ignoredNames: stackableIgnoredNames,
  missing: CHANGES_IGNORED,
  ignoredValue: CHANGES_IGNORED,
  noVersion: (value) => value === CHANGES_IGNORED || value === ABSENT,
  // commons-operator's sets are taken over with no write at all; the first change of an object records its digest
  baselineDigests: false,
  contentDigest: { parse: contentDigestValue, of: stackableContentDigest },
};

/** The dialects `--compat` adds to rollguard's; they win over it on a set that carries both labels. */
export function compatDialects(compat: CompatMode): Dialect[] {
  return compat === 'stackable' ? [STACKABLE_DIALECT] : [];
}

/**
 * The dialect a workload is restarted in, from its labels; undefined: not opted in. Under
 * `--compat stackable` a set with Stackable's label speaks Stackable's dialect, also when it
 * carries rollguard's label too: a switch back to commons-operator then restarts nothing.
 */
export function dialectFor(labels: Record<string, string> | null | undefined, compat: CompatMode): Dialect | undefined {
  return dialectOf([...compatDialects(compat), ROLLGUARD_DIALECT], labels);
}

/** The labels that opt a workload in, one label-filtered watch and one webhook entry each. */
export function enabledLabels(compat: CompatMode): string[] {
  return [ROLLGUARD_DIALECT, ...compatDialects(compat)].map((d) => d.enabledLabel);
}
