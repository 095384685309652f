import { randomBytes } from 'node:crypto';
import type { V1Secret } from '@kubernetes/client-node';
import { coreV1, type CoreV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import { statusCode } from '../kube/api-status.js';

/** rollguard's own Secret, in its namespace, holding the HMAC keys of the data digests: key id → key. */
export const DIGEST_KEY_SECRET = 'rollguard-digest-key';
const KEY_BYTES = 32;
/** A key added to the Secret (a rotation) is used from this long after, at most. */
const RELOAD_AFTER_MS = 60_000;

export interface DigestKeys {
  /** The id digests are written under: the greatest id in the Secret. */
  currentId: string;
  keys: Map<string, Buffer>;
}

/** The Secret's keys; undefined when it holds none. Ids sort as text, so a rotation adds a greater one (a timestamp). */
export function digestKeysOf(secret: V1Secret): DigestKeys | undefined {
  const keys = new Map<string, Buffer>();
  for (const [id, value] of Object.entries(secret.data ?? {})) {
    const key = Buffer.from(value, 'base64');
    if (key.length >= 16) keys.set(id, key);
  }
  const ids = [...keys.keys()].sort();
  const currentId = ids[ids.length - 1];
  return currentId === undefined ? undefined : { currentId, keys };
}

/** A key id for a new key: the time, so that a later rotation sorts after it. */
export function newKeyId(now: Date): string {
  return `k${now.toISOString().replace(/[-:.TZ]/g, '').slice(0, 14)}`;
}

/**
 * Reads the keys from DIGEST_KEY_SECRET, creating the Secret with one random key when it is
 * missing. Two replicas racing to create it agree: one create wins (409 for the other), and both
 * read back the one stored.
 */
export class DigestKeySource {
  private loaded?: { keys: DigestKeys; at: number };
  private pending?: Promise<DigestKeys>;
  private readonly core: CoreV1;

  constructor(
    kubeConfig: KubeAccess,
    private readonly namespace: string,
    private readonly now: () => number = Date.now,
  ) {
    this.core = coreV1(kubeConfig);
  }

  async keys(): Promise<DigestKeys> {
    if (this.loaded && this.now() - this.loaded.at < RELOAD_AFTER_MS) return this.loaded.keys;
    this.pending ??= this.load().finally(() => (this.pending = undefined));
    return this.pending;
  }

  private async load(): Promise<DigestKeys> {
    const keys = (await this.read()) ?? (await this.create());
    this.loaded = { keys, at: this.now() };
    return keys;
  }

  private async read(): Promise<DigestKeys | undefined> {
    try {
      const secret = await this.core.readNamespacedSecret({ name: DIGEST_KEY_SECRET, namespace: this.namespace });
      const keys = digestKeysOf(secret);
      if (!keys) throw new Error(`Secret ${this.namespace}/${DIGEST_KEY_SECRET} holds no key of at least 16 bytes`);
      return keys;
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
  }

  private async create(): Promise<DigestKeys> {
    const id = newKeyId(new Date(this.now()));
    try {
      await this.core.createNamespacedSecret({
        namespace: this.namespace,
        body: {
          metadata: { name: DIGEST_KEY_SECRET, labels: { 'app.kubernetes.io/managed-by': 'rollguard' } },
          type: 'Opaque',
          data: { [id]: randomBytes(KEY_BYTES).toString('base64') },
        },
      });
    } catch (err) {
      if (statusCode(err) !== 409) throw new Error(`creating Secret ${this.namespace}/${DIGEST_KEY_SECRET}: ${String(err)}`, { cause: err });
    }
    const keys = await this.read();
    if (!keys) throw new Error(`Secret ${this.namespace}/${DIGEST_KEY_SECRET} vanished right after its creation`);
    return keys;
  }
}
