import { createHmac } from 'node:crypto';
import type { ObjectKind, ReadKeys } from './references.js';
import { parseAnnotationValue } from './versions.js';

/**
 * Annotation on a workload (outside its pod template, so writing it rolls nothing): for each
 * referenced object, by its template annotation key, the keyed digest of the data the template's
 * named version holds, and the newest version known to hold the same data for the keys the
 * template reads. A change of the object up to that version was metadata only, or changed only
 * keys no pod of the set reads: nothing rolls, and nobody reads the data again.
 * JSON: `{"configmap.rollguard.io/app": {"v": "<uid>/<rv>", "k": "<key id>", "d": {"<data key>": "<digest>"}, "r": ["<data key>"]}}`;
 * `d` holds the data of `v`; `r`, when present, says that `v` holds the template version's data
 * only for those keys (the ones read when a change to other keys was judged).
 */
export const DIGESTS_ANNOTATION = 'rollguard.io/digests';

/** 64 bits of HMAC-SHA256 per data key, in hex: plenty to see a change, short in an annotation. */
const KEY_DIGEST_LENGTH = 16;
/** Beyond this many data keys the digests fold into one (`*`), so the annotation stays small; the Event then names no keys. */
export const MAX_NAMED_KEYS = 64;
export const ALL_KEYS = '*';

/** What pods can read of one object: ConfigMap data and binaryData, Secret data, as bytes. */
export interface ObjectData {
  data?: Record<string, string> | null;
  binaryData?: Record<string, string> | null;
}

/** The digests of one object's data under one key: data key → digest (or ALL_KEYS → one digest). */
export type KeyDigests = Record<string, string>;

export interface DigestRecord {
  /** The newest `<uid>/<resourceVersion>` known to hold this data. */
  version: string;
  keyId: string;
  digests: KeyDigests;
  /**
   * Present when `version`'s data differs from the template version's in keys the template does
   * not read: the keys known to be the same (JSON `r`). Absent: all of the data is the same.
   * It speaks only for a template that reads no other key (`recordCovers`).
   */
  sameKeys?: string[];
  /**
   * Present when the pods of the template's version see `version`'s data through volumes the
   * kubelet updates in place (`rollguard.io/reload: files`): the first version so served (JSON `p`).
   */
  inPlaceSince?: string;
}

export type DigestRecords = Map<string, DigestRecord>;

/**
 * Keyed digests of what pods read of the object. A Secret's data is base64 of the bytes pods see;
 * a ConfigMap's data is text, its binaryData base64. The field is digested with each key, so
 * moving a key between data and binaryData is a change.
 */
export function dataDigests(kind: ObjectKind, object: ObjectData, hmacKey: Buffer): KeyDigests {
  const entries: [string, string, Buffer][] = [];
  for (const [name, value] of Object.entries(object.data ?? {})) {
    if (typeof value !== 'string') continue;
    entries.push(['data', name, kind === 'Secret' ? Buffer.from(value, 'base64') : Buffer.from(value, 'utf8')]);
  }
  for (const [name, value] of Object.entries(object.binaryData ?? {})) {
    if (typeof value === 'string' && kind === 'ConfigMap') entries.push(['binaryData', name, Buffer.from(value, 'base64')]);
  }
  entries.sort((a, b) => (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : a[0] < b[0] ? -1 : 1));
  const digestOf = (parts: [string, string, Buffer][]): string => {
    const hmac = createHmac('sha256', hmacKey);
    for (const [field, name, bytes] of parts) {
      // lengths first: no two different entry lists feed the same bytes
      hmac.update(`${field.length}:${field}${Buffer.byteLength(name)}:${name}${bytes.length}:`);
      hmac.update(bytes);
    }
    return hmac.digest('hex').slice(0, KEY_DIGEST_LENGTH);
  };
  if (entries.length > MAX_NAMED_KEYS) return { [ALL_KEYS]: digestOf(entries) };
  return Object.fromEntries(entries.map((entry) => [entry[1], digestOf([entry])]));
}

export function sameDigests(a: KeyDigests, b: KeyDigests): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

/** The data keys added, removed or changed, sorted; undefined when one side is folded (ALL_KEYS) and the keys cannot be named. */
export function changedKeys(before: KeyDigests, after: KeyDigests): string[] | undefined {
  if (Object.hasOwn(before, ALL_KEYS) || Object.hasOwn(after, ALL_KEYS)) return undefined;
  const names = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...names].filter((k) => before[k] !== after[k]).sort();
}

function isStringRecord(value: unknown): value is Record<string, string> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.values(value).every((v) => typeof v === 'string');
}

/** The records of DIGESTS_ANNOTATION; an unreadable annotation or entry counts as none (the data is then read again). */
export function parseDigestRecords(annotations: Record<string, string> | null | undefined): DigestRecords {
  const records: DigestRecords = new Map();
  const raw = annotations && Object.hasOwn(annotations, DIGESTS_ANNOTATION) ? annotations[DIGESTS_ANNOTATION] : undefined;
  if (typeof raw !== 'string') return records;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return records;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return records;
  for (const [key, entry] of Object.entries(parsed as Record<string, unknown>)) {
    if (typeof entry !== 'object' || entry === null) continue;
    const { v, k, d, r, p } = entry as { v?: unknown; k?: unknown; d?: unknown; r?: unknown; p?: unknown };
    if (typeof v !== 'string' || typeof k !== 'string' || !isStringRecord(d)) continue;
    // an unreadable `r` is a record that speaks for no read key: the next change rolls
    const sameKeys = r === undefined ? undefined : Array.isArray(r) ? r.filter((x): x is string => typeof x === 'string') : [];
    records.set(key, { version: v, keyId: k, digests: d, ...(sameKeys ? { sameKeys } : {}), ...(typeof p === 'string' ? { inPlaceSince: p } : {}) });
  }
  return records;
}

/** DIGESTS_ANNOTATION's value for `records`, keys sorted so that every replica writes the same text; undefined when empty. */
export function formatDigestRecords(records: DigestRecords): string | undefined {
  if (records.size === 0) return undefined;
  const keys = [...records.keys()].sort();
  const out: Record<string, { v: string; k: string; d: KeyDigests; r?: string[]; p?: string }> = {};
  for (const key of keys) {
    const r = records.get(key)!;
    const d = Object.fromEntries(Object.keys(r.digests).sort().map((n) => [n, r.digests[n]!]));
    out[key] = { v: r.version, k: r.keyId, d, ...(r.sameKeys ? { r: [...new Set(r.sameKeys)].sort() } : {}), ...(r.inPlaceSince ? { p: r.inPlaceSince } : {}) };
  }
  return JSON.stringify(out);
}

function rvOf(value: string): bigint | undefined {
  const parsed = parseAnnotationValue(value);
  return parsed.kind === 'version' ? parsed.resourceVersion : undefined;
}

/**
 * The keys the record knows to hold the data of the template's value `stored`, when that is not
 * all of them: its `sameKeys`, while it is ahead of `stored` (at `stored` itself its digests are
 * that version's data, every key).
 */
export function sameKeysSince(record: DigestRecord, stored: string): string[] | undefined {
  if (!record.sameKeys) return undefined;
  const at = rvOf(record.version);
  const from = rvOf(stored);
  return at !== undefined && from !== undefined && at > from ? record.sameKeys : undefined;
}

/**
 * Whether the record speaks for the template's value `stored`, for a template that reads `reads`
 * of the object: it was written for that version, or a later one with the same data in every key
 * read (`sameKeys` holds them all). A record older than the template value is stale (an owner's
 * change or an admission bump moved the value past it); one whose same keys are fewer than the
 * template reads now (its reads grew, past the webhook) speaks for nothing, and the next change rolls.
 */
export function recordCovers(record: DigestRecord | undefined, stored: string, reads: ReadKeys = 'all'): record is DigestRecord {
  if (!record) return false;
  const at = rvOf(record.version);
  const from = rvOf(stored);
  if (at === undefined || from === undefined || at < from) return false;
  const same = sameKeysSince(record, stored);
  return same === undefined || (reads !== 'all' && reads.every((key) => same.includes(key)));
}

/** Whether `candidate` is known, from the record alone, to hold the data of `stored` in the keys read (`reads`): no bump, no read. */
export function knownEquivalent(record: DigestRecord | undefined, stored: string, candidate: string, reads: ReadKeys = 'all'): boolean {
  if (!recordCovers(record, stored, reads)) return false;
  const to = rvOf(candidate);
  const at = rvOf(record.version);
  return to !== undefined && at !== undefined && to <= at;
}
