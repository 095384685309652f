import { createRequire } from 'node:module';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND, ADMISSION_REVIEW_SCHEMA, envelopeIssues } from '../../src/admission/review.js';

type Validate = ((data: unknown) => boolean) & { errors?: { instancePath: string; schemaPath: string; keyword: string; params: unknown; message?: string }[] | null };

// Ajv as Fastify's default validator compiler builds it, with the options the webhook server had
// before it checked the envelope by hand
const require = createRequire(import.meta.url);
const ajvCompiler = require('@fastify/ajv-compiler') as () => (external: object, options: object) => (route: { schema: object }) => Validate;
const ajv = ajvCompiler()({}, { customOptions: { coerceTypes: false, removeAdditional: false }, plugins: [] })({ schema: ADMISSION_REVIEW_SCHEMA });

const ajvIssues = (body: unknown): unknown[] => {
  const data = structuredClone(body);
  return ajv(data) ? [] : (ajv.errors ?? []).map(({ instancePath, schemaPath, keyword, params, message }) => ({ instancePath, schemaPath, keyword, params, message }));
};

describe('envelopeIssues: ADMISSION_REVIEW_SCHEMA without Ajv', () => {
  const maybe = <T>(arb: fc.Arbitrary<T>): fc.Arbitrary<T | undefined> => fc.option(arb, { nil: undefined });
  const near = fc.record(
    {
      apiVersion: fc.oneof(fc.constant(ADMISSION_API_VERSION), fc.constant('admission.k8s.io/v1beta1'), fc.jsonValue()),
      kind: fc.oneof(fc.constant(ADMISSION_REVIEW_KIND), fc.constant('Review'), fc.jsonValue()),
      request: fc.oneof(
        fc.record({ uid: maybe(fc.oneof(fc.string(), fc.constant(''), fc.integer(), fc.jsonValue())), operation: maybe(fc.string()) }, { requiredKeys: [] }),
        fc.jsonValue(),
      ),
      extra: fc.jsonValue(),
    },
    { requiredKeys: [] },
  );
  const bodies = fc.oneof(near, fc.jsonValue());

  it('reports what Ajv (as Fastify builds it) reports first, for any JSON body (seeded)', () => {
    fc.assert(
      fc.property(bodies, (body) => {
        // JSON has no undefined: what the server would parse
        const parsed: unknown = JSON.parse(JSON.stringify(body) ?? 'null');
        expect(envelopeIssues(parsed)).toEqual(ajvIssues(parsed));
      }),
      { seed: 28, numRuns: 3000 },
    );
  });

  it('accepts a review and names the first thing wrong with one that is not', () => {
    const review = { apiVersion: ADMISSION_API_VERSION, kind: ADMISSION_REVIEW_KIND, request: { uid: 'u' } };
    expect(envelopeIssues(review)).toEqual([]);
    expect(envelopeIssues({ ...review, request: { uid: '' } })[0]).toMatchObject({ instancePath: '/request/uid', keyword: 'minLength' });
    expect(envelopeIssues({ kind: 'x' })[0]).toMatchObject({ keyword: 'required', params: { missingProperty: 'apiVersion' } });
    expect(ajvIssues({ kind: 'x' }), 'the reference reports it too').toEqual(envelopeIssues({ kind: 'x' }));
    expect(ajvIssues([1])).toEqual(envelopeIssues([1]));
    expect(envelopeIssues([1])).toHaveLength(1);
  });
});
