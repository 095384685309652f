import { describe, expect, it } from 'vitest';
import { STACKABLE_DIALECT } from '../../src/compat/stackable.js';
import { ROLLGUARD_DIALECT } from '../../src/restarter/annotations.js';
import { baselineRecord, checkedPlan, dataOutcome, dataStep, judgeRead, needsBaseline, type DataCheckItem } from '../../src/restarter/data-check.js';
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

describe('dataStep and dataOutcome', () => {
  const key = 'configmap.rollguard.io/app';
  const item = (stored: string | undefined, planned: string, record?: { version: string; keyId: string; digests: Record<string, string> }): DataCheckItem => ({
    planned: { key, kind: 'ConfigMap', name: 'app', value: planned },
    stored,
    record,
  });
  const record = { version: 'u/208', keyId: 'k1', digests: { a: 'aa' } };
  const never = (): boolean => {
    throw new Error('cachedAt asked where no baseline is possible');
  };

  it.each<{ name: string; item: DataCheckItem; dialect?: typeof ROLLGUARD_DIALECT; cachedAt?: boolean; want: ReturnType<typeof dataStep> }>([
    { name: 'a new reference: no read', item: item(undefined, 'u/208'), want: { read: false } },
    { name: 'unchanged, right record: no read', item: item('u/208', 'u/208', record), want: { read: false } },
    { name: 'unchanged, no record, cache at the version: a baseline read', item: item('u/208', 'u/208'), cachedAt: true, want: { read: true, why: 'baseline' } },
    { name: 'unchanged, no record, cache moved on: no read', item: item('u/208', 'u/208'), cachedAt: false, want: { read: false } },
    { name: 'unchanged, no record, a dialect without baselines: no read', item: item('u/208', 'u/208'), dialect: STACKABLE_DIALECT, want: { read: false } },
    { name: 'a version bump: a read decides', item: item('u/208', 'u/264', record), want: { read: true, why: 'bump', stored: 'u/208' } },
    { name: 'appeared (absent → a version): no read', item: item('absent', 'u/264'), want: { read: false } },
    {
      name: "commons-operator's content digest of the same object: a read decides",
      item: item(`u/${'a'.repeat(32)}`, 'u/264'),
      dialect: STACKABLE_DIALECT,
      want: { read: true, why: 'content-digest', digest: 'a'.repeat(32) },
    },
    { name: 'a content digest without a dialect that writes them: no read', item: item(`u/${'a'.repeat(32)}`, 'u/264'), want: { read: false } },
  ])('$name', ({ item, dialect, cachedAt, want }) => {
    expect(dataStep(item, dialect ?? ROLLGUARD_DIALECT, 'k1', cachedAt === undefined ? never : () => cachedAt)).toEqual(want);
  });

  it('a bump whose data is the same keeps the stored value, says so, and records the newer version', () => {
    const bump = item('u/208', 'u/264', record);
    const outcome = dataOutcome(bump, dataStep(bump, ROLLGUARD_DIALECT, 'k1', never), read('u/264', { k1: { a: 'aa' } }), 'k1');
    expect(outcome).toEqual({ value: 'u/208', record: { ...record, version: 'u/264' }, metadataOnly: { from: 'u/208', to: 'u/264' } });
    const plan = checkedPlan([bump], [outcome], { [key]: 'u/208' }, null, ROLLGUARD_DIALECT);
    expect(plan.changes).toEqual([]);
    expect(JSON.parse(plan.digests!)).toEqual({ [key]: { v: 'u/264', k: 'k1', d: { a: 'aa' } } });
  });

  it('a bump whose data changed writes the read version and names the keys in its change; a failed read keeps the plan', () => {
    const bump = item('u/208', 'u/264', record);
    const step = dataStep(bump, ROLLGUARD_DIALECT, 'k1', never);
    const changed = dataOutcome(bump, step, read('u/270', { k1: { a: 'xx' } }), 'k1');
    expect(checkedPlan([bump], [changed], { [key]: 'u/208' }, null, ROLLGUARD_DIALECT).changes).toEqual([
      { key, kind: 'ConfigMap', name: 'app', from: 'u/208', to: 'u/270', dataKeys: ['a'] },
    ]);
    expect(dataOutcome(bump, step, undefined, 'k1')).toEqual({ value: 'u/264' });
  });
});
