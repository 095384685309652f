import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { propertyRuns } from '../env/property-runs.js';
import { STACKABLE_DIALECT } from '../../src/compat/stackable.js';
import { ROLLGUARD_DIALECT, readKeysFor } from '../../src/restarter/annotations.js';
import { baselineRecord, checkedPlan, dataOutcome, dataStep, judgeRead, lackedKeys, needsBaseline, type DataCheckItem } from '../../src/restarter/data-check.js';
import { missingKeys, requirements } from '../../src/restarter/references.js';
import type { DigestRead } from '../../src/restarter/digest-reader.js';
import { MAX_NAMED_KEYS, dataDigests, knownEquivalent, recordCovers, type DigestRecord } from '../../src/restarter/digests.js';

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

describe('only the keys a pod reads', () => {
  const KEY = Buffer.from('read-keys-test-key');
  const digestsOf = (data: Record<string, string>, kind: 'ConfigMap' | 'Secret' = 'ConfigMap'): Record<string, string> =>
    dataDigests(kind, { data: kind === 'Secret' ? Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])) : data }, KEY);
  const podTemplate = (spec: Record<string, unknown>): unknown => ({ spec: { containers: [{ name: 'app' }], ...spec } });
  const keyRef = (kind: 'configMapKeyRef' | 'secretKeyRef', key: string) => ({ name: `V_${key}`, valueFrom: { [kind]: { name: 'app', key } } });
  const before = { a: '1', b: '2', c: '3' };

  /** What the loop decides for a bump of ConfigMap (or Secret) `app` from data `from` to data `to`, for a set with `template`. */
  function decide(template: unknown, from: Record<string, string>, to: Record<string, string>, kind: 'ConfigMap' | 'Secret' = 'ConfigMap') {
    const reads = readKeysFor(ROLLGUARD_DIALECT, template)(kind, 'app');
    const record = { version: 'u/208', keyId: 'k1', digests: digestsOf(from, kind) };
    return judgeRead('u/208', 'u/264', record, read('u/264', { k1: digestsOf(to, kind) }), 'k1', reads);
  }

  const cases: { name: string; template: unknown; kind?: 'ConfigMap' | 'Secret'; change: Record<string, string>; rolls: string[] | null | false }[] = [
    { name: 'env configMapKeyRef of a; b changed', template: podTemplate({ containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'a')] }] }), change: { b: 'x' }, rolls: false },
    { name: 'env configMapKeyRef of a; a changed', template: podTemplate({ containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'a')] }] }), change: { a: 'x', b: 'x' }, rolls: ['a'] },
    { name: 'env secretKeyRef of a; b changed', kind: 'Secret', template: podTemplate({ containers: [{ name: 'app', env: [keyRef('secretKeyRef', 'a')] }] }), change: { b: 'x' }, rolls: false },
    { name: 'env secretKeyRef of a; a changed', kind: 'Secret', template: podTemplate({ containers: [{ name: 'app', env: [keyRef('secretKeyRef', 'a')] }] }), change: { a: 'x' }, rolls: ['a'] },
    { name: 'envFrom configMapRef; b changed', template: podTemplate({ containers: [{ name: 'app', envFrom: [{ configMapRef: { name: 'app' } }] }] }), change: { b: 'x' }, rolls: ['b'] },
    { name: 'envFrom secretRef; c changed', kind: 'Secret', template: podTemplate({ containers: [{ name: 'app', envFrom: [{ secretRef: { name: 'app' } }] }] }), change: { c: 'x' }, rolls: ['c'] },
    { name: 'configMap volume with items [a]; b changed', template: podTemplate({ volumes: [{ name: 'v', configMap: { name: 'app', items: [{ key: 'a', path: 'a' }] } }] }), change: { b: 'x' }, rolls: false },
    { name: 'configMap volume with items [a]; a changed', template: podTemplate({ volumes: [{ name: 'v', configMap: { name: 'app', items: [{ key: 'a', path: 'a' }] } }] }), change: { a: 'x' }, rolls: ['a'] },
    { name: 'secret volume with items [c]; a changed', kind: 'Secret', template: podTemplate({ volumes: [{ name: 'v', secret: { secretName: 'app', items: [{ key: 'c', path: 'c' }] } }] }), change: { a: 'x' }, rolls: false },
    { name: 'secret volume with items [c]; c changed', kind: 'Secret', template: podTemplate({ volumes: [{ name: 'v', secret: { secretName: 'app', items: [{ key: 'c', path: 'c' }] } }] }), change: { c: 'x' }, rolls: ['c'] },
    { name: 'configMap volume without items; b changed', template: podTemplate({ volumes: [{ name: 'v', configMap: { name: 'app' } }] }), change: { b: 'x' }, rolls: ['b'] },
    { name: 'configMap volume with empty items (every key); b changed', template: podTemplate({ volumes: [{ name: 'v', configMap: { name: 'app', items: [] } }] }), change: { b: 'x' }, rolls: ['b'] },
    { name: 'projected configMap items [a]; b changed', template: podTemplate({ volumes: [{ name: 'v', projected: { sources: [{ configMap: { name: 'app', items: [{ key: 'a', path: 'a' }] } }] } }] }), change: { b: 'x' }, rolls: false },
    { name: 'projected configMap items [a]; a changed', template: podTemplate({ volumes: [{ name: 'v', projected: { sources: [{ configMap: { name: 'app', items: [{ key: 'a', path: 'a' }] } }] } }] }), change: { a: 'x' }, rolls: ['a'] },
    { name: 'projected secret items [b]; c changed', kind: 'Secret', template: podTemplate({ volumes: [{ name: 'v', projected: { sources: [{ secret: { name: 'app', items: [{ key: 'b', path: 'b' }] } }] } }] }), change: { c: 'x' }, rolls: false },
    { name: 'projected secret without items; c changed', kind: 'Secret', template: podTemplate({ volumes: [{ name: 'v', projected: { sources: [{ secret: { name: 'app' } }] } }] }), change: { c: 'x' }, rolls: ['c'] },
    {
      name: 'two containers read a and c of one object; b changed',
      template: podTemplate({ containers: [{ name: 'one', env: [keyRef('configMapKeyRef', 'a')] }, { name: 'two', env: [keyRef('configMapKeyRef', 'c')] }] }),
      change: { b: 'x' },
      rolls: false,
    },
    {
      name: 'two containers read a and c of one object; b and c changed: only c named',
      template: podTemplate({ containers: [{ name: 'one', env: [keyRef('configMapKeyRef', 'a')] }, { name: 'two', env: [keyRef('configMapKeyRef', 'c')] }] }),
      change: { b: 'x', c: 'x' },
      rolls: ['c'],
    },
    { name: 'an init container reads a; a changed', template: podTemplate({ initContainers: [{ name: 'init', env: [keyRef('configMapKeyRef', 'a')] }] }), change: { a: 'x' }, rolls: ['a'] },
    { name: 'an init container reads a; b changed', template: podTemplate({ initContainers: [{ name: 'init', env: [keyRef('configMapKeyRef', 'a')] }] }), change: { b: 'x' }, rolls: false },
    {
      name: 'a key ref of a and an init container with envFrom (whole); b changed',
      template: podTemplate({ initContainers: [{ name: 'init', envFrom: [{ configMapRef: { name: 'app' } }] }], containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'a')] }] }),
      change: { b: 'x' },
      rolls: ['b'],
    },
    { name: 'a key ref of a key not there yet (optional); it is added', template: podTemplate({ containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'd')] }] }), change: { d: 'new' }, rolls: ['d'] },
    { name: 'a key ref of an added key; another key added', template: podTemplate({ containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'd')] }] }), change: { e: 'new' }, rolls: false },
  ];

  it.each(cases)('$name', ({ template, kind, change, rolls }) => {
    const verdict = decide(template, before, { ...before, ...change }, kind);
    if (rolls === false) {
      expect(verdict).toMatchObject({ kind: 'unread', keys: Object.keys(change).sort() });
      return;
    }
    expect(verdict).toMatchObject({ kind: 'changed', value: 'u/264', keys: rolls });
  });

  it('a key read is removed: rolls, naming it', () => {
    const template = podTemplate({ containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'a')] }] });
    expect(decide(template, before, { b: '2', c: '3' })).toMatchObject({ kind: 'changed', keys: ['a'] });
  });

  it(`above ${MAX_NAMED_KEYS} keys the digests are one: any change rolls, whatever is read, and names no key`, () => {
    const many = Object.fromEntries(Array.from({ length: MAX_NAMED_KEYS + 1 }, (_, i) => [`k${i}`, 'v']));
    const template = podTemplate({ containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'k0')] }] });
    expect(decide(template, many, { ...many, k1: 'changed' })).toMatchObject({ kind: 'changed', keys: null });
  });

  it('the record after an unread change speaks for the keys read: the webhook and the loop keep the template version', () => {
    const template = podTemplate({ containers: [{ name: 'app', env: [keyRef('configMapKeyRef', 'a')] }] });
    const verdict = decide(template, before, { ...before, b: 'x' });
    if (verdict.kind !== 'unread') throw new Error(`expected unread, got ${verdict.kind}`);
    expect(verdict.record).toMatchObject({ version: 'u/264', sameKeys: ['a'] });
    expect(knownEquivalent(verdict.record, 'u/208', 'u/264', ['a'])).toBe(true);
    // a template that now reads b (or everything) is not spoken for: its change rolls
    expect(knownEquivalent(verdict.record, 'u/208', 'u/264', ['a', 'b'])).toBe(false);
    expect(knownEquivalent(verdict.record, 'u/208', 'u/264', 'all')).toBe(false);
    // once the template names the record's version, its digests are that version's data, all of it
    expect(recordCovers(verdict.record, 'u/264', 'all')).toBe(true);
  });

  it('the outcome keeps the stored value, records the read version, and writes no template change', () => {
    const key = 'configmap.rollguard.io/app';
    const record = { version: 'u/208', keyId: 'k1', digests: digestsOf(before) };
    const bump: DataCheckItem = { planned: { key, kind: 'ConfigMap', name: 'app', value: 'u/264' }, stored: 'u/208', record, reads: ['a'] };
    const outcome = dataOutcome(bump, dataStep(bump, ROLLGUARD_DIALECT, 'k1', () => false), read('u/264', { k1: digestsOf({ ...before, b: 'x' }) }), 'k1');
    expect(outcome).toMatchObject({ value: 'u/208', unread: { from: 'u/208', to: 'u/264', keys: ['b'] } });
    const plan = checkedPlan([bump], [outcome], { [key]: 'u/208' }, null, ROLLGUARD_DIALECT);
    expect(plan.changes).toEqual([]);
    expect(JSON.parse(plan.digests!)[key]).toMatchObject({ v: 'u/264', r: ['a'] });
  });
});

describe('only the keys a pod reads, as a property', () => {
  const KEY = Buffer.from('read-keys-property-key');
  const NAMES = ['a', 'b', 'c', 'd'];
  const data = fc.dictionary(fc.constantFrom(...NAMES), fc.constantFrom('0', '1'), { maxKeys: NAMES.length });
  const reads = fc.oneof(fc.constant<'all'>('all'), fc.subarray(NAMES));
  const padding = Object.fromEntries(Array.from({ length: MAX_NAMED_KEYS }, (_, i) => [`pad${i}`, 'p']));
  const restricted = (d: Record<string, string>, r: 'all' | readonly string[]): string =>
    JSON.stringify(Object.entries(d).filter(([k]) => r === 'all' || r.includes(k)).sort(([x], [y]) => (x < y ? -1 : 1)));

  it('a bump rolls iff some read key changed, or the object is read whole (or past the key limit) and any key changed', () => {
    fc.assert(
      fc.property(data, data, reads, fc.boolean(), (from, to, r, folded) => {
        const pad = folded ? padding : {};
        const record = { version: 'u/10', keyId: 'k1', digests: dataDigests('ConfigMap', { data: { ...from, ...pad } }, KEY) };
        const verdict = judgeRead('u/10', 'u/11', record, read('u/11', { k1: dataDigests('ConfigMap', { data: { ...to, ...pad } }, KEY) }), 'k1', r);
        const anyChanged = restricted(from, 'all') !== restricted(to, 'all');
        const readChanged = restricted(from, r) !== restricted(to, r);
        const rolls = verdict.kind === 'changed';
        expect(rolls).toBe(folded || r === 'all' ? anyChanged : readChanged);
        if (verdict.kind === 'changed' && !folded) expect(verdict.keys!.every((k) => r === 'all' || r.includes(k))).toBe(true);
        if (!rolls) expect(['same', 'unread']).toContain(verdict.kind);
      }),
      propertyRuns(1000),
    );
  });

  it('over a run of changes, the template names a version whose read keys are the current ones, and rolls only when a read key changed', () => {
    fc.assert(
      fc.property(data, fc.array(data, { minLength: 1, maxLength: 8 }), reads, (first, changes, r) => {
        const key = 'configmap.rollguard.io/app';
        const history = new Map<string, Record<string, string>>([['u/1', first]]);
        let stored = 'u/1';
        let record: DigestRecord | undefined = { version: 'u/1', keyId: 'k1', digests: dataDigests('ConfigMap', { data: first }, KEY) };
        let current = first;
        changes.forEach((next, i) => {
          const version = `u/${i + 2}`;
          history.set(version, next);
          const expectRoll = restricted(current, r) !== restricted(next, r);
          current = next;
          // the webhook's and the loop's plan: a record that knows the version keeps the stored value
          if (knownEquivalent(record, stored, version, r)) {
            expect(expectRoll).toBe(false);
            return;
          }
          const item: DataCheckItem = { planned: { key, kind: 'ConfigMap', name: 'app', value: version }, stored, record, reads: r };
          const step = dataStep(item, ROLLGUARD_DIALECT, 'k1', () => false);
          const outcome = dataOutcome(item, step, read(version, { k1: dataDigests('ConfigMap', { data: next }, KEY) }), 'k1');
          expect(outcome.value !== stored).toBe(expectRoll);
          stored = outcome.value;
          record = outcome.record;
          expect(restricted(history.get(stored)!, r)).toBe(restricted(current, r));
        });
      }),
      propertyRuns(1000),
    );
  });
});

describe('a required key deleted', () => {
  const KEY = Buffer.from('missing-keys-key');
  const planned = { key: 'configmap.rollguard.io/app', kind: 'ConfigMap' as const, name: 'app', value: 'u/11' };
  const digestsOf = (data: Record<string, string>) => dataDigests('ConfigMap', { data }, KEY);
  const record: DigestRecord = { version: 'u/10', keyId: 'k1', digests: digestsOf({ a: '1', b: '2' }) };
  const item = (required?: { object: boolean; keys: string[] }): DataCheckItem => ({ planned, stored: 'u/10', record, reads: ['a'], ...(required ? { required } : {}) });
  const step = { read: true, why: 'bump', stored: 'u/10' } as const;

  it('a bump into data that lacks a key a non-optional key ref reads keeps the stored version and its record', () => {
    const outcome = dataOutcome(item({ object: true, keys: ['a'] }), step, read('u/11', { k1: digestsOf({ b: '2' }) }), 'k1');
    expect(outcome).toEqual({ value: 'u/10', record, missingKeys: { from: 'u/10', to: 'u/11', keys: ['a'] } });
  });

  it('read optionally (nothing required), the same bump rolls', () => {
    const outcome = dataOutcome(item({ object: false, keys: [] }), step, read('u/11', { k1: digestsOf({ b: '2' }) }), 'k1');
    expect(outcome.value).toBe('u/11');
    expect(outcome.missingKeys).toBeUndefined();
  });

  it('the key back with its value: the record says the same data, nothing rolls', () => {
    const outcome = dataOutcome(item({ object: true, keys: ['a'] }), step, read('u/12', { k1: digestsOf({ a: '1', b: '2' }) }), 'k1');
    expect(outcome.value).toBe('u/10');
    expect(outcome.missingKeys).toBeUndefined();
  });

  it('folded digests name no key: nothing can be told, the bump rolls', () => {
    const many = Object.fromEntries(Array.from({ length: MAX_NAMED_KEYS + 1 }, (_, i) => [`k${i}`, 'v']));
    expect(lackedKeys(item({ object: true, keys: ['a'] }), digestsOf(many))).toEqual([]);
  });

  it('requirements: a key ref or items name required keys unless optional; envFrom and whole volumes require the object alone', () => {
    const template = {
      spec: {
        volumes: [
          { name: 'v', configMap: { name: 'cm', items: [{ key: 'f', path: 'f' }] } },
          { name: 'w', secret: { secretName: 's', optional: true } },
          { name: 'p', projected: { sources: [{ configMap: { name: 'p', items: [{ key: 'x', path: 'x' }], optional: true } }] } },
        ],
        containers: [
          {
            name: 'c',
            env: [
              { name: 'A', valueFrom: { configMapKeyRef: { name: 'cm', key: 'a' } } },
              { name: 'B', valueFrom: { configMapKeyRef: { name: 'cm', key: 'b', optional: true } } },
              { name: 'C', valueFrom: { secretKeyRef: { name: 'opt', key: 'c', optional: true } } },
            ],
            envFrom: [{ configMapRef: { name: 'whole' } }, { secretRef: { name: 'maybe', optional: true } }],
          },
        ],
      },
    };
    expect(Object.fromEntries(requirements(template))).toEqual({
      'ConfigMap/cm': { object: true, keys: ['a', 'f'] },
      'ConfigMap/p': { object: false, keys: [] },
      'ConfigMap/whole': { object: true, keys: [] },
      'Secret/maybe': { object: false, keys: [] },
      'Secret/opt': { object: false, keys: [] },
      'Secret/s': { object: false, keys: [] },
    });
  });

  it('as a property: a bump is held back exactly when a required key is missing from the new data (named digests)', () => {
    const NAMES = ['a', 'b', 'c'];
    const data = fc.dictionary(fc.constantFrom(...NAMES), fc.constantFrom('0', '1'), { maxKeys: NAMES.length });
    fc.assert(
      fc.property(data, data, fc.subarray(NAMES), (from, to, requiredKeys) => {
        const rec: DigestRecord = { version: 'u/10', keyId: 'k1', digests: digestsOf(from) };
        const it0: DataCheckItem = { planned, stored: 'u/10', record: rec, reads: 'all', required: { object: true, keys: requiredKeys } };
        const outcome = dataOutcome(it0, step, read('u/11', { k1: digestsOf(to) }), 'k1');
        const lacked = missingKeys({ object: true, keys: requiredKeys }, Object.keys(to));
        const changed = JSON.stringify(Object.entries(from).sort()) !== JSON.stringify(Object.entries(to).sort());
        if (lacked.length > 0 && changed) {
          expect(outcome.value).toBe('u/10');
          expect(outcome.missingKeys?.keys).toEqual(lacked);
        } else {
          expect(outcome.missingKeys).toBeUndefined();
          expect(outcome.value).toBe(changed ? 'u/11' : 'u/10');
        }
      }),
      propertyRuns(500),
    );
  });
});
