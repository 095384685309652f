import type { V1Container, V1PodTemplateSpec, V1Volume } from '@kubernetes/client-node';
import type { WorkloadKind } from '../../src/kube/workloads.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { daemonSet, deployment, statefulSet } from '../env/cluster.js';
import type { AnyWorkload } from '../env/workload-rollouts.js';

// The small world the model checker plays in: few names, so that operations collide (a set
// reads what another set reads, a clone lands where a set was deleted, a key comes back).

export type ObjectKind = 'ConfigMap' | 'Secret';
export const OBJECT_KINDS: readonly ObjectKind[] = ['ConfigMap', 'Secret'];
export const OBJECT_NAMES = ['cfg-a', 'cfg-b'] as const;
export const DATA_KEYS = ['k1', 'k2', 'k3'] as const;
export const DATA_VALUES = ['x', 'y', 'z'] as const;
export const SET_NAMES = ['app-a', 'app-b'] as const;
export const WORKLOAD_KINDS: readonly WorkloadKind[] = ['StatefulSet', 'Deployment', 'DaemonSet'];

/** How one template reads one object, the shapes users write most. */
export type ReadShape = 'envFrom' | 'volume' | 'keyRef' | 'items';

export interface ReferenceChoice {
  kind: ObjectKind;
  name: string;
  shape: ReadShape;
  /** the key a keyRef or items names */
  key: string;
  optional: boolean;
}

/** What a template reads of one object, merged over every place it reads it. */
export interface ObjectRead {
  kind: ObjectKind;
  name: string;
  /** undefined: every key */
  keys: Set<string> | undefined;
  /** some read of it is not optional */
  required: boolean;
  /** keys a non-optional key ref or items reads */
  requiredKeys: Set<string>;
}

const objectKey = (kind: ObjectKind, name: string): string => `${kind}/${name}`;

/** The checker's own walk of a template (not rollguard's: the oracle must not share the code it checks). */
export function readsOf(template: V1PodTemplateSpec | undefined): Map<string, ObjectRead> {
  const out = new Map<string, ObjectRead>();
  const add = (kind: ObjectKind, name: string | undefined, keys: string[] | undefined, optional: boolean): void => {
    if (!name) return;
    const k = objectKey(kind, name);
    const read = out.get(k) ?? { kind, name, keys: new Set<string>(), required: false, requiredKeys: new Set<string>() };
    if (keys === undefined) read.keys = undefined;
    else if (read.keys) for (const key of keys) read.keys.add(key);
    if (!optional) {
      read.required = true;
      for (const key of keys ?? []) read.requiredKeys.add(key);
    }
    out.set(k, read);
  };
  const spec = template?.spec;
  const volumes: V1Volume[] = spec?.volumes ?? [];
  for (const v of volumes) {
    const items = (list: { key: string }[] | undefined): string[] | undefined => (list && list.length > 0 ? list.map((i) => i.key) : undefined);
    if (v.configMap) add('ConfigMap', v.configMap.name, items(v.configMap.items), v.configMap.optional === true);
    if (v.secret) add('Secret', v.secret.secretName, items(v.secret.items), v.secret.optional === true);
  }
  const containers: V1Container[] = [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])];
  for (const c of containers) {
    for (const e of c.env ?? []) {
      const cm = e.valueFrom?.configMapKeyRef;
      const sec = e.valueFrom?.secretKeyRef;
      if (cm) add('ConfigMap', cm.name, [cm.key], cm.optional === true);
      if (sec) add('Secret', sec.name, [sec.key], sec.optional === true);
    }
    for (const f of c.envFrom ?? []) {
      if (f.configMapRef) add('ConfigMap', f.configMapRef.name, undefined, f.configMapRef.optional === true);
      if (f.secretRef) add('Secret', f.secretRef.name, undefined, f.secretRef.optional === true);
    }
  }
  return out;
}

/** A manifest as a user keeps it in git: opted in, reading what `refs` say, no rollguard annotations. */
export function manifest(kind: WorkloadKind, name: string, refs: readonly ReferenceChoice[], image: string, replicas: number): AnyWorkload {
  const labels = { [ENABLED_LABEL]: 'true' };
  const w: AnyWorkload =
    kind === 'StatefulSet' ? statefulSet(name, { replicas, labels, image }) : kind === 'Deployment' ? deployment(name, { replicas, labels, image }) : daemonSet(name, { labels, image });
  const spec = w.spec!.template.spec!;
  const container = spec.containers[0]!;
  refs.forEach((r, i) => {
    const optional = r.optional ? { optional: true } : {};
    if (r.shape === 'envFrom') {
      (container.envFrom ??= []).push(r.kind === 'ConfigMap' ? { configMapRef: { name: r.name, ...optional } } : { secretRef: { name: r.name, ...optional } });
    } else if (r.shape === 'keyRef') {
      const ref = { name: r.name, key: r.key, ...optional };
      (container.env ??= []).push({ name: `V${i}`, valueFrom: r.kind === 'ConfigMap' ? { configMapKeyRef: ref } : { secretKeyRef: ref } });
    } else {
      const items = r.shape === 'items' ? { items: [{ key: r.key, path: r.key }] } : {};
      const volume = `v${i}`;
      (spec.volumes ??= []).push(r.kind === 'ConfigMap' ? { name: volume, configMap: { name: r.name, ...items, ...optional } } : { name: volume, secret: { secretName: r.name, ...items, ...optional } });
      (container.volumeMounts ??= []).push({ name: volume, mountPath: `/m/${volume}` });
    }
  });
  return w;
}

/** One version of an object as the checker saw it; `data` undefined: the object does not exist. */
export interface ObjectData {
  data: Record<string, string> | undefined;
}

/** What a pod reading `read` sees of `data`: the keys it reads, or the whole object. */
export function viewOf(data: Record<string, string> | undefined, read: Pick<ObjectRead, 'keys'>): string {
  if (data === undefined) return 'absent';
  const keys = read.keys ? [...read.keys].sort() : Object.keys(data).sort();
  return JSON.stringify(keys.map((k) => [k, data[k] ?? null]));
}

/** Whether a pod reading `read` can start with `data`: a required object exists, a required key is in it. */
export function startable(data: Record<string, string> | undefined, read: ObjectRead): boolean {
  if (!read.required) return true;
  if (data === undefined) return false;
  return [...read.requiredKeys].every((k) => k in data);
}
