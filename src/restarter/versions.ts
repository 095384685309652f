/** Value for a referenced object that does not exist. */
export const ABSENT = 'absent';

/** An annotation value read back: `<uid>/<resourceVersion>`, `absent`, or something else (a person's, a bug's). */
export type ParsedValue = { kind: 'version'; uid: string; resourceVersion: bigint } | { kind: 'absent' } | { kind: 'unreadable' };

export function parseAnnotationValue(value: string): ParsedValue {
  if (value === ABSENT) return { kind: 'absent' };
  const slash = value.indexOf('/');
  const rv = slash < 0 ? '' : value.slice(slash + 1);
  if (slash <= 0 || !/^\d{1,30}$/.test(rv)) return { kind: 'unreadable' };
  return { kind: 'version', uid: value.slice(0, slash), resourceVersion: BigInt(rv) };
}

export function numericResourceVersion(rv: string | undefined): bigint | undefined {
  return rv !== undefined && /^\d{1,30}$/.test(rv) ? BigInt(rv) : undefined;
}

/** What a writer knows besides the two values, to tell a newer truth from a lagging cache. */
export interface VersionContext {
  /**
   * How far the cache the candidate comes from has seen (its list's or last event's
   * resourceVersion); undefined: the candidate is authoritative (a fresh read, or no cache).
   */
  cacheProgress?: bigint;
  /** The resourceVersion of the object that stores the value (the workload); undefined: unknown. */
  storedAt?: bigint;
}

/**
 * Whether `candidate` may replace `stored` without moving backwards. resourceVersions are etcd
 * revisions, comparable across objects (Kubernetes 1.35, KEP-5504): a recreated object's is
 * larger than its predecessor's.
 * - both versions: only a larger resourceVersion replaces, whatever the uids;
 * - a version becomes absent only once the cache has seen that version (then its absence is news);
 * - absent becomes a version when the version is newer than the workload's last write (the
 *   object was created after absent was written); an older one may be a lagging cache's memory of
 *   a deleted object, so only a fresh read decides (the loop makes it; the webhook keeps absent);
 * - an unreadable stored value is always replaced.
 */
export function replaces(candidate: string, stored: string, context: VersionContext = {}): boolean {
  if (candidate === stored) return false;
  const next = parseAnnotationValue(candidate);
  const now = parseAnnotationValue(stored);
  if (now.kind === 'unreadable') return true;
  if (next.kind === 'unreadable') return false;
  const { cacheProgress, storedAt } = context;
  if (next.kind === 'version' && now.kind === 'version') return next.resourceVersion > now.resourceVersion;
  if (next.kind === 'absent' && now.kind === 'version') return cacheProgress === undefined || cacheProgress >= now.resourceVersion;
  if (next.kind === 'version') return storedAt === undefined || cacheProgress === undefined || next.resourceVersion > storedAt;
  return false;
}
