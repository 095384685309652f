import type { Operation } from 'fast-json-patch';
import type { Mutator } from '../admission/mutators.js';
import type { AdmissionRequest } from '../admission/review.js';
import { holdView } from '../admission/workload-view.js';
import { isJsonObject } from '../kube/json.js';
import { heldPartition, partitionPatch } from './hold.js';

/**
 * Holds a health-gated StatefulSet at partition = replicas at admission: on CREATE, and on
 * an UPDATE that changes the spec (a new template rolls nothing until rollguard steps it).
 * The object is the wire JSON; heldPartition and partitionPatch read it through holdView, a
 * V1StatefulSet in which the fields they read have their types or are absent.
 */
export const holdPartitionMutator: Mutator = (req: AdmissionRequest, object: Record<string, unknown>): Operation[] => {
  if (req.kind.kind !== 'StatefulSet' || (req.operation !== 'CREATE' && req.operation !== 'UPDATE')) return [];
  const set = holdView(object);
  const oldSet = req.operation === 'UPDATE' && isJsonObject(req.oldObject) ? holdView(req.oldObject) : undefined;
  const held = heldPartition(oldSet, set);
  return held === undefined ? [] : partitionPatch(set, held);
};
