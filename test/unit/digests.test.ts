import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { propertyRuns } from '../env/property-runs.js';
import {
  ALL_KEYS,
  DIGESTS_ANNOTATION,
  MAX_NAMED_KEYS,
  changedKeys,
  dataDigests,
  formatDigestRecords,
  knownEquivalent,
  parseDigestRecords,
  recordCovers,
  sameDigests,
  type DigestRecords,
} from '../../src/restarter/digests.js';

const KEY = Buffer.alloc(32, 7);
const OTHER_KEY = Buffer.alloc(32, 9);
const b64 = (s: string): string => Buffer.from(s).toString('base64');

describe('dataDigests', () => {
  it('digests what pods read: a Secret\'s decoded bytes equal a ConfigMap\'s text, binaryData is its own field', () => {
    const secret = dataDigests('Secret', { data: { p: b64('hunter2') } }, KEY);
    expect(secret).toEqual(dataDigests('ConfigMap', { data: { p: 'hunter2' } }, KEY));
    expect(dataDigests('ConfigMap', { binaryData: { p: b64('hunter2') } }, KEY)).not.toEqual(secret);
    // a Secret has no binaryData field; whatever is there is not read by pods
    expect(dataDigests('Secret', { data: { p: b64('hunter2') }, binaryData: { q: b64('x') } }, KEY)).toEqual(secret);
  });

  it('is keyed: another key gives other digests, and no digest contains the value', () => {
    const a = dataDigests('Secret', { data: { pin: b64('4711') } }, KEY);
    expect(a).not.toEqual(dataDigests('Secret', { data: { pin: b64('4711') } }, OTHER_KEY));
    expect(JSON.stringify(a)).not.toContain('4711');
    expect(a.pin).toMatch(/^[0-9a-f]{16}$/);
  });

  it('folds many keys into one digest, so the annotation stays small', () => {
    const data = Object.fromEntries(Array.from({ length: MAX_NAMED_KEYS + 1 }, (_, i) => [`k${i}`, String(i)]));
    expect(Object.keys(dataDigests('ConfigMap', { data }, KEY))).toEqual([ALL_KEYS]);
    expect(changedKeys(dataDigests('ConfigMap', { data }, KEY), dataDigests('ConfigMap', { data: { ...data, k0: 'x' } }, KEY))).toBeUndefined();
  });

  it('two data maps have the same digests exactly when they are equal, whatever the order', () => {
    const maps: Record<string, string>[] = [{}, { a: '' }, { a: '1' }, { a: '1', b: '2' }, { b: '2', a: '1' }, { a: '12' }, { a1: '2' }, { 'a:1': '' }, { a: ':1' }];
    for (const x of maps) {
      for (const y of maps) {
        const equal = JSON.stringify(Object.entries(x).sort()) === JSON.stringify(Object.entries(y).sort());
        expect(sameDigests(dataDigests('ConfigMap', { data: x }, KEY), dataDigests('ConfigMap', { data: y }, KEY)), `${JSON.stringify(x)} ${JSON.stringify(y)}`).toBe(equal);
      }
    }
  });
});

describe('dataDigests, as a property', () => {
  it('same digests exactly when the data maps are equal, in any order; changedKeys names exactly the differing keys', () => {
    // data keys as the API server validates them (so never ALL_KEYS)
    const dataMap = fc.dictionary(fc.stringMatching(/^[-._a-zA-Z0-9]{1,3}$/), fc.string({ maxLength: 3 }), { maxKeys: 6 });
    fc.assert(
      fc.property(dataMap, dataMap, (x, y) => {
        const dx = dataDigests('ConfigMap', { data: x }, KEY);
        const dy = dataDigests('ConfigMap', { data: y }, KEY);
        const differing = [...new Set([...Object.keys(x), ...Object.keys(y)])].filter((k) => x[k] !== y[k] || Object.hasOwn(x, k) !== Object.hasOwn(y, k)).sort();
        const reversed = dataDigests('ConfigMap', { data: Object.fromEntries(Object.entries(x).reverse()) }, KEY);
        expect(sameDigests(dx, dy)).toBe(differing.length === 0);
        expect(changedKeys(dx, dy)).toEqual(differing);
        expect(sameDigests(dx, reversed)).toBe(true);
      }),
      propertyRuns(300),
    );
  });
});

describe('changedKeys', () => {
  it('names added, removed and changed keys, sorted', () => {
    const before = dataDigests('ConfigMap', { data: { a: '1', b: '2', c: '3' } }, KEY);
    const after = dataDigests('ConfigMap', { data: { a: '10', c: '3', d: '4' } }, KEY);
    expect(changedKeys(before, after)).toEqual(['a', 'b', 'd']);
  });
});

describe('the digest record annotation', () => {
  it('round-trips, sorted the same on every replica; unreadable text counts as no record', () => {
    const records: DigestRecords = new Map([
      ['secret.rollguard.io/s', { version: 'u/2', keyId: 'k1', digests: { z: '1', a: '2' } as Record<string, string> }],
      ['configmap.rollguard.io/c', { version: 'u/1', keyId: 'k1', digests: {} as Record<string, string> }],
    ]);
    const text = formatDigestRecords(records)!;
    expect(text.indexOf('configmap')).toBeLessThan(text.indexOf('secret'));
    expect(parseDigestRecords({ [DIGESTS_ANNOTATION]: text })).toEqual(records);
    expect(formatDigestRecords(new Map())).toBeUndefined();
    for (const bad of ['{', '[]', '{"x": 1}', '{"x": {"v": "u/1", "k": "k", "d": {"a": 1}}}']) {
      expect(parseDigestRecords({ [DIGESTS_ANNOTATION]: bad }).size).toBe(0);
    }
  });

  it('covers the template\'s value at or after it, and knows a candidate up to its version as equivalent', () => {
    const record = { version: 'u/264', keyId: 'k1', digests: {} };
    expect(recordCovers(record, 'u/208')).toBe(true);
    expect(recordCovers(record, 'u/300')).toBe(false);
    expect(recordCovers(record, 'absent')).toBe(false);
    expect(knownEquivalent(record, 'u/208', 'u/264')).toBe(true);
    expect(knownEquivalent(record, 'u/208', 'u/265')).toBe(false);
    expect(knownEquivalent(undefined, 'u/208', 'u/209')).toBe(false);
  });

  it('a record whose same keys are named (r) speaks only for a template that reads no other key, and only while it is ahead', () => {
    const record = { version: 'u/264', keyId: 'k1', digests: { a: '1', b: '2' }, sameKeys: ['a', 'c'] };
    const text = formatDigestRecords(new Map([['configmap.rollguard.io/c', record]]))!;
    expect(JSON.parse(text)).toEqual({ 'configmap.rollguard.io/c': { v: 'u/264', k: 'k1', d: { a: '1', b: '2' }, r: ['a', 'c'] } });
    expect(parseDigestRecords({ [DIGESTS_ANNOTATION]: text }).get('configmap.rollguard.io/c')).toEqual(record);
    // an unreadable r speaks for no key
    expect(parseDigestRecords({ [DIGESTS_ANNOTATION]: '{"c": {"v": "u/1", "k": "k", "d": {}, "r": "a"}}' }).get('c')?.sameKeys).toEqual([]);
    expect(recordCovers(record, 'u/208', ['a'])).toBe(true);
    expect(recordCovers(record, 'u/208', ['a', 'c'])).toBe(true);
    expect(recordCovers(record, 'u/208', ['b'])).toBe(false);
    expect(recordCovers(record, 'u/208', 'all')).toBe(false);
    expect(recordCovers(record, 'u/208')).toBe(false);
    expect(knownEquivalent(record, 'u/208', 'u/230', ['a'])).toBe(true);
    expect(knownEquivalent(record, 'u/208', 'u/230', ['b'])).toBe(false);
    // the template at the record's own version: the digests are its data, every key
    expect(recordCovers(record, 'u/264', 'all')).toBe(true);
  });
});
