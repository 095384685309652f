import { describe, expect, it } from 'vitest';
import { parseAdmissionReview } from '../../src/admission/review.js';

function body(request: unknown, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request, ...overrides };
}

/** Arrays inside arrays, `levels` of them. */
function nested(levels: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < levels; i++) value = [value];
  return value;
}

const request = {
  uid: '705ab4f5-6393-11e8-b7cc-42010a800002',
  kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
  resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
  namespace: 'shop',
  operation: 'CREATE',
  object: { metadata: { name: 'db' } },
  dryRun: false,
};

describe('parseAdmissionReview', () => {
  it('takes an object exactly 100 levels deep', () => {
    expect(parseAdmissionReview(body({ ...request, object: nested(100) })).ok).toBe(true);
  });

  it.each([
    { name: 'null', input: null, reason: 'body: expected an AdmissionReview object, got null' },
    { name: 'a string', input: 'hello', reason: 'body: expected an AdmissionReview object, got "hello"' },
    { name: 'an array', input: [], reason: 'body: expected an AdmissionReview object, got an array' },
    {
      name: 'admission.k8s.io/v1beta1',
      input: body(request, { apiVersion: 'admission.k8s.io/v1beta1' }),
      reason: 'apiVersion: expected "admission.k8s.io/v1", got "admission.k8s.io/v1beta1"',
    },
    { name: 'no apiVersion', input: body(request, { apiVersion: undefined }), reason: 'apiVersion: expected "admission.k8s.io/v1", got nothing' },
    { name: 'another kind', input: body(request, { kind: 'TokenReview' }), reason: 'kind: expected "AdmissionReview", got "TokenReview"' },
    { name: 'no request', input: body(undefined), reason: 'request: expected an object, got nothing' },
    { name: 'request is a number', input: body(42), reason: 'request: expected an object, got a number' },
    { name: 'no uid', input: body({ ...request, uid: undefined }), reason: 'request.uid: expected a non-empty string, got nothing' },
    { name: 'empty uid', input: body({ ...request, uid: '' }), reason: 'request.uid: expected a non-empty string, got ""' },
    { name: 'numeric uid', input: body({ ...request, uid: 7 }), reason: 'request.uid: expected a non-empty string, got a number' },
    {
      name: 'no request.kind',
      input: body({ ...request, kind: undefined }),
      reason: 'request.kind: expected an object {group, version, kind}, got nothing',
    },
    {
      name: 'request.kind without group',
      input: body({ ...request, kind: { version: 'v1', kind: 'StatefulSet' } }),
      reason: 'request.kind.group: expected a string, got nothing',
    },
    {
      name: 'unknown operation',
      input: body({ ...request, operation: 'PATCH' }),
      reason: 'request.operation: expected one of CREATE, UPDATE, DELETE, CONNECT, got "PATCH"',
    },
    { name: 'a namespace that is an object', input: body({ ...request, namespace: { a: 1 } }), reason: 'request.namespace: expected a string, got an object' },
    { name: 'a name that is a number', input: body({ ...request, name: 3 }), reason: 'request.name: expected a string, got a number' },
    { name: 'a subResource that is an array', input: body({ ...request, subResource: ['status'] }), reason: 'request.subResource: expected a string, got an array' },
    {
      name: 'an object nested deeper than any Kubernetes object',
      input: body({ ...request, object: nested(101) }),
      reason: 'request.object: nested more than 100 levels deep; no Kubernetes object is',
    },
    {
      name: 'an oldObject nested deeper than any Kubernetes object',
      input: body({ ...request, operation: 'UPDATE', oldObject: { spec: nested(100) } }),
      reason: 'request.oldObject: nested more than 100 levels deep; no Kubernetes object is',
    },
  ])('rejects $name', ({ input, reason }) => {
    expect(parseAdmissionReview(input)).toEqual({ ok: false, reason });
  });

  it('shortens a long offending value in the reason', () => {
    const result = parseAdmissionReview(body(request, { kind: 'x'.repeat(10_000) }));
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason.length).toBeLessThan(120);
  });

  it.each([
    { name: 'a CREATE', input: body(request) },
    { name: 'a core-group kind (empty group)', input: body({ ...request, kind: { group: '', version: 'v1', kind: 'Pod' } }) },
    { name: 'a DELETE without object', input: body({ ...request, operation: 'DELETE', object: null }) },
  ])('accepts $name as it came', ({ input }) => {
    expect(parseAdmissionReview(input)).toEqual({ ok: true, review: input });
  });
});
