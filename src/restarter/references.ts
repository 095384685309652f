import { arrayOrEmpty, jsonObjectOrUndefined } from '../kube/json.js';

export type ObjectKind = 'ConfigMap' | 'Secret';

export interface Reference {
  kind: ObjectKind;
  name: string;
}

/** Where a pod template reads an object from. */
export type ReadVia = 'volume' | 'projected volume' | 'env' | 'envFrom';

/** One place a template reads an object: all its keys, or the named ones (`items`, a key ref). */
export interface Read {
  via: ReadVia;
  /** undefined: every key */
  keys?: string[];
  /** `optional: true`: a pod starts without the object (or, for a key ref or `items`, without the key). */
  optional?: boolean;
  /** The volume's name, for a read through a volume (plain or projected). */
  volume?: string;
}

/**
 * A reference's name, already checked: a non-empty string (anything else references nothing).
 * `read` is built only when the walk was asked for reads; else it is NO_READ.
 */
type Visit = (kind: ObjectKind, name: string, read: Read) => void;

/** What a walk asked for names only (referencedObjects) passes instead of building each Read. */
const NO_READ: Read = Object.freeze({ via: 'env' });

// The template may be the wire JSON of an admission review, not yet validated by anyone:
// every field is read as unknown, and one of the wrong type counts as absent. Each field is read
// by its name where it is read (`asObject(env)?.valueFrom`), not through a helper taking the key:
// one property lookup per call site is what V8 keeps fast, and the walk halved (bench/admission-steps).
const asObject = jsonObjectOrUndefined;

/** A name that references an object: a non-empty string. */
const isName = (name: unknown): name is string => typeof name === 'string' && name !== '';

/** The keys a volume source's `items` names; undefined (every key) without items. */
function itemKeys(source: unknown): string[] | undefined {
  const items = asObject(source)?.items;
  if (!Array.isArray(items) || items.length === 0) return undefined;
  return items.map((item) => asObject(item)?.key).filter((key): key is string => typeof key === 'string');
}

// Each walk below reads a name first and builds the Read only for a real one, and only when the
// caller wants reads (`reads`): a review's template has a hundred env entries, most naming no
// ConfigMap and no Secret, and it is walked on every review.

/** A read through a volume (plain or projected) of `source`, a volume source whose name is checked. */
function volumeRead(via: 'volume' | 'projected volume', source: unknown, volumeName: unknown): Read {
  const read: Read = { via, keys: itemKeys(source) };
  if (isOptional(source)) read.optional = true;
  if (typeof volumeName === 'string') read.volume = volumeName;
  return read;
}

function visitVolumes(volumes: unknown, visit: Visit, projected: boolean, reads: boolean): void {
  for (const item of arrayOrEmpty(volumes)) {
    const volume = asObject(item);
    const configMap = volume?.configMap;
    const secret = volume?.secret;
    const volumeName = volume?.name;
    const configMapName = asObject(configMap)?.name;
    if (isName(configMapName)) visit('ConfigMap', configMapName, reads ? volumeRead('volume', configMap, volumeName) : NO_READ);
    const secretName = asObject(secret)?.secretName;
    if (isName(secretName)) visit('Secret', secretName, reads ? volumeRead('volume', secret, volumeName) : NO_READ);
    if (!projected) continue;
    for (const item of arrayOrEmpty(asObject(volume?.projected)?.sources)) {
      const source = asObject(item);
      const projectedConfigMap = source?.configMap;
      const projectedConfigMapName = asObject(projectedConfigMap)?.name;
      if (isName(projectedConfigMapName)) visit('ConfigMap', projectedConfigMapName, reads ? volumeRead('projected volume', projectedConfigMap, volumeName) : NO_READ);
      const projectedSecret = source?.secret;
      const projectedSecretName = asObject(projectedSecret)?.name;
      if (isName(projectedSecretName)) visit('Secret', projectedSecretName, reads ? volumeRead('projected volume', projectedSecret, volumeName) : NO_READ);
    }
  }
}

/** `optional: true` of a source; anything else (absent, false, a value of the wrong type) is required, as the kubelet reads it. */
function isOptional(source: unknown): boolean {
  return asObject(source)?.optional === true;
}

function keyRead(ref: unknown): Read {
  const key = asObject(ref)?.key;
  const read: Read = { via: 'env', keys: typeof key === 'string' ? [key] : [] };
  if (isOptional(ref)) read.optional = true;
  return read;
}

function envFromRead(ref: unknown): Read {
  return isOptional(ref) ? { via: 'envFrom', optional: true } : { via: 'envFrom' };
}

function visitContainers(containers: unknown, visit: Visit, reads: boolean): void {
  for (const item of arrayOrEmpty(containers)) {
    const container = asObject(item);
    for (const env of arrayOrEmpty(container?.env)) {
      const valueFrom = asObject(asObject(env)?.valueFrom);
      if (valueFrom === undefined) continue;
      const configMapKeyRef = valueFrom.configMapKeyRef;
      const configMapName = asObject(configMapKeyRef)?.name;
      if (isName(configMapName)) visit('ConfigMap', configMapName, reads ? keyRead(configMapKeyRef) : NO_READ);
      const secretKeyRef = valueFrom.secretKeyRef;
      const secretName = asObject(secretKeyRef)?.name;
      if (isName(secretName)) visit('Secret', secretName, reads ? keyRead(secretKeyRef) : NO_READ);
    }
    for (const item of arrayOrEmpty(container?.envFrom)) {
      const source = asObject(item);
      const configMapRef = source?.configMapRef;
      const configMapName = asObject(configMapRef)?.name;
      if (isName(configMapName)) visit('ConfigMap', configMapName, reads ? envFromRead(configMapRef) : NO_READ);
      const secretRef = source?.secretRef;
      const secretName = asObject(secretRef)?.name;
      if (isName(secretName)) visit('Secret', secretName, reads ? envFromRead(secretRef) : NO_READ);
    }
  }
}

function visitTemplate(template: unknown, visit: Visit, projected: boolean, reads: boolean): void {
  const spec = asObject(asObject(template)?.spec);
  visitVolumes(spec?.volumes, visit, projected, reads);
  visitContainers(spec?.initContainers, visit, reads);
  visitContainers(spec?.containers, visit, reads);
}

// Code-unit order, not locale order: the result must be the same on every replica.
function byKindThenName(a: Reference, b: Reference): number {
  return a.kind !== b.kind ? (a.kind < b.kind ? -1 : 1) : a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
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
  // a set of names per kind: no `Kind/name` string built per reference read
  const found: Record<ObjectKind, Set<string>> = { ConfigMap: new Set(), Secret: new Set() };
  visitTemplate(template, (kind, name) => void found[kind].add(name), options.projected ?? true, false);
  const references: Reference[] = [];
  for (const kind of ['ConfigMap', 'Secret'] as const) for (const name of found[kind]) references.push({ kind, name });
  return references.sort(byKindThenName);
}

/** A referenced object with every place the template reads it. */
export interface ReferenceReads extends Reference {
  reads: Read[];
  /** The keys read: undefined when some read takes every key; else the union of the named ones, sorted. */
  keys?: string[];
}

/** referencedObjects, each with where and which keys the template reads of it (`rollguard why` shows them). */
export function referenceReads(template: unknown, options: { projected?: boolean } = {}): ReferenceReads[] {
  const found = new Map<string, ReferenceReads>();
  visitTemplate(
    template,
    (kind, name, read) => {
      const id = `${kind}/${name}`;
      const entry = found.get(id) ?? { kind, name, reads: [] };
      entry.reads.push(read);
      found.set(id, entry);
    },
    options.projected ?? true,
    true,
  );
  return [...found.values()].sort(byKindThenName).map((entry) => {
    const all = entry.reads.some((r) => r.keys === undefined);
    return all ? entry : { ...entry, keys: [...new Set(entry.reads.flatMap((r) => r.keys ?? []))].sort() };
  });
}

/** The keys a template reads of one object: `all` (envFrom, a volume without items) or the named ones (key refs, `items`). */
export type ReadKeys = 'all' | readonly string[];

/** Whether a change of the data keys `changed` reaches a template that reads `reads`: the changed keys it reads (`all`: every one). */
export function readKeysChanged(changed: readonly string[], reads: ReadKeys): string[] {
  return reads === 'all' ? [...changed] : changed.filter((key) => reads.includes(key));
}

/** The keys the template reads of each object it references, by `Kind/name`: referenceReads, with `all` where some read takes every key. */
export function keysRead(template: unknown, options: { projected?: boolean } = {}): Map<string, ReadKeys> {
  return new Map(referenceReads(template, options).map((r) => [`${r.kind}/${r.name}`, r.keys ?? 'all']));
}

/**
 * What a pod of the template cannot start without, of one object: the object itself (some read
 * of it is not `optional: true`), and the keys that such reads name (a key ref, a volume's
 * `items`). A pod whose required object or key is missing does not start
 * (CreateContainerConfigError, or a volume that cannot mount).
 */
export interface Requirement {
  object: boolean;
  /** sorted */
  keys: string[];
}

const NOTHING_REQUIRED: Requirement = { object: false, keys: [] };

/** The template's requirements of each object it references, by `Kind/name`; an object it reads only optionally requires nothing. */
export function requirements(template: unknown, options: { projected?: boolean } = {}): Map<string, Requirement> {
  return new Map(
    referenceReads(template, options).map((r) => {
      const required = r.reads.filter((read) => read.optional !== true);
      const keys = [...new Set(required.flatMap((read) => read.keys ?? []))].sort();
      return [`${r.kind}/${r.name}`, required.length === 0 ? NOTHING_REQUIRED : { object: true, keys }];
    }),
  );
}

/** The keys of `required` that a data read without folding (`present`: its data keys) lacks, sorted. */
export function missingKeys(required: Requirement, present: readonly string[]): string[] {
  const have = new Set(present);
  return required.keys.filter((key) => !have.has(key));
}

/**
 * The names of the template's volumes that a container or init container mounts with `subPath`
 * or `subPathExpr`: the kubelet never updates such a mount in a running container.
 */
function subPathVolumes(template: unknown): Set<string> {
  const spec = asObject(asObject(template)?.spec);
  const names = new Set<string>();
  for (const containers of [spec?.initContainers, spec?.containers]) {
    for (const container of arrayOrEmpty(containers)) {
      for (const item of arrayOrEmpty(asObject(container)?.volumeMounts)) {
        const mount = asObject(item);
        const name = mount?.name;
        const sub = mount?.subPath ?? mount?.subPathExpr;
        if (typeof name === 'string' && typeof sub === 'string' && sub !== '') names.add(name);
      }
    }
  }
  return names;
}

/**
 * The keys of each object that the template reads where a running pod never sees a change (env,
 * envFrom, a volume mounted with `subPath`), by `Kind/name`: `all`, or the named keys (empty: every
 * read is through a volume mounted whole, which the kubelet updates in place).
 */
export function restartKeys(template: unknown, options: { projected?: boolean } = {}): Map<string, ReadKeys> {
  const sub = subPathVolumes(template);
  return new Map(
    referenceReads(template, options).map((r) => {
      const fixed = r.reads.filter((read) => read.via === 'env' || read.via === 'envFrom' || read.volume === undefined || sub.has(read.volume));
      const keys: ReadKeys = fixed.some((read) => read.keys === undefined) ? 'all' : [...new Set(fixed.flatMap((read) => read.keys ?? []))].sort();
      return [`${r.kind}/${r.name}`, keys];
    }),
  );
}
