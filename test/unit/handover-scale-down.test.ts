import type { V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { admit } from '../../src/restarter/admit.js';
import { holdPartitionMutator } from '../../src/rollout/partition-hold-mutator.js';
import type { AdmissionRequest } from '../../src/admission/review.js';
import { holdScaleDownMutator } from '../../src/handover/scale-hold-mutator.js';
import { decideScaleWrite, recordOps } from '../../src/handover/scale-down.js';
import { applyScaleDownOps, heldScaleDown, WANTED_REPLICAS_ANNOTATION } from '../../src/rollout/scale-down-hold.js';
import { PRIMARY_SELECTOR_ANNOTATION } from '../../src/handover/settings.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';

type Json = Record<string, unknown>;

/** A handover-enabled set as wire JSON (what a review carries). */
function wireSet(opts: { replicas?: number; partition?: number; wanted?: string; handover?: boolean; revisions?: [string, string] } = {}): Json {
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: {
      name: 'db',
      namespace: 'shop',
      labels: { 'rollguard.io/enabled': 'true' },
      annotations: {
        [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE,
        ...(opts.handover === false ? {} : { [PRIMARY_SELECTOR_ANNOTATION]: 'role=primary' }),
        ...(opts.wanted !== undefined ? { [WANTED_REPLICAS_ANNOTATION]: opts.wanted } : {}),
      },
    },
    spec: {
      replicas: opts.replicas ?? 3,
      serviceName: 'db',
      selector: { matchLabels: { app: 'db' } },
      template: { metadata: { labels: { app: 'db' } }, spec: { containers: [{ name: 'db', image: 'registry.example/db:1' }] } },
      updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: opts.partition ?? opts.replicas ?? 3 } },
    },
    status: { currentRevision: opts.revisions?.[0] ?? 'r1', updateRevision: opts.revisions?.[1] ?? 'r1' },
  };
}

function update(object: Json, oldObject: Json): AdmissionRequest {
  return {
    uid: 'u1',
    kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
    resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
    namespace: 'shop',
    name: 'db',
    operation: 'UPDATE',
    object,
    oldObject,
  };
}

/** The object as stored after the webhook's whole chain (scale hold, then partition hold). */
function stored(object: Json, oldObject: Json): { replicas: number; partition: number; wanted?: string } {
  const answer = admit({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: update(object, oldObject) }, { cachesSynced: true, lookup: () => undefined, mutators: [holdScaleDownMutator, holdPartitionMutator] });
  const patch = answer.response?.patch;
  const ops = patch ? (JSON.parse(Buffer.from(patch, 'base64').toString('utf8')) as jsonpatch.Operation[]) : [];
  const out = jsonpatch.applyPatch(structuredClone(object), ops).newDocument as V1StatefulSet;
  const wanted = out.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION];
  return { replicas: out.spec!.replicas!, partition: out.spec!.updateStrategy!.rollingUpdate!.partition!, ...(wanted !== undefined ? { wanted } : {}) };
}

describe('holdScaleDownMutator (admission)', () => {
  it('keeps the old replicas of a lowered handover-enabled set and records the wanted count; the partition stays held at replicas', () => {
    expect(stored(wireSet({ replicas: 2, partition: 3 }), wireSet({ replicas: 3 }))).toEqual({ replicas: 3, partition: 3, wanted: '2' });
  });

  it('updates the wanted count on a repeated write (an autoscaler), still at the old replicas', () => {
    expect(stored(wireSet({ replicas: 1, partition: 3, wanted: '2' }), wireSet({ replicas: 3, wanted: '2' }))).toEqual({ replicas: 3, partition: 3, wanted: '1' });
  });

  it('drops the record when replicas is raised while held: nothing is left to do', () => {
    expect(stored(wireSet({ replicas: 4, partition: 3, wanted: '2' }), wireSet({ replicas: 3, wanted: '2' }))).toEqual({ replicas: 4, partition: 4 });
  });

  it("passes the leader's release as written: replicas lowered to the recorded count, the record removed", () => {
    expect(stored(wireSet({ replicas: 2, partition: 2 }), wireSet({ replicas: 3, wanted: '2' }))).toEqual({ replicas: 2, partition: 2 });
  });

  it('leaves other writes of a held set alone, the record with them', () => {
    const changed = wireSet({ replicas: 3, wanted: '2' });
    (changed.metadata as Json).labels = { 'rollguard.io/enabled': 'true', team: 'db' };
    expect(stored(changed, wireSet({ replicas: 3, wanted: '2' }))).toEqual({ replicas: 3, partition: 3, wanted: '2' });
  });

  it('holds nothing on a set without a primary selector, or not health-gated, or on CREATE', () => {
    expect(stored(wireSet({ replicas: 2, partition: 2, handover: false }), wireSet({ replicas: 3, handover: false }))).toEqual({ replicas: 2, partition: 2 });
    const ungated = wireSet({ replicas: 2, partition: 2 });
    delete ((ungated.metadata as Json).annotations as Json)[HEALTH_GATED_ANNOTATION];
    expect(holdScaleDownMutator(update(ungated, wireSet({ replicas: 3 })), ungated)).toEqual([]);
    const create = { ...update(wireSet({ replicas: 2 }), wireSet()), operation: 'CREATE' as const };
    expect(holdScaleDownMutator(create, wireSet({ replicas: 2 }))).toEqual([]);
  });
});

function set(replicas: number, annotations: Record<string, string>, partition = replicas): V1StatefulSet {
  return {
    metadata: { name: 'db', namespace: 'shop', labels: { 'rollguard.io/enabled': 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE, [PRIMARY_SELECTOR_ANNOTATION]: 'role=primary', ...annotations } },
    spec: { replicas, updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition } } } as V1StatefulSet['spec'],
  };
}

describe('heldScaleDown (the leader)', () => {
  it('names the pods the held scale-down removes, highest ordinal first', () => {
    expect(heldScaleDown(set(5, { [WANTED_REPLICAS_ANNOTATION]: '2' }))).toEqual({ kind: 'held', raw: '2', wanted: 2, replicas: 5, removing: ['db-4', 'db-3', 'db-2'] });
    const shifted = set(3, { [WANTED_REPLICAS_ANNOTATION]: '2' });
    shifted.spec!.ordinals = { start: 10 };
    expect(heldScaleDown(shifted)).toMatchObject({ removing: ['db-12'] });
  });

  it('calls a record that is no count unreadable, and one not below replicas stale', () => {
    expect(heldScaleDown(set(3, { [WANTED_REPLICAS_ANNOTATION]: 'two' }))).toEqual({ kind: 'unreadable', raw: 'two' });
    expect(heldScaleDown(set(3, { [WANTED_REPLICAS_ANNOTATION]: '-1' }))).toEqual({ kind: 'unreadable', raw: '-1' });
    expect(heldScaleDown(set(3, { [WANTED_REPLICAS_ANNOTATION]: '3' }))).toEqual({ kind: 'stale', raw: '3', wanted: 3, replicas: 3 });
    expect(heldScaleDown(set(3, {}))).toEqual({ kind: 'none' });
    // the primary selector removed while held: the user's count is still there to apply
    const noSelector = set(3, { [WANTED_REPLICAS_ANNOTATION]: '2' });
    delete noSelector.metadata!.annotations![PRIMARY_SELECTOR_ANNOTATION];
    expect(heldScaleDown(noSelector)).toMatchObject({ kind: 'held', wanted: 2 });
    delete noSelector.metadata!.annotations![HEALTH_GATED_ANNOTATION];
    expect(heldScaleDown(noSelector), 'not health-gated: no rollout controller acts on it').toEqual({ kind: 'none' });
  });

  it('applies replicas = wanted, removes the record behind a test of its value, and keeps the partition at or below replicas', () => {
    const atRest = set(3, { [WANTED_REPLICAS_ANNOTATION]: '2' });
    const held = heldScaleDown(atRest);
    if (held.kind !== 'held') throw new Error('not held');
    const applied = jsonpatch.applyPatch(structuredClone(atRest), applyScaleDownOps(atRest, held)).newDocument;
    expect([applied.spec?.replicas, applied.spec?.updateStrategy?.rollingUpdate?.partition, applied.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION]]).toEqual([2, 2, undefined]);
    // mid-rollout at partition 1: the rollout keeps its progress
    const rolling = set(3, { [WANTED_REPLICAS_ANNOTATION]: '2' }, 1);
    expect(applyScaleDownOps(rolling, held).some((op) => op.path.endsWith('/partition'))).toBe(false);
    // a newer record (a person's) makes the write fail instead of applying the old one
    const newer = set(3, { [WANTED_REPLICAS_ANNOTATION]: '1' });
    expect(() => jsonpatch.applyPatch(structuredClone(newer), applyScaleDownOps(newer, held))).toThrow();
  });
});

describe('decideScaleWrite (the scale subresource)', () => {
  const enabled = set(3, {});
  it('holds a scale-down of a handover-enabled set, at the old count, recording the new one', () => {
    expect(decideScaleWrite(enabled, 3, 2)).toEqual({ kind: 'hold', from: 3, to: 2 });
    expect(recordOps('uid-1', 2)).toEqual([
      { op: 'test', path: '/metadata/uid', value: 'uid-1' },
      { op: 'add', path: '/metadata/annotations/rollguard.io~1wanted-replicas', value: '2' },
    ]);
  });

  it('drops the record of a held set that is scaled up, and passes everything else', () => {
    expect(decideScaleWrite(set(3, { [WANTED_REPLICAS_ANNOTATION]: '2' }), 3, 4)).toEqual({ kind: 'drop', raw: '2' });
    expect(decideScaleWrite(enabled, 3, 4)).toEqual({ kind: 'pass' });
    expect(decideScaleWrite(enabled, 3, 3)).toEqual({ kind: 'pass' });
    expect(decideScaleWrite(undefined, 3, 2), 'a set not in the cache: not opted in').toEqual({ kind: 'pass' });
    const plain: V1StatefulSet = { metadata: { labels: { 'rollguard.io/enabled': 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE } }, spec: { replicas: 3 } as V1StatefulSet['spec'] };
    expect(decideScaleWrite(plain, 3, 2)).toEqual({ kind: 'pass' });
    expect(decideScaleWrite(enabled, undefined, 2)).toEqual({ kind: 'pass' });
  });
});
