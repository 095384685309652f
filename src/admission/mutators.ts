import type { Operation } from 'fast-json-patch';
import { patchedCopy } from './patched-copy.js';
import type { AdmissionRequest } from './review.js';

/**
 * One mutation of an admitted object: the JSON Patch operations it calls for. `object` is the
 * object as the mutators before it left it; a mutator never changes it itself.
 */
export type Mutator = (request: AdmissionRequest, object: Record<string, unknown>) => Operation[];

/**
 * Runs the mutators in order, each on the object as the previous ones left it, and returns the
 * patch from the submitted object to the final one: every mutator's operations, in order. What a
 * mutator patched is copied (along the patched paths only) when another one follows.
 */
export function composeMutators(request: AdmissionRequest, object: Record<string, unknown>, mutators: readonly Mutator[]): Operation[] {
  const ops: Operation[] = [];
  let working = object;
  mutators.forEach((mutate, i) => {
    const own = mutate(request, working);
    if (own.length === 0) return;
    ops.push(...own);
    if (i === mutators.length - 1) return;
    try {
      working = patchedCopy(working, own);
    } catch (err) {
      throw new Error(`mutator ${i + 1} of ${mutators.length} wrote a patch that does not apply: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  });
  return ops;
}

/**
 * One check of an admitted object: warnings the client shows (kubectl prints them), never a
 * denial (the webhook is failurePolicy Ignore and mutating: it allows every write). It reads
 * the object as submitted: a warning is about what the user wrote, which is what they can fix.
 */
export type Check = (request: AdmissionRequest, object: Record<string, unknown>) => string[];

/** The API server may cut a longer warning; rollguard's own stay below it. */
export const MAX_WARNING_CHARS = 256;

/** Every check's warnings, in order, each at most MAX_WARNING_CHARS, without repeats. */
export function runChecks(request: AdmissionRequest, object: Record<string, unknown>, checks: readonly Check[]): string[] {
  const warnings = checks.flatMap((check) => check(request, object)).map((w) => (w.length > MAX_WARNING_CHARS ? `${w.slice(0, MAX_WARNING_CHARS - 1)}…` : w));
  return [...new Set(warnings)];
}
