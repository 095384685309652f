import type { V1StatefulSet } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createScaleHandler } from '../../src/handover/scale-handler.js';
import { PRIMARY_SELECTOR_ANNOTATION } from '../../src/handover/settings.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';

const SET: V1StatefulSet = {
  metadata: { name: 'db', namespace: 'shop', uid: 'uid-db', labels: { 'rollguard.io/enabled': 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE, [PRIMARY_SELECTOR_ANNOTATION]: 'role=primary' } },
  spec: { replicas: 3 } as V1StatefulSet['spec'],
};

const scale = (replicas: number) => ({ apiVersion: 'autoscaling/v1', kind: 'Scale', metadata: { name: 'db', namespace: 'shop' }, spec: { replicas } });

function review(from: number, to: number, extra: Record<string, unknown> = {}): unknown {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'r1',
      kind: { group: 'autoscaling', version: 'v1', kind: 'Scale' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      subResource: 'scale',
      namespace: 'shop',
      name: 'db',
      operation: 'UPDATE',
      object: scale(to),
      oldObject: scale(from),
      ...extra,
    },
  };
}

function harness(fail?: Error) {
  const writes: Operation[][] = [];
  const handler = createScaleHandler({
    statefulSet: (namespace, name) => (namespace === 'shop' && name === 'db' ? SET : undefined),
    patchSet: async (_ns, _name, ops) => {
      if (fail) throw fail;
      writes.push(ops);
    },
    logger: pino({ level: 'silent' }),
  });
  return { writes, handler };
}

const patchOf = (body: unknown): unknown => {
  const patch = (body as { response?: { patch?: string } }).response?.patch;
  return patch === undefined ? undefined : JSON.parse(Buffer.from(patch, 'base64').toString('utf8'));
};

describe('createScaleHandler (/mutate-scale)', () => {
  it('records the wanted count on the set, then keeps the old replicas in the Scale', async () => {
    const { writes, handler } = harness();
    const result = await handler(review(3, 2));
    expect(writes).toEqual([[{ op: 'test', path: '/metadata/uid', value: 'uid-db' }, { op: 'add', path: '/metadata/annotations/rollguard.io~1wanted-replicas', value: '2' }]]);
    expect(patchOf(result.body)).toEqual([{ op: 'replace', path: '/spec/replicas', value: 3 }]);
  });

  it('on a dry run holds without recording (no side effects)', async () => {
    const { writes, handler } = harness();
    const result = await handler(review(3, 2, { dryRun: true }));
    expect(writes).toEqual([]);
    expect(patchOf(result.body)).toEqual([{ op: 'replace', path: '/spec/replicas', value: 3 }]);
  });

  it('passes the scale-down unheld, with a warning, when the record cannot be written', async () => {
    const { handler } = harness(new Error('connection refused'));
    const result = await handler(review(3, 2));
    expect(patchOf(result.body)).toBeUndefined();
    expect((result.body as { response: { allowed: boolean; warnings?: string[] } }).response).toMatchObject({ allowed: true, warnings: [expect.stringContaining('could not hold this scale-down')] });
  });

  it('passes scale-ups, other sets and other subresources untouched', async () => {
    const { writes, handler } = harness();
    for (const body of [review(3, 4), review(3, 2, { name: 'other' }), review(3, 2, { subResource: 'status' })]) {
      expect(patchOf((await handler(body)).body)).toBeUndefined();
    }
    expect(writes).toEqual([]);
    expect((await handler({ kind: 'nonsense' })).status).toBe(400);
  });
});
