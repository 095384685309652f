import { describe, expect, it } from 'vitest';
import { baselineRecord, judgeRead, needsBaseline } from '../../src/restarter/data-check.js';
import type { DigestRead } from '../../src/restarter/digest-reader.js';

const read = (version: string, digests: Record<string, Record<string, string>>): DigestRead => ({ version, digests: new Map(Object.entries(digests)) });

describe('judgeRead', () => {
  const record = { version: 'u/208', keyId: 'k1', digests: { a: 'aa', b: 'bb' } };

  it('same data: keep the stored value, record the newer version as equivalent', () => {
    expect(judgeRead('u/208', 'u/264', record, read('u/264', { k1: { a: 'aa', b: 'bb' } }), 'k1')).toEqual({
      kind: 'same',
      record: { version: 'u/264', keyId: 'k1', digests: { a: 'aa', b: 'bb' } },
    });
  });

  it('changed data: the fresh version, with the changed keys', () => {
    expect(judgeRead('u/208', 'u/264', record, read('u/270', { k1: { a: 'xx', b: 'bb', c: 'cc' } }), 'k1')).toEqual({
      kind: 'changed',
      value: 'u/270',
      keys: ['a', 'c'],
      record: { version: 'u/270', keyId: 'k1', digests: { a: 'xx', b: 'bb', c: 'cc' } },
    });
  });

  it('a rotated key: compared under the record\'s key, recorded under the new one, no rollout', () => {
    const verdict = judgeRead('u/208', 'u/264', record, read('u/264', { k1: { a: 'aa', b: 'bb' }, k2: { a: 'AA', b: 'BB' } }), 'k2');
    expect(verdict).toEqual({ kind: 'same', record: { version: 'u/264', keyId: 'k2', digests: { a: 'AA', b: 'BB' } } });
  });

  it('nothing to compare with (no record, a stale one, its key gone): the usual bump', () => {
    const fresh = read('u/264', { k2: { a: 'aa' } });
    for (const r of [undefined, { ...record, version: 'u/200' }, record]) {
      expect(judgeRead(r === record ? 'u/208' : 'u/208', 'u/264', r, fresh, 'k2').kind).toBe('unknown');
    }
  });

  it('a read that is gone or older than planned decides nothing', () => {
    expect(judgeRead('u/208', 'u/264', record, read('absent', {}), 'k1').kind).toBe('none');
    expect(judgeRead('u/208', 'u/264', record, read('u/260', { k1: {} }), 'k1').kind).toBe('none');
  });
});

describe('baselineRecord and needsBaseline', () => {
  it('records the template\'s version only while the object is still at it', () => {
    expect(baselineRecord('u/208', undefined, read('u/208', { k1: { a: 'aa' } }), 'k1')).toEqual({ version: 'u/208', keyId: 'k1', digests: { a: 'aa' } });
    expect(baselineRecord('u/208', undefined, read('u/209', { k1: { a: 'aa' } }), 'k1')).toBeUndefined();
  });

  it('re-keys a record while the object is within its version, without the old key', () => {
    const record = { version: 'u/264', keyId: 'k1', digests: { a: 'aa' } };
    expect(needsBaseline('u/208', record, 'k2')).toBe(true);
    expect(needsBaseline('u/208', record, 'k1')).toBe(false);
    expect(needsBaseline('absent', undefined, 'k1')).toBe(false);
    expect(baselineRecord('u/208', record, read('u/264', { k2: { a: 'AA' } }), 'k2')).toEqual({ version: 'u/264', keyId: 'k2', digests: { a: 'AA' } });
    expect(baselineRecord('u/208', record, read('u/270', { k2: { a: 'AA' } }), 'k2')).toBeUndefined();
  });
});
