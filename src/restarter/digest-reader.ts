import type { RawApi } from '../kube/raw-api.js';
import { isNotFound, isResourceExpired } from '../kube/raw-api.js';
import { dataDigests, type KeyDigests, type ObjectData } from './digests.js';
import type { DigestKeys } from './digest-key.js';
import type { ObjectKind } from './references.js';
import { ABSENT, parseAnnotationValue } from './versions.js';

/** One object's data digests as the API server has it now; the data itself is gone once these are computed. */
export interface DigestRead {
  /** `<uid>/<resourceVersion>` of what was read, or ABSENT. */
  version: string;
  /** Key id → digests, for every key the source held. */
  digests: Map<string, KeyDigests>;
  /** The unkeyed content digest of a dialect that writes one (commons-operator's `<uid>/<digest>`, --compat stackable); absent for ABSENT, and without such a dialect. */
  contentDigest?: string;
  /** The object is `immutable: true`: the kubelet stops watching it, so its mounted files are never updated in place. */
  immutable?: boolean;
}

/** How long a read answers for the same version: a debounce window and a wave of sets sharing the object. */
const READ_REUSE_MS = 60_000;
const MAX_REMEMBERED = 10_000;
/**
 * One object of at most 1.5 MiB: far longer means a dead connection (the GET rides a kept-alive
 * one); the reconcile fails and is retried on a fresh connection.
 */
const DATA_GET_TIMEOUT_MS = 10_000;

const PLURALS: Record<ObjectKind, string> = { ConfigMap: 'configmaps', Secret: 'secrets' };

function objectId(kind: ObjectKind, namespace: string, name: string): string {
  return `${kind}/${namespace}/${name}`;
}

type StoredObject = ObjectData & { metadata?: { uid?: string; resourceVersion?: string }; immutable?: unknown };

interface Remembered {
  /** The version the cache showed when the read was made. */
  seen: string;
  read: Promise<DigestRead>;
  at: number;
}

/**
 * GETs one object and keeps only its digests, remembered by (kind, namespace, name) with the version
 * the cache showed: the sets that share the object, and a burst within the debounce, cost one GET.
 * One read per object: a read for another version replaces it, and `forget` drops it once the
 * object is deleted, so nothing outlives its object.
 */
export class DigestReader {
  private readonly remembered = new Map<string, Remembered>();

  constructor(
    private readonly api: RawApi,
    private readonly keys: () => Promise<DigestKeys>,
    private readonly counted: (kind: ObjectKind) => void = () => undefined,
    private readonly now: () => number = Date.now,
    /** The content digest of a dialect that writes one (Dialect.contentDigest); omitted: none is computed. */
    private readonly contentDigest?: (kind: ObjectKind, object: ObjectData) => string,
  ) {}

  read(kind: ObjectKind, namespace: string, name: string, seen: string): Promise<DigestRead> {
    const id = objectId(kind, namespace, name);
    const now = this.now();
    const hit = this.remembered.get(id);
    if (hit && hit.seen === seen && now - hit.at < READ_REUSE_MS) return hit.read;
    this.forgetOld(now);
    const read = this.fetch(kind, namespace, name);
    // re-inserted, not updated in place: the map stays in the order of `at`
    this.remembered.delete(id);
    const entry: Remembered = { seen, read, at: now };
    this.remembered.set(id, entry);
    read.catch(() => {
      if (this.remembered.get(id) === entry) this.remembered.delete(id);
    });
    return read;
  }

  /** Drops what is remembered of an object that is gone (its cache saw it deleted). */
  forget(kind: ObjectKind, namespace: string, name: string): void {
    this.remembered.delete(objectId(kind, namespace, name));
  }

  /** Objects whose last read is remembered; for /status. */
  size(): number {
    return this.remembered.size;
  }

  /** From the oldest on, up to the first still fresh: a read costs what expired since, not a walk of them all. */
  private forgetOld(now: number): void {
    for (const [id, r] of this.remembered) {
      if (now - r.at < READ_REUSE_MS) break;
      this.remembered.delete(id);
    }
    while (this.remembered.size >= MAX_REMEMBERED) {
      const oldest = this.remembered.keys().next().value;
      if (oldest === undefined) break;
      this.remembered.delete(oldest);
    }
  }

  /**
   * The digests of the object as it was at `version` (`<uid>/<resourceVersion>`), read from the API
   * server's history (a LIST at that exact revision): the baseline of a template value that no
   * record covers, once the object moved on. undefined: that revision is compacted away, or the
   * object was not that version then. Not remembered: it is asked for once per such value.
   */
  async readAt(kind: ObjectKind, namespace: string, name: string, version: string): Promise<DigestRead | undefined> {
    const at = parseAnnotationValue(version);
    if (at.kind !== 'version') return undefined;
    const keys = await this.keys();
    this.counted(kind);
    const query = new URLSearchParams({ fieldSelector: `metadata.name=${name}`, resourceVersion: String(at.resourceVersion), resourceVersionMatch: 'Exact' });
    let list: { items?: StoredObject[] };
    try {
      const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/${PLURALS[kind]}?${query}`;
      list = (await this.api.getJson({ path, accept: 'application/json', timeoutMs: DATA_GET_TIMEOUT_MS })) as typeof list;
    } catch (err) {
      if (isResourceExpired(err)) return undefined;
      throw err;
    }
    const object = list.items?.find((o) => o.metadata?.uid === at.uid && o.metadata?.resourceVersion === String(at.resourceVersion));
    return object ? this.digestsOf(kind, object, keys) : undefined;
  }

  private async fetch(kind: ObjectKind, namespace: string, name: string): Promise<DigestRead> {
    const keys = await this.keys();
    this.counted(kind);
    let object: StoredObject;
    try {
      const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/${PLURALS[kind]}/${encodeURIComponent(name)}`;
      object = (await this.api.getJson({ path, accept: 'application/json', timeoutMs: DATA_GET_TIMEOUT_MS })) as typeof object;
    } catch (err) {
      if (isNotFound(err)) return { version: ABSENT, digests: new Map() };
      throw err;
    }
    return this.digestsOf(kind, object, keys);
  }

  private digestsOf(kind: ObjectKind, object: StoredObject, keys: DigestKeys): DigestRead {
    const digests = new Map<string, KeyDigests>();
    for (const [keyId, key] of keys.keys) digests.set(keyId, dataDigests(kind, object, key));
    const version = `${object.metadata?.uid ?? ''}/${object.metadata?.resourceVersion ?? ''}`;
    return { version, digests, ...(this.contentDigest ? { contentDigest: this.contentDigest(kind, object) } : {}), ...(object.immutable === true ? { immutable: true } : {}) };
  }
}
