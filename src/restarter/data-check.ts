import { changedKeys, recordCovers, sameDigests, type DigestRecord } from './digests.js';
import type { DigestRead } from './digest-reader.js';
import { parseAnnotationValue } from './versions.js';

/** What one fresh read of a referenced object means for the template value `stored`. */
export type DataVerdict =
  /** The data is the stored version's: keep `stored`, record `record`. */
  | { kind: 'same'; record: DigestRecord }
  /** The data changed (keys named, or null when they cannot be): write `value`, record `record`. */
  | { kind: 'changed'; value: string; keys: string[] | null; record: DigestRecord }
  /** Nothing recorded to compare with: the usual bump to `value`, and from now on `record`. */
  | { kind: 'unknown'; value: string; record: DigestRecord }
  /** The read says nothing usable (the object is gone, or older than planned): keep the plan. */
  | { kind: 'none' };

function rv(value: string): bigint | undefined {
  const parsed = parseAnnotationValue(value);
  return parsed.kind === 'version' ? parsed.resourceVersion : undefined;
}

/**
 * Compares a fresh read with the workload's record for the template value `stored` (a version
 * bump was planned to `planned`). The comparison is under the record's key id, the new record
 * under the current one: a rotated key costs this one read, no rollout.
 */
export function judgeRead(stored: string, planned: string, record: DigestRecord | undefined, read: DigestRead, currentKeyId: string): DataVerdict {
  const readAt = rv(read.version);
  const plannedAt = rv(planned);
  const current = read.digests.get(currentKeyId);
  if (readAt === undefined || plannedAt === undefined || readAt < plannedAt || !current) return { kind: 'none' };
  const fresh: DigestRecord = { version: read.version, keyId: currentKeyId, digests: current };
  const before = recordCovers(record, stored) ? read.digests.get(record.keyId) : undefined;
  if (!record || !before) return { kind: 'unknown', value: read.version, record: fresh };
  if (sameDigests(before, record.digests)) {
    const newest = rv(record.version)! >= readAt ? record.version : read.version;
    return { kind: 'same', record: { ...fresh, version: newest } };
  }
  return { kind: 'changed', value: read.version, keys: changedKeys(record.digests, before) ?? null, record: fresh };
}

/**
 * A record for the template value `stored` when none covers it, or it was written under a key
 * that is no longer current: from a read that shows the object still at the version the record
 * (or the template) names. undefined: the object moved on, so its change is judged when the
 * cache shows it.
 */
export function baselineRecord(stored: string, record: DigestRecord | undefined, read: DigestRead, currentKeyId: string): DigestRecord | undefined {
  const current = read.digests.get(currentKeyId);
  const readAt = rv(read.version);
  if (!current || readAt === undefined) return undefined;
  if (recordCovers(record, stored)) {
    return readAt <= rv(record.version)! ? { version: record.version, keyId: currentKeyId, digests: current } : undefined;
  }
  return read.version === stored ? { version: stored, keyId: currentKeyId, digests: current } : undefined;
}

/** Whether the record needs a read to be right for `stored`: missing, stale, or under an old key. */
export function needsBaseline(stored: string, record: DigestRecord | undefined, currentKeyId: string): boolean {
  if (rv(stored) === undefined) return false;
  return !recordCovers(record, stored) || record.keyId !== currentKeyId;
}
