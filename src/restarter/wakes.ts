import type { V1StatefulSet } from '@kubernetes/client-node';
import type { MetadataEvent } from '../kube/metadata-cache.js';
import type { ObjectEvent } from '../kube/object-store.js';
import { objectKey } from '../kube/informer.js';
import { referencedObjects, type Reference } from './references.js';

/** What one StatefulSet event means for the reverse index and the queue. */
export interface SetEventEffect {
  key: string;
  /** 'remove': drop the set from the index; references: replace its entry; undefined: keep it. */
  index?: 'remove' | Reference[];
  /** Reconcile the set (debounced). */
  wake: boolean;
}

function keyOf(set: V1StatefulSet | undefined): string {
  return objectKey(set?.metadata?.namespace ?? '', set?.metadata?.name ?? '');
}

function sameAnnotations(a: V1StatefulSet | undefined, b: V1StatefulSet): boolean {
  return JSON.stringify(a?.metadata?.annotations ?? {}) === JSON.stringify(b.metadata?.annotations ?? {});
}

/**
 * A set's references can only change with its template, and a template change bumps the
 * generation; status writes (every pod that turns Ready) change neither, so they wake nothing.
 * A set deleted and created again under the same name (one update, when a relist folds the two)
 * is another object: its generation may be 1 again, its uid is not. The set's own annotations
 * hold its opt-outs: a change of them wakes it too.
 */
export function statefulSetEventEffect(event: ObjectEvent<V1StatefulSet>): SetEventEffect {
  const { previous, current } = event;
  if (!current) return { key: keyOf(previous), index: 'remove', wake: false };
  const key = keyOf(current);
  const templateChanged =
    !previous || previous.metadata?.uid !== current.metadata?.uid || previous.metadata?.generation !== current.metadata?.generation;
  const wake = templateChanged || !sameAnnotations(previous, current);
  return templateChanged ? { key, index: referencedObjects(current.spec?.template), wake } : { key, wake };
}

/** An ignored object stays untracked whatever its version: only a change of its ignore label wakes its referrers. */
export function objectEventWakesReferrers(event: MetadataEvent): boolean {
  return !(event.previous?.ignored && event.current?.ignored);
}
