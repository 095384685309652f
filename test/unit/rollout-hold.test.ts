import type { V1StatefulSet, V1StatefulSetUpdateStrategy } from '@kubernetes/client-node';
import jsonpatch from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { heldPartition, partitionPatch } from '../../src/rollout/hold.js';

const OLD = 'web-5d8f7c';
const NEW = 'web-7b9c4e';

interface SetOptions {
  replicas?: number;
  partition?: number;
  image?: string;
  gated?: boolean;
  current?: string;
  update?: string;
  minReadySeconds?: number;
  /** null: no updateStrategy at all */
  strategy?: V1StatefulSetUpdateStrategy | null;
  labels?: Record<string, string>;
}

function makeSet(options: SetOptions = {}): V1StatefulSet {
  const strategy =
    options.strategy === undefined
      ? { type: 'RollingUpdate', rollingUpdate: options.partition === undefined ? {} : { partition: options.partition } }
      : options.strategy;
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: {
      name: 'web',
      namespace: 'shop',
      labels: { 'rollguard.io/enabled': 'true', ...options.labels },
      annotations: options.gated === false ? {} : { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE },
    },
    spec: {
      ...(options.replicas !== undefined ? { replicas: options.replicas } : {}),
      ...(options.minReadySeconds !== undefined ? { minReadySeconds: options.minReadySeconds } : {}),
      serviceName: 'web',
      selector: { matchLabels: { app: 'web' } },
      template: {
        metadata: { labels: { app: 'web' } },
        spec: { containers: [{ name: 'app', image: options.image ?? 'registry.example/web:1' }] },
      },
      ...(strategy ? { updateStrategy: strategy } : {}),
    },
    status: { replicas: options.replicas ?? 1, currentRevision: options.current ?? OLD, updateRevision: options.update ?? OLD },
  };
}

describe('heldPartition on CREATE', () => {
  it.each([
    { name: 'health-gated set: partition = replicas', set: makeSet({ replicas: 3 }), held: 3 },
    { name: 'replicas unset: the default 1', set: makeSet({}), held: 1 },
    { name: 'partition already replicas: nothing to write', set: makeSet({ replicas: 3, partition: 3 }), held: undefined },
    { name: 'partition given lower: back to replicas', set: makeSet({ replicas: 3, partition: 0 }), held: 3 },
    { name: 'not health-gated: left alone', set: makeSet({ replicas: 3, gated: false }), held: undefined },
    { name: 'OnDelete: no partition to hold', set: makeSet({ replicas: 3, strategy: { type: 'OnDelete' } }), held: undefined },
  ])('$name', ({ set, held }) => {
    expect(heldPartition(undefined, set)).toBe(held);
  });

  it('needs the enabled label as well as the annotation', () => {
    const set = makeSet({ replicas: 3 });
    set.metadata!.labels = {};
    expect(heldPartition(undefined, set)).toBeUndefined();
  });
});

describe('heldPartition on UPDATE', () => {
  it.each([
    {
      name: 'template change mid-rollout: back to replicas',
      old: makeSet({ replicas: 3, partition: 1, update: NEW }),
      new: makeSet({ replicas: 3, partition: 1, update: NEW, image: 'registry.example/web:3' }),
      held: 3,
    },
    {
      name: 'template change at rest: partition already replicas, nothing to write',
      old: makeSet({ replicas: 3, partition: 3 }),
      new: makeSet({ replicas: 3, partition: 3, image: 'registry.example/web:2' }),
      held: undefined,
    },
    {
      name: 'other spec change (minReadySeconds): back to replicas',
      old: makeSet({ replicas: 3, partition: 2, update: NEW }),
      new: makeSet({ replicas: 3, partition: 2, update: NEW, minReadySeconds: 20 }),
      held: 3,
    },
    {
      name: "rollguard's own step (partition only): left alone",
      old: makeSet({ replicas: 3, partition: 3, update: NEW }),
      new: makeSet({ replicas: 3, partition: 2, update: NEW }),
      held: undefined,
    },
    {
      name: 'metadata and status only: left alone',
      old: makeSet({ replicas: 3, partition: 2, update: NEW }),
      new: makeSet({ replicas: 3, partition: 2, update: NEW, current: NEW, labels: { team: 'shop' } }),
      held: undefined,
    },
    {
      name: 'scale-up at rest: follows replicas',
      old: makeSet({ replicas: 3, partition: 3 }),
      new: makeSet({ replicas: 5, partition: 3 }),
      held: 5,
    },
    {
      name: 'scale-down at rest: follows replicas',
      old: makeSet({ replicas: 5, partition: 5 }),
      new: makeSet({ replicas: 2, partition: 5 }),
      held: 2,
    },
    {
      name: 'scale mid-rollout: the partition keeps the progress',
      old: makeSet({ replicas: 3, partition: 1, update: NEW }),
      new: makeSet({ replicas: 5, partition: 1, update: NEW }),
      held: undefined,
    },
    {
      name: 'scale and template change mid-rollout: back to replicas',
      old: makeSet({ replicas: 3, partition: 1, update: NEW }),
      new: makeSet({ replicas: 5, partition: 1, update: NEW, image: 'registry.example/web:3' }),
      held: 5,
    },
    {
      name: 'the set just became health-gated: held like a new one',
      old: makeSet({ replicas: 3, gated: false }),
      new: makeSet({ replicas: 3 }),
      held: 3,
    },
    {
      name: 'an updateStrategy that only gained the partition is no spec change',
      old: makeSet({ replicas: 3, partition: 1, update: NEW, strategy: { type: 'RollingUpdate' } }),
      new: makeSet({ replicas: 3, partition: 1, update: NEW }),
      held: undefined,
    },
    {
      name: 'OnDelete: left alone',
      old: makeSet({ replicas: 3, strategy: { type: 'OnDelete' } }),
      new: makeSet({ replicas: 3, image: 'registry.example/web:2', strategy: { type: 'OnDelete' } }),
      held: undefined,
    },
  ])('$name', ({ old, new: updated, held }) => {
    expect(heldPartition(old, updated)).toBe(held);
  });

  it('sees no change between an object and its JSON round trip (webhook vs typed client objects)', () => {
    const typed = makeSet({ replicas: 3, partition: 1, update: NEW });
    typed.spec!.template.metadata!.creationTimestamp = undefined;
    const decoded = JSON.parse(JSON.stringify(typed)) as V1StatefulSet;
    expect(heldPartition(typed, decoded)).toBeUndefined();
  });
});

describe('partitionPatch', () => {
  it.each([
    { name: 'no updateStrategy', set: makeSet({ strategy: null }), partition: 3 },
    { name: 'updateStrategy without rollingUpdate', set: makeSet({ strategy: { type: 'RollingUpdate' } }), partition: 3 },
    { name: 'updateStrategy with type unset', set: makeSet({ strategy: {} }), partition: 3 },
    { name: 'rollingUpdate without partition', set: makeSet({ strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } } }), partition: 3 },
    { name: 'partition to step down', set: makeSet({ partition: 3 }), partition: 2 },
    { name: 'partition to put back to replicas', set: makeSet({ partition: 0 }), partition: 3 },
  ])('$name: the patched set has partition $partition', ({ set, partition }) => {
    const patched = jsonpatch.applyPatch(structuredClone(set), partitionPatch(set, partition)).newDocument;
    expect(patched.spec!.updateStrategy!.rollingUpdate!.partition).toBe(partition);
    expect(patched.spec!.updateStrategy!.type ?? 'RollingUpdate').toBe('RollingUpdate');
    const changed = jsonpatch.compare(set, patched).map((op) => op.path);
    expect(changed.every((path) => path.startsWith('/spec/updateStrategy'))).toBe(true);
    expect(patched.spec!.updateStrategy!.rollingUpdate!.maxUnavailable).toEqual(set.spec!.updateStrategy?.rollingUpdate?.maxUnavailable);
  });

  it('adds the whole updateStrategy when there is none', () => {
    expect(partitionPatch(makeSet({ strategy: null }), 3)).toEqual([
      { op: 'add', path: '/spec/updateStrategy', value: { type: 'RollingUpdate', rollingUpdate: { partition: 3 } } },
    ]);
  });

  it('replaces an existing partition only if it is still the one the decision saw', () => {
    const ops = partitionPatch(makeSet({ partition: 3 }), 2);
    expect(ops).toEqual([
      { op: 'test', path: '/spec/updateStrategy/rollingUpdate/partition', value: 3 },
      { op: 'replace', path: '/spec/updateStrategy/rollingUpdate/partition', value: 2 },
    ]);
    // someone stepped already: the stale patch fails instead of stepping twice
    expect(() => jsonpatch.applyPatch(makeSet({ partition: 2 }), ops)).toThrow();
  });

  it.each([
    { name: 'OnDelete', set: makeSet({ strategy: { type: 'OnDelete' } }) },
    { name: 'partition already set to the value', set: makeSet({ partition: 3 }) },
  ])('no patch: $name', ({ set }) => {
    expect(partitionPatch(set, 3)).toEqual([]);
  });
});
