import type { V1ObjectMeta } from '@kubernetes/client-node';
import type { ReflectorStore } from './reflector.js';

export interface StoredObject {
  metadata?: V1ObjectMeta;
}

export type ObjectEventType = 'added' | 'updated' | 'deleted';

export interface ObjectEvent<T> {
  type: ObjectEventType;
  /** undefined when added. */
  previous?: T;
  /** undefined when deleted. */
  current?: T;
}

function placeOf(object: StoredObject): { namespace: string; name: string } {
  const namespace = object.metadata?.namespace ?? '';
  const name = object.metadata?.name;
  if (!name) throw new Error(`object in namespace "${namespace}" has no metadata.name`);
  return { namespace, name };
}

/** Whole typed objects by namespace and name, with an event for every change a list or watch reveals. */
export class ObjectStore<T extends StoredObject> implements ReflectorStore<T> {
  private readonly byNamespace = new Map<string, Map<string, T>>();
  private readonly listeners: ((event: ObjectEvent<T>) => void)[] = [];
  private count = 0;

  onEvent(listener: (event: ObjectEvent<T>) => void): void {
    this.listeners.push(listener);
  }

  get(namespace: string, name: string): T | undefined {
    return this.byNamespace.get(namespace)?.get(name);
  }

  list(): T[] {
    const all: T[] = [];
    for (const names of this.byNamespace.values()) all.push(...names.values());
    return all;
  }

  size(): number {
    return this.count;
  }

  replace(items: T[], namespace: string | undefined): void {
    const fresh = new Set(items.map((item) => {
      const { namespace: ns, name } = placeOf(item);
      return `${ns}/${name}`;
    }));
    const scope = namespace === undefined ? [...this.byNamespace.keys()] : [namespace];
    for (const ns of scope) {
      for (const [name, object] of this.byNamespace.get(ns) ?? []) {
        if (!fresh.has(`${ns}/${name}`)) this.remove(object);
      }
    }
    for (const item of items) this.upsert(item);
  }

  upsert(item: T): void {
    const { namespace, name } = placeOf(item);
    let names = this.byNamespace.get(namespace);
    if (!names) this.byNamespace.set(namespace, (names = new Map()));
    const previous = names.get(name);
    // A relist hands back objects the store already holds; only a new resourceVersion is a change.
    if (previous && previous.metadata?.resourceVersion === item.metadata?.resourceVersion) return;
    names.set(name, item);
    if (!previous) this.count++;
    this.emit({ type: previous ? 'updated' : 'added', previous, current: item });
  }

  remove(item: T): void {
    const { namespace, name } = placeOf(item);
    const names = this.byNamespace.get(namespace);
    const previous = names?.get(name);
    if (!names || !previous) return;
    names.delete(name);
    this.count--;
    if (names.size === 0) this.byNamespace.delete(namespace);
    this.emit({ type: 'deleted', previous });
  }

  private emit(event: ObjectEvent<T>): void {
    for (const listener of this.listeners) listener(event);
  }
}
