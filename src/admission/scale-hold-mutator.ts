import type { Operation } from 'fast-json-patch';
import { isJsonObject } from '../kube/json.js';
import { scaleHoldOps } from '../handover/scale-down.js';
import type { Mutator } from './mutators.js';
import { holdView } from './workload-view.js';
import type { AdmissionRequest } from './review.js';

/**
 * Holds a scale-down of a handover-enabled StatefulSet at the old replicas and records the wanted
 * count (scaleHoldOps); the leader applies it after the primary role has left the pods it removes.
 * Runs before the partition hold, which then sees no scale.
 */
export const holdScaleDownMutator: Mutator = (req: AdmissionRequest, object: Record<string, unknown>): Operation[] => {
  if (req.kind.kind !== 'StatefulSet' || req.operation !== 'UPDATE' || !isJsonObject(req.oldObject)) return [];
  return scaleHoldOps(holdView(req.oldObject), holdView(object));
};
