import { annotationChanges, type AnnotationChange, type DesiredAnnotation, type Dialect } from './annotations.js';
import { ALL_KEYS, changedKeys, formatDigestRecords, recordCovers, sameDigests, sameKeysSince, type DigestRecord } from './digests.js';
import type { DigestRead } from './digest-reader.js';
import { missingKeys, readKeysChanged, type ReadKeys, type Requirement } from './references.js';
import { parseAnnotationValue } from './versions.js';

/** What one fresh read of a referenced object means for the template value `stored`. */
export type DataVerdict =
  /** The data is the stored version's: keep `stored`, record `record`. */
  | { kind: 'same'; record: DigestRecord }
  /** The data of keys the template reads changed (those keys named, or null when they cannot be): write `value`, record `record`. */
  | { kind: 'changed'; value: string; keys: string[] | null; record: DigestRecord }
  /** Only keys the template reads through volumes the kubelet updates in place changed (`keys`, null when not nameable), and the set re-reads its files: keep `stored`, record `record` (its `inPlaceSince`). */
  | { kind: 'in-place'; value: string; keys: string[] | null; record: DigestRecord }
  /** Only keys the template does not read changed (`keys`): keep `stored`, record `record` (its `sameKeys` the keys read). */
  | { kind: 'unread'; keys: string[]; record: DigestRecord }
  /** Nothing recorded to compare with: the usual bump to `value`, and from now on `record`. */
  | { kind: 'unknown'; value: string; record: DigestRecord }
  /** The read says nothing usable (the object is gone, or older than planned): keep the plan. */
  | { kind: 'none' };

function rv(value: string): bigint | undefined {
  const parsed = parseAnnotationValue(value);
  return parsed.kind === 'version' ? parsed.resourceVersion : undefined;
}

function uidOf(value: string): string | undefined {
  const parsed = parseAnnotationValue(value);
  return parsed.kind === 'version' ? parsed.uid : undefined;
}

/** The record's in-place mark, while it is ahead of `stored` (a restart since read everything fresh). */
function inPlaceMark(record: DigestRecord, stored: string): { inPlaceSince?: string } {
  const since = record.inPlaceSince === undefined ? undefined : rv(record.inPlaceSince);
  const from = rv(stored);
  return since !== undefined && from !== undefined && since > from ? { inPlaceSince: record.inPlaceSince! } : {};
}

/**
 * Whether a change of `keys` (null: not nameable) reaches the pods in place: the set re-reads its
 * files (`restartReads` given: the keys it reads where a running pod never sees a change), none of
 * those keys changed, the object is the same one (a re-created object restarts) and not immutable.
 */
function servedInPlace(keys: readonly string[] | null, restartReads: ReadKeys | undefined, stored: string, read: DigestRead): boolean {
  if (restartReads === undefined || restartReads === 'all' || read.immutable) return false;
  if (uidOf(stored) === undefined || uidOf(stored) !== uidOf(read.version)) return false;
  return keys === null ? restartReads.length === 0 : !keys.some((key) => restartReads.includes(key));
}

/**
 * Compares a fresh read with the workload's record for the template value `stored` (a version
 * bump was planned to `planned`), for a template that reads `reads` of the object. The comparison
 * is under the record's key id, the new record under the current one: a rotated key costs this
 * one read, no rollout. It rolls when a key the template reads changed, or, read whole, any key;
 * a change to other keys only keeps `stored`. Past MAX_NAMED_KEYS the digests are one for all the
 * data and name no key: every change of the data rolls, whatever keys are read.
 */
export function judgeRead(
  stored: string,
  planned: string,
  record: DigestRecord | undefined,
  read: DigestRead,
  currentKeyId: string,
  reads: ReadKeys = 'all',
  restartReads?: ReadKeys,
): DataVerdict {
  const readAt = rv(read.version);
  const plannedAt = rv(planned);
  const current = read.digests.get(currentKeyId);
  if (readAt === undefined || plannedAt === undefined || readAt < plannedAt || !current) return { kind: 'none' };
  const fresh: DigestRecord = { version: read.version, keyId: currentKeyId, digests: current };
  const before = recordCovers(record, stored, reads) ? read.digests.get(record.keyId) : undefined;
  if (!record || !before) return { kind: 'unknown', value: read.version, record: fresh };
  if (sameDigests(before, record.digests)) {
    const newest = rv(record.version)! >= readAt ? record.version : read.version;
    const same = sameKeysSince(record, stored);
    return { kind: 'same', record: { ...fresh, version: newest, ...(same ? { sameKeys: same } : {}), ...inPlaceMark(record, stored) } };
  }
  const changed = changedKeys(record.digests, before);
  const readChanged = changed === undefined ? null : readKeysChanged(changed, reads);
  if (changed !== undefined && readChanged!.length === 0 && reads !== 'all') {
    return { kind: 'unread', keys: changed, record: { ...fresh, sameKeys: [...new Set(reads)].sort(), ...inPlaceMark(record, stored) } };
  }
  if (servedInPlace(readChanged, restartReads, stored, read)) {
    return { kind: 'in-place', value: read.version, keys: readChanged, record: { ...fresh, inPlaceSince: inPlaceMark(record, stored).inPlaceSince ?? read.version } };
  }
  return { kind: 'changed', value: read.version, keys: readChanged, record: fresh };
}

/**
 * A record for the template value `stored` when none covers it, or it was written under a key
 * that is no longer current: from a read that shows the object still at the version the record
 * (or the template) names. undefined: the object moved on, so its change is judged when the
 * cache shows it.
 */
export function baselineRecord(stored: string, record: DigestRecord | undefined, read: DigestRead, currentKeyId: string, reads: ReadKeys = 'all'): DigestRecord | undefined {
  const current = read.digests.get(currentKeyId);
  const readAt = rv(read.version);
  if (!current || readAt === undefined) return undefined;
  if (recordCovers(record, stored, reads)) {
    const same = sameKeysSince(record, stored);
    return readAt <= rv(record.version)! ? { version: record.version, keyId: currentKeyId, digests: current, ...(same ? { sameKeys: same } : {}), ...inPlaceMark(record, stored) } : undefined;
  }
  return read.version === stored ? { version: stored, keyId: currentKeyId, digests: current } : undefined;
}

/** Whether the record needs a read to be right for `stored`: missing, stale, or under an old key. */
export function needsBaseline(stored: string, record: DigestRecord | undefined, currentKeyId: string, reads: ReadKeys = 'all'): boolean {
  if (rv(stored) === undefined) return false;
  return !recordCovers(record, stored, reads) || record.keyId !== currentKeyId;
}

/**
 * Whether a planned bump from `stored` has nothing to be judged against: no record covers the
 * stored version (a set created just before its object changed, the loop never saw it at that
 * version). Then the object as it was at `stored` is read from the API server's history, and
 * its digests are the record (baselineRecord).
 */
export function needsHistory(item: DataCheckItem, step: DataStep): step is Extract<DataStep, { why: 'bump' }> {
  return step.read && step.why === 'bump' && !recordCovers(item.record, step.stored, item.reads);
}

/** One planned reference of a workload, as the data check sees it. */
export interface DataCheckItem {
  /** What the plan would write (its `value`). */
  planned: DesiredAnnotation;
  /** The template's value now; undefined: not tracked yet. */
  stored: string | undefined;
  /** The workload's digest record for the key. */
  record: DigestRecord | undefined;
  /** The keys the template reads of the object; omitted: all of them (a dialect that does not narrow). */
  reads?: ReadKeys;
  /** What the template's pods cannot start without, of the object; omitted: nothing (a dialect that does not say). */
  required?: Requirement;
  /**
   * Given when the set re-reads its mounted files (`rollguard.io/reload: files`): the keys it reads
   * of the object where a running pod never sees a change (env, envFrom, a `subPath` mount).
   */
  restartReads?: ReadKeys;
}

/** Whether the data check reads the item's object, and why. */
export type DataStep =
  | { read: false }
  /** The stored value is the dialect's `<uid>/<content digest>` of the same object: kept while the data has `digest`. */
  | { read: true; why: 'content-digest'; digest: string }
  /** A version bump, decided on the data (judgeRead). */
  | { read: true; why: 'bump'; stored: string }
  /** No record right for the unchanged value: a read makes one (baselineRecord). */
  | { read: true; why: 'baseline' };

/**
 * What the data check does with one item before any read. `cachedAt`: whether the cache shows
 * the object where a read can make a record (asked only for a baseline).
 */
export function dataStep(item: DataCheckItem, dialect: Dialect, currentKeyId: string, cachedAt: () => boolean): DataStep {
  const { planned, stored, record } = item;
  if (stored === undefined || stored === planned.value) {
    const baseline = stored !== undefined && dialect.baselineDigests && needsBaseline(planned.value, record, currentKeyId, item.reads) && cachedAt();
    return baseline ? { read: true, why: 'baseline' } : { read: false };
  }
  const plannedVersion = parseAnnotationValue(planned.value).kind === 'version';
  const contentDigest = dialect.contentDigest?.parse(stored);
  if (contentDigest && plannedVersion && planned.value.startsWith(`${contentDigest.uid}/`)) return { read: true, why: 'content-digest', digest: contentDigest.digest };
  if (plannedVersion && parseAnnotationValue(stored).kind === 'version') return { read: true, why: 'bump', stored };
  return { read: false };
}

/** What the check makes of one item: the value to write, the record to keep, the changed keys, whether it was metadata only. */
export interface DataOutcome {
  value: string;
  record?: DigestRecord;
  /** For the Event of a bump whose data changed; null: changed, keys not nameable. */
  keys?: string[] | null;
  /** A bump held back: the data is the stored version's. */
  metadataOnly?: { from: string; to: string };
  /** A bump held back: the changed keys (null: not nameable) reach the running pods through their mounted files. */
  inPlace?: { from: string; to: string; keys: string[] | null };
  /** A bump held back: only data keys the template does not read changed (`keys`). */
  unread?: { from: string; to: string; keys: string[] };
  /** A bump held back: the new data lacks `keys`, which the pods cannot start without. */
  missingKeys?: { from: string; to: string; keys: string[] };
}

/**
 * The required keys a bump's new data lacks (sorted); empty when none, or when the digests are
 * folded into one and name no key (then the bump rolls: nothing can be told).
 */
export function lackedKeys(item: DataCheckItem, digests: Record<string, string>): string[] {
  if (!item.required || Object.hasOwn(digests, ALL_KEYS)) return [];
  return missingKeys(item.required, Object.keys(digests));
}

/** The item's outcome from its step and the read it called for (undefined: none, or the read failed: the plan stands). */
export function dataOutcome(item: DataCheckItem, step: DataStep, read: DigestRead | undefined, currentKeyId: string): DataOutcome {
  const { planned, stored, record } = item;
  if (!step.read) return { value: planned.value, ...(stored === planned.value && record ? { record } : {}) };
  switch (step.why) {
    case 'content-digest':
      return { value: read?.contentDigest === step.digest && stored !== undefined ? stored : planned.value };
    case 'baseline': {
      const made = read ? baselineRecord(planned.value, record, read, currentKeyId, item.reads) : undefined;
      const kept = made ?? (recordCovers(record, planned.value, item.reads) ? record : undefined);
      return { value: planned.value, ...(kept ? { record: kept } : {}) };
    }
    case 'bump': {
      const verdict = read ? judgeRead(step.stored, planned.value, record, read, currentKeyId, item.reads, item.restartReads) : ({ kind: 'none' } as const);
      switch (verdict.kind) {
        case 'none':
          return { value: planned.value };
        case 'same':
          return { value: step.stored, record: verdict.record, metadataOnly: { from: step.stored, to: verdict.record.version } };
        case 'unread':
          return { value: step.stored, record: verdict.record, unread: { from: step.stored, to: verdict.record.version, keys: verdict.keys } };
        case 'in-place':
        case 'changed':
        case 'unknown': {
          // a bump into data that lacks a key the pods require would roll them into CreateContainerConfigError (or, in place, leave a volume the kubelet cannot update): the stored version and its record stay
          const lacked = lackedKeys(item, verdict.record.digests);
          if (lacked.length > 0) return { value: step.stored, ...(record ? { record } : {}), missingKeys: { from: step.stored, to: verdict.value, keys: lacked } };
          if (verdict.kind === 'in-place') return { value: step.stored, record: verdict.record, inPlace: { from: step.stored, to: verdict.value, keys: verdict.keys } };
          return verdict.kind === 'changed' ? { value: verdict.value, record: verdict.record, keys: verdict.keys } : { value: verdict.value, record: verdict.record };
        }
      }
    }
  }
}

/** A change served in place, in the plan: which reference, and what changed. */
export interface InPlaceChange {
  planned: DesiredAnnotation;
  from: string;
  to: string;
  keys: string[] | null;
}

/** A restart that happens anyway (another reference's change) reads every object fresh: an in-place outcome becomes the bump. */
function bumpedInstead(outcome: DataOutcome): DataOutcome {
  if (!outcome.inPlace || !outcome.record) return outcome;
  const { inPlaceSince: _served, ...record } = outcome.record;
  return { value: outcome.inPlace.to, record, keys: outcome.inPlace.keys };
}

/**
 * The plan after the check: the values to write, the changes they make to the `template`
 * annotations (a data change names its keys), DIGESTS_ANNOTATION as it should be
 * (undefined: `haveDigests` is right already; null: removed), and the changes served in place
 * (none when the plan restarts the set anyway).
 */
export function checkedPlan(
  items: readonly DataCheckItem[],
  checked: readonly DataOutcome[],
  template: Record<string, string>,
  haveDigests: string | null,
  dialect: Dialect,
): { desired: DesiredAnnotation[]; changes: AnnotationChange[]; digests?: string | null; inPlace: InPlaceChange[] } {
  let outcomes = checked;
  const changesOf = (values: readonly DataOutcome[]) => {
    const desired = items.map((item, i) => ({ ...item.planned, value: values[i]!.value }));
    const keysOf = new Map(items.flatMap((item, i) => (values[i]!.keys !== undefined ? [[item.planned.key, values[i]!.keys ?? null] as const] : [])));
    return { desired, changes: annotationChanges(template, desired, dialect).map((c) => (keysOf.has(c.key) ? { ...c, dataKeys: keysOf.get(c.key) } : c)) };
  };
  let { desired, changes } = changesOf(outcomes);
  if (changes.length > 0 && outcomes.some((o) => o.inPlace)) {
    outcomes = outcomes.map(bumpedInstead);
    ({ desired, changes } = changesOf(outcomes));
  }
  const records = new Map(items.flatMap((item, i) => (outcomes[i]!.record ? [[item.planned.key, outcomes[i]!.record!] as const] : [])));
  const want = formatDigestRecords(records) ?? null;
  const inPlace = items.flatMap((item, i) => {
    const served = outcomes[i]!.inPlace;
    return served ? [{ planned: item.planned, ...served }] : [];
  });
  return { desired, changes, digests: want === haveDigests ? undefined : want, inPlace };
}
