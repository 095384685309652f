import type { V1StatefulSet } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import type { AdmissionRequest } from '../restarter/admission-review.js';
import type { TemplateMutator } from '../restarter/admission.js';
import { heldPartition, partitionPatch } from './hold.js';

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Holds a health-gated StatefulSet at partition = replicas at admission: on CREATE, and on
 * an UPDATE that changes the spec (a new template rolls nothing until rollguard steps it).
 * The object is the wire JSON; heldPartition and partitionPatch read it as a V1StatefulSet,
 * which it is but for dates as strings, and they read no dates.
 */
export const holdPartitionMutator: TemplateMutator = (req: AdmissionRequest, object: Record<string, unknown>): Operation[] => {
  if (req.operation !== 'CREATE' && req.operation !== 'UPDATE') return [];
  const set = object as V1StatefulSet;
  const oldSet = req.operation === 'UPDATE' && isRecord(req.oldObject) ? (req.oldObject as V1StatefulSet) : undefined;
  const held = heldPartition(oldSet, set);
  return held === undefined ? [] : partitionPatch(set, held);
};
