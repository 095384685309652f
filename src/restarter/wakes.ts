import type { MetadataEvent } from '../kube/metadata-cache.js';
import type { ObjectEvent } from '../kube/object-store.js';
import { workloadKey, type Workload, type WorkloadKind } from '../kube/workloads.js';
import { referencedObjects, type Reference } from './references.js';

/** What one workload event means for the reverse index and the queue. */
export interface WorkloadEventEffect {
  /** `Kind/namespace/name` */
  key: string;
  /** 'remove': drop the workload from the index; references: replace its entry; undefined: keep it. */
  index?: 'remove' | Reference[];
  /** Reconcile the workload (debounced). */
  wake: boolean;
}

function keyOf(kind: WorkloadKind, workload: Workload | undefined): string {
  return workloadKey(kind, workload?.metadata?.namespace ?? '', workload?.metadata?.name ?? '');
}

function sameAnnotations(a: Workload | undefined, b: Workload): boolean {
  return JSON.stringify(a?.metadata?.annotations ?? {}) === JSON.stringify(b.metadata?.annotations ?? {});
}

/**
 * A workload's references can only change with its template, and a template change bumps the
 * generation (in all three kinds); status writes (every pod that turns Ready) change neither, so
 * they wake nothing. A workload deleted and created again under the same name (one update, when a
 * relist folds the two) is another object: its generation may be 1 again, its uid is not. The
 * workload's own annotations hold its opt-outs: a change of them wakes it too.
 */
export function workloadEventEffect(kind: WorkloadKind, event: ObjectEvent<Workload>): WorkloadEventEffect {
  const { previous, current } = event;
  if (!current) return { key: keyOf(kind, previous), index: 'remove', wake: false };
  const key = keyOf(kind, current);
  const templateChanged =
    !previous || previous.metadata?.uid !== current.metadata?.uid || previous.metadata?.generation !== current.metadata?.generation;
  const wake = templateChanged || !sameAnnotations(previous, current);
  return templateChanged ? { key, index: referencedObjects(current.spec?.template), wake } : { key, wake };
}

/** An ignored object stays untracked whatever its version: only a change of its ignore label wakes its referrers. */
export function objectEventWakesReferrers(event: MetadataEvent): boolean {
  return !(event.previous?.ignored && event.current?.ignored);
}
