import { createHash } from 'node:crypto';
import type { ObjectKind } from '../restarter/references.js';

/**
 * The content digest newer commons-operator builds write as `<uid>/<digest>`: SHA-256 over what
 * pods can read (Secret data and ConfigMap binaryData base64, ConfigMap data text; keys in
 * code-unit order, each key and value length-prefixed), 128 bits in hex. Known-answer tested.
 */
function lengthPrefixed(hash: ReturnType<typeof createHash>, key: string, value: Buffer): void {
  const header = Buffer.alloc(8);
  header.writeBigUInt64BE(BigInt(Buffer.byteLength(key)));
  hash.update(header).update(key);
  header.writeBigUInt64BE(BigInt(value.length));
  hash.update(header).update(value);
}

export function stackableContentDigest(
  kind: ObjectKind,
  object: { data?: Record<string, string> | null; binaryData?: Record<string, string> | null },
): string {
  const hash = createHash('sha256');
  const sorted = (map: Record<string, string> | null | undefined): [string, string][] =>
    Object.entries(map ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (kind === 'Secret') {
    hash.update('secret/data');
    for (const [key, value] of sorted(object.data)) lengthPrefixed(hash, key, Buffer.from(value, 'base64'));
  } else {
    hash.update('configmap/data');
    for (const [key, value] of sorted(object.data)) lengthPrefixed(hash, key, Buffer.from(value, 'utf8'));
    hash.update('configmap/binaryData');
    for (const [key, value] of sorted(object.binaryData)) lengthPrefixed(hash, key, Buffer.from(value, 'base64'));
  }
  return hash.digest('hex').slice(0, 32);
}

