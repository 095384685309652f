import type { Operation } from 'fast-json-patch';
import type { Mutator } from '../admission/mutators.js';
import type { AdmissionRequest } from '../admission/review.js';
import { holdView } from '../admission/workload-view.js';
import { isJsonObject } from '../kube/json.js';
import { scaleHoldOps } from './scale-down.js';

/**
 * Holds a scale-down of a handover-enabled StatefulSet at the old replicas and records the wanted
 * count (scaleHoldOps); the leader applies it after the primary role has left the pods it removes.
 * Runs before the partition hold, which then sees no scale.
 */
export const holdScaleDownMutator: Mutator = (req: AdmissionRequest, object: Record<string, unknown>): Operation[] => {
  if (req.kind.kind !== 'StatefulSet' || req.operation !== 'UPDATE' || !isJsonObject(req.oldObject)) return [];
  return scaleHoldOps(holdView(req.oldObject), holdView(object));
};
