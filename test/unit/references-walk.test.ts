import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { referencedObjects, referenceReads, type ObjectKind, type Read, type Reference, type ReferenceReads } from '../../src/restarter/references.js';
import { propertyRuns } from '../env/property-runs.js';

// --- the walk as it was before it was made cheaper (dfc4207^): the model the new one must equal ---

type ModelVisit = (kind: ObjectKind, name: unknown, read: Read) => void;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const field = (value: unknown, key: string): unknown => (isObject(value) ? value[key] : undefined);
const list = (value: unknown): readonly unknown[] => (Array.isArray(value) ? value : []);
function itemKeys(source: unknown): string[] | undefined {
  const items = field(source, 'items');
  if (!Array.isArray(items) || items.length === 0) return undefined;
  return items.map((item) => field(item, 'key')).filter((key): key is string => typeof key === 'string');
}
const optionalOf = (source: unknown): { optional?: true } => (field(source, 'optional') === true ? { optional: true } : {});
function keyRead(ref: unknown): Read {
  const key = field(ref, 'key');
  return { via: 'env', keys: typeof key === 'string' ? [key] : [], ...optionalOf(ref) };
}
function modelVisitTemplate(template: unknown, visit: ModelVisit, projected: boolean): void {
  const spec = field(template, 'spec');
  for (const volume of list(field(spec, 'volumes'))) {
    const configMap = field(volume, 'configMap');
    const secret = field(volume, 'secret');
    const volumeName = field(volume, 'name');
    const named = typeof volumeName === 'string' ? { volume: volumeName } : {};
    visit('ConfigMap', field(configMap, 'name'), { via: 'volume', keys: itemKeys(configMap), ...optionalOf(configMap), ...named });
    visit('Secret', field(secret, 'secretName'), { via: 'volume', keys: itemKeys(secret), ...optionalOf(secret), ...named });
    if (!projected) continue;
    for (const source of list(field(field(volume, 'projected'), 'sources'))) {
      const c = field(source, 'configMap');
      const s = field(source, 'secret');
      visit('ConfigMap', field(c, 'name'), { via: 'projected volume', keys: itemKeys(c), ...optionalOf(c), ...named });
      visit('Secret', field(s, 'name'), { via: 'projected volume', keys: itemKeys(s), ...optionalOf(s), ...named });
    }
  }
  for (const containers of [field(spec, 'initContainers'), field(spec, 'containers')]) {
    for (const container of list(containers)) {
      for (const env of list(field(container, 'env'))) {
        const valueFrom = field(env, 'valueFrom');
        visit('ConfigMap', field(field(valueFrom, 'configMapKeyRef'), 'name'), keyRead(field(valueFrom, 'configMapKeyRef')));
        visit('Secret', field(field(valueFrom, 'secretKeyRef'), 'name'), keyRead(field(valueFrom, 'secretKeyRef')));
      }
      for (const source of list(field(container, 'envFrom'))) {
        visit('ConfigMap', field(field(source, 'configMapRef'), 'name'), { via: 'envFrom', ...optionalOf(field(source, 'configMapRef')) });
        visit('Secret', field(field(source, 'secretRef'), 'name'), { via: 'envFrom', ...optionalOf(field(source, 'secretRef')) });
      }
    }
  }
}
const byKindThenName = (a: Reference, b: Reference): number => (a.kind !== b.kind ? (a.kind < b.kind ? -1 : 1) : a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
function modelReferencedObjects(template: unknown, projected: boolean): Reference[] {
  const found = new Map<string, Reference>();
  modelVisitTemplate(template, (kind, name) => {
    if (typeof name !== 'string' || name === '') return;
    if (!found.has(`${kind}/${name}`)) found.set(`${kind}/${name}`, { kind, name });
  }, projected);
  return [...found.values()].sort(byKindThenName);
}
function modelReferenceReads(template: unknown, projected: boolean): ReferenceReads[] {
  const found = new Map<string, ReferenceReads>();
  modelVisitTemplate(template, (kind, name, read) => {
    if (typeof name !== 'string' || name === '') return;
    const entry = found.get(`${kind}/${name}`) ?? { kind, name, reads: [] };
    entry.reads.push(read);
    found.set(`${kind}/${name}`, entry);
  }, projected);
  return [...found.values()].sort(byKindThenName).map((entry) =>
    entry.reads.some((r) => r.keys === undefined) ? entry : { ...entry, keys: [...new Set(entry.reads.flatMap((r) => r.keys ?? []))].sort() },
  );
}

// --- generators: wire JSON as a hostile client could send it, every field possibly of the wrong type ---

const junk = fc.oneof(fc.constant(undefined), fc.constant(null), fc.integer(), fc.boolean(), fc.constant([]), fc.constant({}), fc.constant('x'));
const name = fc.oneof({ weight: 6, arbitrary: fc.constantFrom('a', 'b', 'c', 'db-config', '') }, { weight: 1, arbitrary: junk });
const optional = fc.oneof(fc.constant(true), fc.constant(false), fc.constant('true'), fc.constant(undefined));
const items = fc.oneof(fc.constant(undefined), fc.constant([]), fc.array(fc.record({ key: fc.oneof(fc.constantFrom('k1', 'k2'), junk) }), { maxLength: 3 }), junk);
const maybe = <T>(a: fc.Arbitrary<T>): fc.Arbitrary<T | undefined> => fc.option(a, { nil: undefined });
const orJunk = <T>(a: fc.Arbitrary<T>): fc.Arbitrary<unknown> => fc.oneof({ weight: 5, arbitrary: a }, { weight: 1, arbitrary: junk });
const keyRef = orJunk(fc.record({ name, key: fc.oneof(fc.constantFrom('k1', 'k2', 'k3'), junk), optional }, { requiredKeys: [] }));
const env = orJunk(fc.record({ name: fc.constant('E'), valueFrom: orJunk(fc.record({ configMapKeyRef: keyRef, secretKeyRef: keyRef }, { requiredKeys: [] })) }, { requiredKeys: [] }));
const envFromRef = orJunk(fc.record({ name, optional }, { requiredKeys: [] }));
const container = orJunk(fc.record({ env: orJunk(fc.array(env, { maxLength: 6 })), envFrom: orJunk(fc.array(orJunk(fc.record({ configMapRef: envFromRef, secretRef: envFromRef }, { requiredKeys: [] })), { maxLength: 3 })) }, { requiredKeys: [] }));
const volumeSource = (nameKey: string) => orJunk(fc.record({ [nameKey]: name, items, optional }, { requiredKeys: [] }));
const projectedSource = orJunk(fc.record({ configMap: volumeSource('name'), secret: volumeSource('name') }, { requiredKeys: [] }));
const volume = orJunk(
  fc.record(
    { name: fc.oneof(fc.constantFrom('v1', 'v2'), junk), configMap: volumeSource('name'), secret: volumeSource('secretName'), projected: orJunk(fc.record({ sources: orJunk(fc.array(projectedSource, { maxLength: 3 })) }, { requiredKeys: [] })) },
    { requiredKeys: [] },
  ),
);
const template = orJunk(
  fc.record({ spec: orJunk(fc.record({ volumes: orJunk(fc.array(volume, { maxLength: 4 })), initContainers: orJunk(fc.array(container, { maxLength: 2 })), containers: orJunk(fc.array(container, { maxLength: 3 })) }, { requiredKeys: [] })) }, { requiredKeys: [] }),
);

describe('the reference walk (property-based, against the walk it replaced)', () => {
  it('referencedObjects and referenceReads give what the old walk gave, on templates with fields of every wrong type', () => {
    fc.assert(
      fc.property(template, maybe(fc.boolean()), (t, projected) => {
        const options = projected === undefined ? {} : { projected };
        expect(referencedObjects(t, options)).toStrictEqual(modelReferencedObjects(t, projected ?? true));
        expect(referenceReads(t, options)).toStrictEqual(modelReferenceReads(t, projected ?? true));
      }),
      propertyRuns(3000),
    );
  });
});
