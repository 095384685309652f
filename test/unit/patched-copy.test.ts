import fc from 'fast-check';
import jsonpatch, { type Operation } from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { patchedCopy } from '../../src/admission/patched-copy.js';
import { propertyRuns } from '../env/property-runs.js';

const escape = (token: string): string => token.replace(/~/g, '~0').replace(/\//g, '~1');

/** Every JSON Pointer into `doc` (containers and leaves), root excluded. */
function pointers(doc: unknown, prefix = ''): { path: string; container: boolean; inArray: boolean }[] {
  if (doc === null || typeof doc !== 'object') return [];
  const entries = Array.isArray(doc) ? doc.map((v, i) => [String(i), v] as const) : Object.entries(doc);
  return entries.flatMap(([key, value]) => {
    const path = `${prefix}/${escape(key)}`;
    const container = value !== null && typeof value === 'object';
    return [{ path, container, inArray: Array.isArray(doc) }, ...pointers(value, path)];
  });
}

const json = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, fc.string(), fc.integer(), fc.boolean(), fc.constant(null), tie('object'), tie('array')),
  object: fc.dictionary(fc.oneof(fc.string({ maxLength: 4 }), fc.constantFrom('a/b', '~x', 'metadata')), tie('value'), { maxKeys: 4 }),
  array: fc.array(tie('value'), { maxLength: 3 }),
}));

/** A document and operations that apply to it one after the other, as mutators write them. */
const docAndOps = fc
  .tuple(json.object as fc.Arbitrary<Record<string, unknown>>, fc.array(fc.tuple(fc.nat(), fc.constantFrom('add', 'replace', 'remove', 'test'), fc.string({ maxLength: 3 }), json.value), { maxLength: 6 }))
  .map(([doc, picks]) => {
    const ops: Operation[] = [];
    let current: unknown = structuredClone(doc);
    for (const [n, kind, key, value] of picks) {
      const targets = pointers(current);
      const containers = [{ path: '', container: true, inArray: false }, ...targets].filter((t) => t.container);
      let op: Operation | undefined;
      if (kind === 'add') {
        const parent = containers[n % containers.length]!;
        const holder = parent.path === '' ? current : jsonpatch.getValueByPointer(current, parent.path);
        op = { op: 'add', path: `${parent.path}/${Array.isArray(holder) ? '-' : escape(key)}`, value };
      } else if (targets.length > 0) {
        const target = targets[n % targets.length]!;
        op = kind === 'replace' ? { op: 'replace', path: target.path, value } : kind === 'remove' ? { op: 'remove', path: target.path } : { op: 'test', path: target.path, value: jsonpatch.getValueByPointer(current, target.path) };
      }
      if (!op) continue;
      current = jsonpatch.applyOperation(current, structuredClone(op), false, false).newDocument;
      ops.push(op);
    }
    return { doc, ops };
  });

describe('patchedCopy', () => {
  it('gives what applying to a deep clone gives, and leaves the document and the operations as they were', () => {
    fc.assert(
      fc.property(docAndOps, ({ doc, ops }) => {
        const docBefore = structuredClone(doc);
        const opsBefore = structuredClone(ops);
        const expected = jsonpatch.applyPatch(structuredClone(doc), structuredClone(ops), false, true).newDocument;
        expect(patchedCopy(doc, ops)).toEqual(expected);
        expect(doc).toEqual(docBefore);
        expect(ops).toEqual(opsBefore);
      }),
      // no shrinking: a counterexample of nested documents shrinks for minutes
      { ...propertyRuns(3000), endOnFailure: true },
    );
  });

  it('copies only what lies on the way to a target: the rest is shared', () => {
    const doc = { metadata: { annotations: { a: '1' }, labels: { l: 'x' } }, spec: { template: { spec: { containers: [{ name: 'app' }] } } } };
    const out = patchedCopy(doc, [{ op: 'add', path: '/metadata/annotations/b', value: '2' }]);
    expect(out.metadata).not.toBe(doc.metadata);
    expect((out.metadata as typeof doc.metadata).labels).toBe(doc.metadata.labels);
    expect(out.spec).toBe(doc.spec);
    expect(doc.metadata.annotations).toEqual({ a: '1' });
  });

  it('throws as fast-json-patch does for an operation that does not apply, and leaves the document alone', () => {
    const doc = { spec: {} };
    expect(() => patchedCopy(doc, [{ op: 'replace', path: '/spec/missing/x', value: 1 }])).toThrow();
    expect(doc).toEqual({ spec: {} });
  });
});
