import { arrayOrEmpty, jsonObjectOrUndefined } from '../kube/json.js';

export type ObjectKind = 'ConfigMap' | 'Secret';

export interface Reference {
  kind: ObjectKind;
  name: string;
}

type Visit = (kind: ObjectKind, name: unknown) => void;

// The template may be the wire JSON of an admission review, not yet validated by anyone:
// every field is read as unknown, and one of the wrong type counts as absent.
const field = (value: unknown, key: string): unknown => jsonObjectOrUndefined(value)?.[key];

function visitVolumes(volumes: unknown, visit: Visit, projected: boolean): void {
  for (const volume of arrayOrEmpty(volumes)) {
    visit('ConfigMap', field(field(volume, 'configMap'), 'name'));
    visit('Secret', field(field(volume, 'secret'), 'secretName'));
    if (!projected) continue;
    for (const source of arrayOrEmpty(field(field(volume, 'projected'), 'sources'))) {
      visit('ConfigMap', field(field(source, 'configMap'), 'name'));
      visit('Secret', field(field(source, 'secret'), 'name'));
    }
  }
}

function visitContainers(containers: unknown, visit: Visit): void {
  for (const container of arrayOrEmpty(containers)) {
    for (const env of arrayOrEmpty(field(container, 'env'))) {
      const valueFrom = field(env, 'valueFrom');
      visit('ConfigMap', field(field(valueFrom, 'configMapKeyRef'), 'name'));
      visit('Secret', field(field(valueFrom, 'secretKeyRef'), 'name'));
    }
    for (const source of arrayOrEmpty(field(container, 'envFrom'))) {
      visit('ConfigMap', field(field(source, 'configMapRef'), 'name'));
      visit('Secret', field(field(source, 'secretRef'), 'name'));
    }
  }
}

/**
 * Every ConfigMap and Secret the pod template references, in the same namespace:
 * volumes (plain and projected), env value sources and envFrom, of containers and
 * init containers (sidecars are init containers). Ephemeral containers cannot be
 * part of a template. One entry per (kind, name), sorted by kind then name.
 * `template` is a V1PodTemplateSpec or the wire JSON of one; a field of the wrong type
 * (a list that is not an array, a name that is not a string) counts as absent.
 * `projected: false` leaves projected volumes out (the Stackable dialect does not track them).
 */
export function referencedObjects(template: unknown, options: { projected?: boolean } = {}): Reference[] {
  const found = new Map<string, Reference>();
  const visit: Visit = (kind, name) => {
    if (typeof name !== 'string' || name === '') return;
    const id = `${kind}/${name}`;
    if (!found.has(id)) found.set(id, { kind, name });
  };

  const spec = field(template, 'spec');
  visitVolumes(field(spec, 'volumes'), visit, options.projected ?? true);
  visitContainers(field(spec, 'initContainers'), visit);
  visitContainers(field(spec, 'containers'), visit);

  // Code-unit order, not locale order: the result must be the same on every replica.
  return [...found.values()].sort((a, b) =>
    a.kind !== b.kind ? (a.kind < b.kind ? -1 : 1) : a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
}
