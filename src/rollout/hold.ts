import type { V1StatefulSet, V1StatefulSetSpec } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import { DEFAULT_REPLICAS, isHealthGated } from './decision.js';
import { sameJson } from '../kube/json.js';

const STRATEGY_PATH = '/spec/updateStrategy';
const ROLLING_UPDATE_PATH = `${STRATEGY_PATH}/rollingUpdate`;
const PARTITION_PATH = `${ROLLING_UPDATE_PATH}/partition`;
const ROLLING_UPDATE = 'RollingUpdate';

/**
 * The partition the webhook (or the reconcile loop, from a watch event's old and new
 * object) should write so that a health-gated set rests at partition = replicas;
 * undefined to leave it as it is (including when it already is replicas).
 *
 * - CREATE (no old object), or the set just became health-gated: replicas.
 * - UPDATE that changes the spec other than partition and replicas: replicas, so
 *   that a new template rolls nothing until rollguard steps it.
 * - UPDATE that only scales: replicas when the set is at rest (currentRevision ==
 *   updateRevision); mid-rollout the partition keeps the rollout's progress.
 * - An UPDATE of the partition alone (rollguard's own steps) or of metadata: leave it.
 */
export function heldPartition(oldSet: V1StatefulSet | undefined, newSet: V1StatefulSet): number | undefined {
  if (!isHealthGated(newSet) || !rollsByPartition(newSet)) return undefined;
  const replicas = newSet.spec?.replicas ?? DEFAULT_REPLICAS;
  const held = newSet.spec?.updateStrategy?.rollingUpdate?.partition === replicas ? undefined : replicas;
  if (oldSet === undefined || !isHealthGated(oldSet)) return held;
  if (!sameJson(specBesidesScale(oldSet.spec), specBesidesScale(newSet.spec))) return held;
  const scaled = (oldSet.spec?.replicas ?? DEFAULT_REPLICAS) !== replicas;
  const atRest = newSet.status?.currentRevision === newSet.status?.updateRevision;
  return scaled && atRest ? held : undefined;
}

/**
 * JSON Patch that sets spec.updateStrategy.rollingUpdate.partition, adding the
 * objects on the way that are missing. Empty when the set does not roll by
 * partition (OnDelete) or already has that partition.
 */
export function partitionPatch(set: V1StatefulSet, partition: number): Operation[] {
  if (!set.spec || !rollsByPartition(set)) return [];
  const strategy = set.spec.updateStrategy;
  if (!strategy) {
    return [{ op: 'add', path: STRATEGY_PATH, value: { type: ROLLING_UPDATE, rollingUpdate: { partition } } }];
  }
  if (!strategy.rollingUpdate) return [{ op: 'add', path: ROLLING_UPDATE_PATH, value: { partition } }];
  const current = strategy.rollingUpdate.partition;
  if (current === undefined) return [{ op: 'add', path: PARTITION_PATH, value: partition }];
  if (current === partition) return [];
  // the test makes a step computed from a stale cache fail instead of stepping twice
  return [
    { op: 'test', path: PARTITION_PATH, value: current },
    { op: 'replace', path: PARTITION_PATH, value: partition },
  ];
}

/** An unset updateStrategy type defaults to RollingUpdate; OnDelete has no partition. */
function rollsByPartition(set: V1StatefulSet): boolean {
  const type = set.spec?.updateStrategy?.type;
  return type === undefined || type === ROLLING_UPDATE;
}

/** The spec without the fields that rollguard or a scale writes: partition and replicas. */
function specBesidesScale(spec: V1StatefulSetSpec | undefined): unknown {
  if (!spec) return undefined;
  const { replicas: _replicas, updateStrategy, ...rest } = spec;
  const { rollingUpdate, type, ...strategyRest } = updateStrategy ?? {};
  const { partition: _partition, ...rollingUpdateRest } = rollingUpdate ?? {};
  return {
    ...rest,
    updateStrategy: { ...strategyRest, type: type ?? ROLLING_UPDATE, rollingUpdate: rollingUpdateRest },
  };
}
