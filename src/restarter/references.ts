import type { V1Container, V1PodTemplateSpec, V1Volume } from '@kubernetes/client-node';

export type ObjectKind = 'ConfigMap' | 'Secret';

export interface Reference {
  kind: ObjectKind;
  name: string;
}

type Visit = (kind: ObjectKind, name: string | undefined) => void;

function visitVolumes(volumes: V1Volume[], visit: Visit): void {
  for (const volume of volumes) {
    if (volume.configMap) visit('ConfigMap', volume.configMap.name);
    if (volume.secret) visit('Secret', volume.secret.secretName);
    for (const source of volume.projected?.sources ?? []) {
      if (source.configMap) visit('ConfigMap', source.configMap.name);
      if (source.secret) visit('Secret', source.secret.name);
    }
  }
}

function visitContainers(containers: V1Container[], visit: Visit): void {
  for (const container of containers) {
    for (const env of container.env ?? []) {
      const configMapRef = env.valueFrom?.configMapKeyRef;
      if (configMapRef) visit('ConfigMap', configMapRef.name);
      const secretRef = env.valueFrom?.secretKeyRef;
      if (secretRef) visit('Secret', secretRef.name);
    }
    for (const source of container.envFrom ?? []) {
      if (source.configMapRef) visit('ConfigMap', source.configMapRef.name);
      if (source.secretRef) visit('Secret', source.secretRef.name);
    }
  }
}

/**
 * Every ConfigMap and Secret the pod template references, in the same namespace:
 * volumes (plain and projected), env value sources and envFrom, of containers and
 * init containers (sidecars are init containers). Ephemeral containers cannot be
 * part of a template. One entry per (kind, name), sorted by kind then name.
 */
export function referencedObjects(template: V1PodTemplateSpec | undefined): Reference[] {
  const found = new Map<string, Reference>();
  const visit: Visit = (kind, name) => {
    if (!name) return;
    const id = `${kind}/${name}`;
    if (!found.has(id)) found.set(id, { kind, name });
  };

  const spec = template?.spec;
  if (spec) {
    visitVolumes(spec.volumes ?? [], visit);
    visitContainers(spec.initContainers ?? [], visit);
    visitContainers(spec.containers ?? [], visit);
  }

  // Code-unit order, not locale order: the result must be the same on every replica.
  return [...found.values()].sort((a, b) =>
    a.kind !== b.kind ? (a.kind < b.kind ? -1 : 1) : a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
}
