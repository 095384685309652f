import type { V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch from 'fast-json-patch';
import type { Operation } from 'fast-json-patch';

/**
 * Annotation on a health-gated StatefulSet: when rollguard last stepped its partition down
 * (RFC 3339). Written in the same PATCH as the step, so the two can never disagree, and read
 * back by whichever replica leads next: the rate limit holds across restarts and leader changes.
 */
export const LAST_STEP_ANNOTATION = 'rollguard.io/last-step-at';

/** The time in the set's annotation; undefined when it is missing or unreadable. */
export function annotatedLastStep(set: V1StatefulSet): Date | undefined {
  const value = set.metadata?.annotations?.[LAST_STEP_ANNOTATION];
  if (value === undefined) return undefined;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? undefined : at;
}

/**
 * The later of the annotation and what this process remembers (its own step may not be in
 * the cache yet), never later than `now`: a clock ahead on the replica that wrote it, or a
 * hand-edited value, must not stall the set for longer than one interval.
 */
export function lastStepAt(set: V1StatefulSet, remembered: Date | undefined, now: Date): Date | undefined {
  const annotated = annotatedLastStep(set);
  const latest = [annotated, remembered].reduce<Date | undefined>(
    (a, b) => (b === undefined ? a : a === undefined || b.getTime() > a.getTime() ? b : a),
    undefined,
  );
  if (latest === undefined) return undefined;
  return latest.getTime() > now.getTime() ? now : latest;
}

/** The JSON Patch operation that records `at` in the set's annotation. */
export function lastStepOp(set: V1StatefulSet, at: Date): Operation {
  const value = at.toISOString();
  if (!set.metadata?.annotations) return { op: 'add', path: '/metadata/annotations', value: { [LAST_STEP_ANNOTATION]: value } };
  // "add" of an existing member replaces it (RFC 6902), so one op serves both cases
  return { op: 'add', path: `/metadata/annotations/${jsonpatch.escapePathComponent(LAST_STEP_ANNOTATION)}`, value };
}
