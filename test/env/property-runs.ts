import type { Parameters } from 'fast-check';

/**
 * The seed of every property test: fixed, so a run is reproducible, and overridden with
 * ROLLGUARD_PROPERTY_SEED to explore. On failure fast-check prints the seed and the path
 * of the shrunk counterexample; rerun with that seed to replay it.
 */
export const PROPERTY_SEED = Number(process.env.ROLLGUARD_PROPERTY_SEED ?? 20261201);

/** fast-check parameters for one property: the shared seed and `numRuns` generated cases. */
export function propertyRuns<T>(numRuns: number): Parameters<T> {
  if (!Number.isSafeInteger(PROPERTY_SEED)) throw new Error(`ROLLGUARD_PROPERTY_SEED: expected an integer, got ${process.env.ROLLGUARD_PROPERTY_SEED}`);
  return { seed: PROPERTY_SEED, numRuns };
}
