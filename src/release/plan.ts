import type { V1StatefulSet } from '@kubernetes/client-node';
import jsonpatch, { type Operation } from 'fast-json-patch';
import { HEALTH_GATED_ANNOTATION, isHealthGated } from '../rollout/decision.js';

/** What `rollguard release` does to one set: hand its partition back and end the health gate. */
export interface Release {
  namespace: string;
  name: string;
  /** The partition now; undefined when none is set. */
  partition?: number;
  ops: Operation[];
}

/**
 * For a health-gated set: partition → 0 (the StatefulSet controller then rolls on its own, as it
 * would without rollguard) and the `rollguard.io/rollout` annotation removed, so that a rollguard
 * still running leaves the partition alone (docs/migrating.md "Uninstalling rollguard"). The patch tests the
 * resourceVersion it was planned from. Undefined for any other set.
 */
export function releaseOf(set: V1StatefulSet): Release | undefined {
  if (!isHealthGated(set)) return undefined;
  const namespace = set.metadata?.namespace ?? '';
  const name = set.metadata?.name ?? '';
  const partition = set.spec?.updateStrategy?.rollingUpdate?.partition;
  const ops: Operation[] = [
    { op: 'test', path: '/metadata/resourceVersion', value: set.metadata?.resourceVersion ?? '' },
    { op: 'remove', path: `/metadata/annotations/${jsonpatch.escapePathComponent(HEALTH_GATED_ANNOTATION)}` },
  ];
  // OnDelete has no partition; an unset one is 0 already
  if (partition !== undefined && partition !== 0 && set.spec?.updateStrategy?.type !== 'OnDelete') {
    ops.push({ op: 'replace', path: '/spec/updateStrategy/rollingUpdate/partition', value: 0 });
  }
  return { namespace, name, partition, ops };
}
