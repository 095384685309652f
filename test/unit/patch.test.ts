import jsonpatch from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { annotationChanges, type DesiredAnnotation } from '../../src/restarter/annotations.js';
import { templateAnnotationOps, workloadAnnotationOps, type TemplateMetadata } from '../../src/restarter/patch.js';

const desired = (key: string, value: string): DesiredAnnotation => ({ key, kind: 'ConfigMap', name: key.split('/')[1] ?? key, value });

describe('templateAnnotationOps', () => {
  it.each<{ name: string; metadata: TemplateMetadata | null | undefined; want: DesiredAnnotation[]; ops: unknown[] }>([
    {
      name: 'no metadata: the whole map is added',
      metadata: undefined,
      want: [desired('configmap.rollguard.io/app', 'u/1')],
      ops: [{ op: 'add', path: '/spec/template/metadata', value: { annotations: { 'configmap.rollguard.io/app': 'u/1' } } }],
    },
    {
      name: 'null annotations (wire JSON): the map is added',
      metadata: { annotations: null },
      want: [desired('configmap.rollguard.io/app', 'u/1')],
      ops: [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'configmap.rollguard.io/app': 'u/1' } }],
    },
    {
      name: 'add, replace and remove, with "/" escaped once',
      metadata: { annotations: { 'configmap.rollguard.io/old': 'u/1', 'configmap.rollguard.io/app': 'u/1', mine: 'kept' } },
      want: [desired('configmap.rollguard.io/app', 'u/2'), desired('secret.rollguard.io/creds', 'absent')],
      ops: [
        { op: 'replace', path: '/spec/template/metadata/annotations/configmap.rollguard.io~1app', value: 'u/2' },
        { op: 'add', path: '/spec/template/metadata/annotations/secret.rollguard.io~1creds', value: 'absent' },
        { op: 'remove', path: '/spec/template/metadata/annotations/configmap.rollguard.io~1old' },
      ],
    },
    {
      name: 'up to date: nothing',
      metadata: { annotations: { 'configmap.rollguard.io/app': 'u/1' } },
      want: [desired('configmap.rollguard.io/app', 'u/1')],
      ops: [],
    },
  ])('$name', ({ metadata, want, ops }) => {
    const current = metadata?.annotations ?? undefined;
    const got = templateAnnotationOps(metadata, want, annotationChanges(current, want));
    expect(got).toEqual(ops);
    if (got.length === 0) return;
    // applied, the template carries exactly the desired annotations beside the others' own
    const doc = { spec: { template: metadata === undefined ? {} : { metadata: structuredClone(metadata) } } };
    const patched = jsonpatch.applyPatch(doc, got, true, false).newDocument;
    const annotations = patched.spec.template.metadata?.annotations ?? {};
    for (const { key, value } of want) expect(annotations[key]).toBe(value);
    expect(Object.keys(annotations).filter((k) => k.includes('rollguard.io/')).sort()).toEqual(want.map((d) => d.key).sort());
    if (current?.mine) expect(annotations.mine).toBe('kept');
  });
});

describe('workloadAnnotationOps', () => {
  const applied = (annotations: Record<string, string> | undefined, values: Record<string, string | undefined>): Record<string, string> | undefined => {
    const doc = { metadata: annotations ? { annotations: { ...annotations } } : {} };
    return jsonpatch.applyPatch(doc, workloadAnnotationOps(annotations, values), true, false).newDocument.metadata.annotations;
  };

  it.each([
    ['no map, two values: both land', undefined, { a: '1', b: '2' }, { a: '1', b: '2' }],
    ['no map, a removal and a value: the value lands', undefined, { a: undefined, b: '2' }, { b: '2' }],
    ['no map, only removals: nothing to write', undefined, { a: undefined }, undefined],
    ['a map: set, replace and remove', { a: '1', c: '3' }, { a: '9', b: '2', c: undefined }, { a: '9', b: '2' }],
    ['a map that already holds the values: no operation', { a: '1' }, { a: '1' }, { a: '1' }],
  ])('%s', (_what, annotations, values, expected) => {
    expect(applied(annotations, values)).toEqual(expected);
  });

  it('writes nothing when nothing differs', () => {
    expect(workloadAnnotationOps({ a: '1' }, { a: '1', b: undefined })).toEqual([]);
    expect(workloadAnnotationOps(undefined, {})).toEqual([]);
  });
});
