import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ApiStatusError, type RawApi } from '../../src/kube/raw-api.js';
import { STACKABLE_DIALECT } from '../../src/compat/stackable.js';
import { DigestReader } from '../../src/restarter/digest-reader.js';

const KEYS = async () => ({ currentId: 'k1', keys: new Map([['k1', Buffer.alloc(32, 1)]]) });

function fakeApi(answer: () => unknown): { api: RawApi; paths: string[] } {
  const paths: string[] = [];
  const api = {
    getJson: async ({ path }: { path: string }) => {
      paths.push(path);
      return answer();
    },
  } as unknown as RawApi;
  return { api, paths };
}

describe('DigestReader', () => {
  it('one GET per object and version, however many sets ask at once or within the window; again after it', async () => {
    let clock = 0;
    const { api, paths } = fakeApi(() => ({ metadata: { uid: 'u', resourceVersion: '9' }, data: { password: Buffer.from('s3cr3t').toString('base64') } }));
    const counted: string[] = [];
    const reader = new DigestReader(api, KEYS, (kind) => counted.push(kind), () => clock);
    const reads = await Promise.all(Array.from({ length: 50 }, () => reader.read('Secret', 'ns', 'creds', 'u/9')));
    await reader.read('Secret', 'ns', 'creds', 'u/9');
    expect(paths).toEqual(['/api/v1/namespaces/ns/secrets/creds']);
    expect(counted).toEqual(['Secret']);
    expect(reads[0]!.version).toBe('u/9');
    // only digests are kept: nothing of the value
    expect(JSON.stringify([...reads[0]!.digests])).not.toMatch(/s3cr3t|czNjcjN0/);
    clock = 60_000;
    await reader.read('Secret', 'ns', 'creds', 'u/9');
    expect(paths).toHaveLength(2);
  });

  it('computes a content digest only for a dialect that writes one (--compat stackable)', async () => {
    const object = { metadata: { uid: 'u', resourceVersion: '9' }, data: { foo: 'bar' } };
    const plain = await new DigestReader(fakeApi(() => object).api, KEYS).read('ConfigMap', 'ns', 'app', 'u/9');
    expect(plain).not.toHaveProperty('contentDigest');
    const stackable = await new DigestReader(fakeApi(() => object).api, KEYS, undefined, undefined, STACKABLE_DIALECT.contentDigest?.of).read('ConfigMap', 'ns', 'app', 'u/9');
    // the known answer of commons-operator's digest for {foo: bar} (stackable.test.ts)
    expect(stackable.contentDigest).toBe('401bdc692ecd7b9bb6b02f186e2976c3');
  });

  it('a missing object reads as absent; a failed read is not remembered', async () => {
    let fail = true;
    const { api, paths } = fakeApi(() => {
      throw fail ? new Error('connection reset') : new ApiStatusError('GET', '/x', 404, 'NotFound', '');
    });
    const reader = new DigestReader(api, KEYS);
    await expect(reader.read('ConfigMap', 'ns', 'c', 'u/1')).rejects.toThrow('connection reset');
    fail = false;
    await expect(reader.read('ConfigMap', 'ns', 'c', 'u/1')).resolves.toEqual({ version: 'absent', digests: new Map() });
    expect(paths).toHaveLength(2);
  });

  it('forgets reads by age: an older one expired, a younger one still answers, a renewed one counts from its renewal', async () => {
    let clock = 0;
    const { api, paths } = fakeApi(() => ({ metadata: { uid: 'u', resourceVersion: '1' }, data: {} }));
    const reader = new DigestReader(api, KEYS, () => undefined, () => clock);
    await reader.read('ConfigMap', 'ns', 'a', 'u/1');
    clock = 30_000;
    await reader.read('ConfigMap', 'ns', 'b', 'u/1');
    clock = 61_000;
    await reader.read('ConfigMap', 'ns', 'a', 'u/1'); // a expired: read again, now the youngest
    await reader.read('ConfigMap', 'ns', 'b', 'u/1'); // b is 31 s old: remembered
    expect(paths).toEqual(['/api/v1/namespaces/ns/configmaps/a', '/api/v1/namespaces/ns/configmaps/b', '/api/v1/namespaces/ns/configmaps/a']);
    clock = 95_000;
    await reader.read('ConfigMap', 'ns', 'c', 'u/1'); // b expires here, a (read at 61 s) does not
    await reader.read('ConfigMap', 'ns', 'a', 'u/1');
    await reader.read('ConfigMap', 'ns', 'b', 'u/1');
    expect(paths.slice(3)).toEqual(['/api/v1/namespaces/ns/configmaps/c', '/api/v1/namespaces/ns/configmaps/b']);
  });

  it('keeps one read per object: a new version replaces it, a deleted object is forgotten at once', async () => {
    const { api, paths } = fakeApi(() => ({ metadata: { uid: 'u', resourceVersion: '1' }, data: {} }));
    const reader = new DigestReader(api, KEYS, () => undefined, () => 0);
    await reader.read('ConfigMap', 'ns', 'a', 'u/1');
    await reader.read('ConfigMap', 'ns', 'a', 'u/2');
    await reader.read('Secret', 'ns', 'a', 'u/1');
    expect(reader.size()).toBe(2);
    reader.forget('ConfigMap', 'ns', 'a');
    expect(reader.size()).toBe(1);
    // forgotten: the next read of it GETs again, even within the window
    await reader.read('ConfigMap', 'ns', 'a', 'u/2');
    expect(paths.filter((p) => p.endsWith('/configmaps/a'))).toHaveLength(3);
  });

  it('whatever reads and deletions come, it holds at most one read per object still there, and none once all are gone', async () => {
    const names = ['a', 'b', 'c', 'd'];
    const op = fc.oneof(
      fc.record({ read: fc.constantFrom(...names), version: fc.integer({ min: 1, max: 3 }), advance: fc.integer({ min: 0, max: 40_000 }) }),
      fc.record({ forget: fc.constantFrom(...names) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 40 }), async (ops) => {
        let clock = 0;
        const reader = new DigestReader(fakeApi(() => ({ metadata: { uid: 'u', resourceVersion: '1' }, data: {} })).api, KEYS, () => undefined, () => clock);
        const live = new Set<string>();
        for (const o of ops) {
          if ('read' in o) {
            clock += o.advance;
            await reader.read('ConfigMap', 'ns', o.read, `u/${o.version}`);
            live.add(o.read);
          } else {
            reader.forget('ConfigMap', 'ns', o.forget);
            live.delete(o.forget);
          }
          expect(reader.size()).toBeLessThanOrEqual(live.size);
        }
        for (const name of names) reader.forget('ConfigMap', 'ns', name);
        expect(reader.size()).toBe(0);
      }),
      { seed: 25, numRuns: 200 },
    );
  });
  it('reads an object at one exact revision of the history: the item of that uid and version, none when compacted away or not that version then', async () => {
    const at = (uid: string, rv: string, value: string) => ({ metadata: { uid, resourceVersion: rv }, data: { a: value } });
    let answer: () => unknown = () => ({ items: [at('u', '7', 'one')] });
    const { api, paths } = fakeApi(() => answer());
    const reader = new DigestReader(api, KEYS);
    const read = await reader.readAt('ConfigMap', 'ns', 'app', 'u/7');
    expect(paths).toEqual(['/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dapp&resourceVersion=7&resourceVersionMatch=Exact']);
    expect(read?.version).toBe('u/7');
    expect(read?.digests).toEqual((await new DigestReader(fakeApi(() => at('u', '7', 'one')).api, KEYS).read('ConfigMap', 'ns', 'app', 'u/7')).digests);
    // a re-created object of the same name, and the object at a later version: not the one asked for
    answer = () => ({ items: [at('other', '7', 'one')] });
    expect(await reader.readAt('ConfigMap', 'ns', 'app', 'u/7')).toBeUndefined();
    answer = () => ({ items: [at('u', '9', 'two')] });
    expect(await reader.readAt('ConfigMap', 'ns', 'app', 'u/7')).toBeUndefined();
    answer = () => {
      throw new ApiStatusError('GET', '/x', 410, 'Expired', 'The resourceVersion for the provided list is too old.');
    };
    expect(await reader.readAt('ConfigMap', 'ns', 'app', 'u/7')).toBeUndefined();
    answer = () => {
      throw new ApiStatusError('GET', '/x', 403, 'Forbidden', '');
    };
    await expect(reader.readAt('ConfigMap', 'ns', 'app', 'u/7')).rejects.toThrow();
    // a value that names no version reads nothing
    expect(await reader.readAt('ConfigMap', 'ns', 'app', 'absent')).toBeUndefined();
    expect(paths).toHaveLength(5);
  });
});
