import type { Operation } from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { composeMutators, type Mutator } from '../../src/admission/mutators.js';
import type { AdmissionRequest } from '../../src/admission/review.js';

const request: AdmissionRequest = {
  uid: 'u',
  kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
  resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
  operation: 'CREATE',
};

describe('composeMutators', () => {
  it('hands each mutator the object as the previous one left it, and returns all their operations in order', () => {
    const seen: unknown[] = [];
    const first: Mutator = () => [{ op: 'add', path: '/spec/replicas', value: 3 }];
    const second: Mutator = (_req, object) => {
      seen.push((object.spec as { replicas?: number }).replicas);
      return [{ op: 'add', path: '/metadata/x', value: 'y' }];
    };
    const object = { metadata: {}, spec: {} };
    const ops = composeMutators(request, object, [first, second]);
    expect(seen).toEqual([3]);
    expect(ops).toEqual([
      { op: 'add', path: '/spec/replicas', value: 3 },
      { op: 'add', path: '/metadata/x', value: 'y' },
    ]);
    // the submitted object is left as it came
    expect(object).toEqual({ metadata: {}, spec: {} });
  });

  it('copies nothing when no mutator patches', () => {
    const object = { spec: {} };
    let sameObject = true;
    const look: Mutator = (_req, o) => {
      sameObject &&= o === object;
      return [];
    };
    expect(composeMutators(request, object, [look, look])).toEqual([]);
    expect(sameObject).toBe(true);
  });

  it('names the mutator whose patch does not apply', () => {
    const broken: Mutator = (): Operation[] => [{ op: 'replace', path: '/spec/missing/deep', value: 1 }];
    expect(() => composeMutators(request, { spec: {} }, [broken, () => []])).toThrow(/mutator 1 of 2 wrote a patch that does not apply/);
  });
});
