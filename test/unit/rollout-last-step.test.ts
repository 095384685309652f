import type { V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { LAST_STEP_ANNOTATION, annotatedLastStep, lastStepAt, lastStepOp } from '../../src/rollout/last-step.js';

const NOW = new Date('2025-03-01T12:00:00Z');
const secondsAgo = (s: number): Date => new Date(NOW.getTime() - s * 1000);

function setWith(annotations?: Record<string, string>): V1StatefulSet {
  return { metadata: { name: 'web', namespace: 'shop', ...(annotations ? { annotations } : {}) } };
}

describe('last step time', () => {
  it('reads the annotation, and nothing from a missing or unreadable one', () => {
    expect(annotatedLastStep(setWith({ [LAST_STEP_ANNOTATION]: '2025-03-01T11:59:30.000Z' }))).toEqual(secondsAgo(30));
    expect(annotatedLastStep(setWith())).toBeUndefined();
    expect(annotatedLastStep(setWith({ [LAST_STEP_ANNOTATION]: 'yesterday-ish' }))).toBeUndefined();
  });

  it.each([
    { name: 'only the annotation (a restart)', annotated: secondsAgo(30), remembered: undefined, expected: secondsAgo(30) },
    { name: 'only memory (our step is not in the cache yet)', annotated: undefined, remembered: secondsAgo(1), expected: secondsAgo(1) },
    { name: 'the later of the two', annotated: secondsAgo(30), remembered: secondsAgo(1), expected: secondsAgo(1) },
    { name: 'the later of the two, the other way', annotated: secondsAgo(1), remembered: secondsAgo(30), expected: secondsAgo(1) },
    { name: 'a time in the future counts as now', annotated: new Date(NOW.getTime() + 3_600_000), remembered: undefined, expected: NOW },
    { name: 'neither', annotated: undefined, remembered: undefined, expected: undefined },
  ])('$name', ({ annotated, remembered, expected }) => {
    const set = setWith(annotated ? { [LAST_STEP_ANNOTATION]: annotated.toISOString() } : {});
    expect(lastStepAt(set, remembered, NOW)).toEqual(expected);
  });

  it('writes the annotation whether or not the set has annotations', () => {
    for (const set of [setWith(), setWith({ other: 'x' }), setWith({ [LAST_STEP_ANNOTATION]: secondsAgo(60).toISOString() })]) {
      const patched = jsonpatch.applyPatch(structuredClone(set), [lastStepOp(set, NOW)]).newDocument;
      expect(annotatedLastStep(patched)).toEqual(NOW);
    }
  });
});
