import type { ObjectKind, Reference } from './references.js';

function objectId(kind: ObjectKind, namespace: string, name: string): string {
  return `${kind}/${namespace}/${name}`;
}

/**
 * Which workloads reference each ConfigMap and Secret: (kind, namespace, name) to the keys of
 * the workloads (`Kind/namespace/name`, one index across StatefulSets, Deployments and
 * DaemonSets), so a change to one object wakes only the workloads that use it.
 */
export class ReverseIndex {
  private readonly referrers = new Map<string, Set<string>>();
  private readonly references = new Map<string, string[]>();

  /** Replaces what the set `setKey` (in `namespace`) references. */
  setReferences(setKey: string, namespace: string, refs: readonly Reference[]): void {
    this.removeSet(setKey);
    if (refs.length === 0) return;
    const ids = refs.map((ref) => objectId(ref.kind, namespace, ref.name));
    for (const id of ids) {
      let sets = this.referrers.get(id);
      if (!sets) this.referrers.set(id, (sets = new Set()));
      sets.add(setKey);
    }
    this.references.set(setKey, ids);
  }

  removeSet(setKey: string): void {
    for (const id of this.references.get(setKey) ?? []) {
      const sets = this.referrers.get(id);
      sets?.delete(setKey);
      if (sets?.size === 0) this.referrers.delete(id);
    }
    this.references.delete(setKey);
  }

  /** Keys of the sets that reference the object, in no particular order. */
  referrersOf(kind: ObjectKind, namespace: string, name: string): string[] {
    return [...(this.referrers.get(objectId(kind, namespace, name)) ?? [])];
  }

  /** How many sets and how many distinct objects the index holds. */
  size(): { sets: number; objects: number } {
    return { sets: this.references.size, objects: this.referrers.size };
  }
}
