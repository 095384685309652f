import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import jsonpatch, { type Operation } from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { admit } from '../../src/restarter/admit.js';
import { holdPartitionMutator } from '../../src/rollout/partition-hold-mutator.js';
import type { AdmissionReview } from '../../src/admission/review.js';
import {
  annotationKey,
  IGNORE_CONFIGMAPS_ANNOTATION,
  IGNORE_SECRETS_ANNOTATION,
  type ObjectVersion,
  type VersionLookup,
} from '../../src/restarter/annotations.js';
import type { ObjectKind } from '../../src/restarter/references.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { propertyRuns } from '../env/property-runs.js';

const NAMESPACE = 'shop';
/** A few seconds on a quiet machine; the bound is for a busy one. */
const PROPERTY_TIMEOUT_MS = 120_000;
const ROLLGUARD_PREFIXES = ['configmap.rollguard.io/', 'secret.rollguard.io/', 'rollguard.io/'];
const isRollguards = (key: string): boolean => ROLLGUARD_PREFIXES.some((p) => key.startsWith(p));

// --- the API server's rules for an annotation key (apimachinery IsQualifiedName) ---

const DNS1123_LABEL = '[a-z0-9]([-a-z0-9]*[a-z0-9])?';
const DNS1123_SUBDOMAIN = new RegExp(`^${DNS1123_LABEL}(\\.${DNS1123_LABEL})*$`);
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const SUBDOMAIN_MAX = 253;
const NAME_MAX = 63;

/** Why the API server would reject `key` as an annotation key; undefined when it accepts it. */
export function annotationKeyProblem(key: string): string | undefined {
  const parts = key.split('/');
  if (parts.length > 2) return 'more than one "/"';
  const [prefix, name] = parts.length === 2 ? parts : [undefined, parts[0]!];
  if (prefix !== undefined) {
    if (prefix.length === 0) return 'empty prefix';
    if (prefix.length > SUBDOMAIN_MAX) return `prefix longer than ${SUBDOMAIN_MAX}`;
    if (!DNS1123_SUBDOMAIN.test(prefix)) return 'prefix not a DNS-1123 subdomain';
  }
  if (name === undefined || name.length === 0) return 'empty name';
  if (name.length > NAME_MAX) return `name longer than ${NAME_MAX}`;
  if (!QUALIFIED_NAME.test(name)) return 'name not [A-Za-z0-9] at both ends and [-A-Za-z0-9_.] inside';
  return undefined;
}

describe('annotationKeyProblem, the checker the properties rely on', () => {
  it.each([
    ['configmap.rollguard.io/db', undefined],
    ['a', undefined],
    [`p/${'a'.repeat(63)}`, undefined],
    [`${'a'.repeat(253)}/x`, undefined],
    [`p/${'a'.repeat(64)}`, 'name longer than 63'],
    [`${'a'.repeat(254)}/x`, 'prefix longer than 253'],
    ['a/b/c', 'more than one "/"'],
    ['/x', 'empty prefix'],
    ['p/', 'empty name'],
    ['Upper.case/x', 'prefix not a DNS-1123 subdomain'],
    ['p/-x', 'name not [A-Za-z0-9] at both ends and [-A-Za-z0-9_.] inside'],
    ['p/x_', 'name not [A-Za-z0-9] at both ends and [-A-Za-z0-9_.] inside'],
    ['p/a~b', 'name not [A-Za-z0-9] at both ends and [-A-Za-z0-9_.] inside'],
  ])('%s: %s', (key, problem) => {
    expect(annotationKeyProblem(key)).toBe(problem);
  });
});

// --- generators ---

const LABEL_INNER = [...'abcdefghijklmnopqrstuvwxyz0123456789-'];
const LABEL_END = [...'abcdefghijklmnopqrstuvwxyz0123456789'];

/** A DNS-1123 label of 1 to `max` characters, long ones as likely as short ones. */
const dnsLabel = (max: number): fc.Arbitrary<string> =>
  fc
    .tuple(fc.constantFrom(...LABEL_END), fc.string({ unit: fc.constantFrom(...LABEL_INNER), maxLength: max - 2, size: 'max' }), fc.constantFrom(...LABEL_END), fc.boolean())
    .map(([first, inner, last, single]) => (single ? first : `${first}${inner}${last}`));

/** An object name: a DNS-1123 subdomain of up to 253 characters. */
const objectName: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom('db-config', 'db-tls', 'a', 'x.y'), weight: 2 },
  { arbitrary: dnsLabel(63), weight: 3 },
  {
    arbitrary: fc.array(dnsLabel(63), { minLength: 2, maxLength: 5 }).map((labels) => labels.join('.').slice(0, 253).replace(/[-.]+$/, '')),
    weight: 2,
  },
);

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface World {
  /** ConfigMap and Secret names, indexed by the references */
  names: string[];
  lookup: Map<string, ObjectVersion | undefined>;
}

const objectVersion: fc.Arbitrary<ObjectVersion | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.record({ uid: fc.uuid(), resourceVersion: fc.bigInt({ min: 1n, max: 10n ** 12n }).map(String), ignored: fc.boolean() }),
);

const world: fc.Arbitrary<World> = fc.uniqueArray(objectName, { minLength: 1, maxLength: 8 }).chain((names) =>
  fc.record({
    names: fc.constant(names),
    lookup: fc
      .array(objectVersion, { minLength: names.length * 2, maxLength: names.length * 2 })
      .map((versions) => new Map(names.flatMap((name, i) => [[`ConfigMap/${name}`, versions[2 * i]], [`Secret/${name}`, versions[2 * i + 1]]]))),
  }),
);

function lookupOf(w: World): VersionLookup {
  return (kind, namespace, name) => (namespace === NAMESPACE ? w.lookup.get(`${kind}/${name}`) : undefined);
}

/** The template, the set's annotations and the old object, all built from names of one world. */
function statefulSetIn(names: string[]): fc.Arbitrary<Record<string, Json>> {
  const name = fc.constantFrom(...names);
  const kind = fc.constantFrom<ObjectKind>('ConfigMap', 'Secret');
  const env = fc.oneof(
    fc.record({ name: fc.constant('PLAIN'), value: fc.string({ maxLength: 8 }) }),
    name.map((n) => ({ name: 'CM', valueFrom: { configMapKeyRef: { name: n, key: 'k' } } })),
    name.map((n) => ({ name: 'S', valueFrom: { secretKeyRef: { name: n, key: 'k', optional: true } } })),
    fc.constant({ name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }),
  );
  const envFrom = fc.oneof(name.map((n) => ({ configMapRef: { name: n } })), name.map((n) => ({ secretRef: { name: n }, prefix: 'S_' })));
  const container = (prefix: string) =>
    fc.record(
      { name: fc.constant(prefix), image: fc.constant('busybox'), env: fc.array(env, { maxLength: 3 }), envFrom: fc.array(envFrom, { maxLength: 2 }) },
      { requiredKeys: ['name', 'image'] },
    );
  const projectedSource = fc.oneof(
    name.map((n) => ({ configMap: { name: n } })),
    name.map((n) => ({ secret: { name: n } })),
    fc.constant<Json>({ downwardAPI: { items: [] } }),
  );
  const volume = fc.oneof(
    name.map((n) => ({ name: 'cm', configMap: { name: n } })),
    name.map((n) => ({ name: 's', secret: { secretName: n } })),
    fc.array(projectedSource, { maxLength: 3 }).map((sources) => ({ name: 'p', projected: { sources } })),
    fc.constant({ name: 'scratch', emptyDir: {} as Record<string, Json> }),
  );
  // keys of others, with "/" and "~" (JSON Pointer's escapes), and rollguard's, current or stale
  const foreignKey = fc.oneof(
    fc.constantFrom('app', 'example.com/owner', 'a~b', 'x/y~1z', 'kubectl.kubernetes.io/restartedAt', '~0/~1', 'configmap.rollguard.io.evil/x', 'rollguard.iox/y'),
    fc.string({ maxLength: 12 }),
  );
  const rollguardKey = fc.oneof(
    fc.tuple(kind, name).map(([k, n]) => annotationKey(k, n)),
    fc.tuple(kind, objectName).map(([k, n]) => annotationKey(k, n)),
    fc.constantFrom('configmap.rollguard.io/gone', 'secret.rollguard.io/', 'rollguard.io/other'),
  );
  const value = fc.oneof(fc.constant('absent'), fc.tuple(fc.uuid(), fc.nat()).map(([u, rv]) => `${u}/${rv}`), fc.string({ maxLength: 10 }));
  const annotations = fc.dictionary(fc.oneof(foreignKey, rollguardKey), value, { maxKeys: 6 });
  const ignoreList = fc.array(name, { maxLength: 3 }).map((ns) => ns.join(' , '));
  const setAnnotations = fc.record(
    {
      [IGNORE_CONFIGMAPS_ANNOTATION]: ignoreList,
      [IGNORE_SECRETS_ANNOTATION]: ignoreList,
      [HEALTH_GATED_ANNOTATION]: fc.constant(HEALTH_GATED_VALUE),
      'example.com/note': fc.string({ maxLength: 8 }),
    },
    { requiredKeys: [] },
  );
  const templateMetadata = fc.option(
    fc.record({ labels: fc.constant({ app: 'db' }), annotations: annotations }, { requiredKeys: ['labels'] }),
    { nil: undefined },
  );
  return fc
    .record({
      setAnnotations: fc.option(setAnnotations, { nil: undefined }),
      namespaced: fc.boolean(),
      replicas: fc.option(fc.nat({ max: 5 }), { nil: undefined }),
      partition: fc.option(fc.nat({ max: 5 }), { nil: undefined }),
      templateMetadata,
      containers: fc.array(container('app'), { minLength: 1, maxLength: 3 }),
      initContainers: fc.option(fc.array(container('init'), { maxLength: 2 }), { nil: undefined }),
      volumes: fc.option(fc.array(volume, { maxLength: 4 }), { nil: undefined }),
    })
    .map((s) => {
      const podSpec: Record<string, Json> = { containers: s.containers };
      if (s.initContainers) podSpec.initContainers = s.initContainers;
      if (s.volumes) podSpec.volumes = s.volumes;
      const template: Record<string, Json> = { spec: podSpec };
      if (s.templateMetadata) template.metadata = s.templateMetadata as Json;
      const metadata: Record<string, Json> = { name: 'db', labels: { 'rollguard.io/enabled': 'true' } };
      if (s.namespaced) metadata.namespace = NAMESPACE;
      if (s.setAnnotations) metadata.annotations = s.setAnnotations;
      const spec: Record<string, Json> = { serviceName: 'db', selector: { matchLabels: { app: 'db' } }, template };
      if (s.replicas !== undefined) spec.replicas = s.replicas;
      if (s.partition !== undefined) spec.updateStrategy = { type: 'RollingUpdate', rollingUpdate: { partition: s.partition } };
      return { apiVersion: 'apps/v1', kind: 'StatefulSet', metadata, spec };
    });
}

interface Case {
  world: World;
  operation: 'CREATE' | 'UPDATE';
  object: Record<string, Json>;
  oldObject?: Record<string, Json>;
}

const admissionCase: fc.Arbitrary<Case> = world.chain((w) =>
  fc
    .record({
      operation: fc.constantFrom<'CREATE' | 'UPDATE'>('CREATE', 'UPDATE'),
      object: statefulSetIn(w.names),
      other: statefulSetIn(w.names),
      old: fc.constantFrom('other', 'same', 'same-bumped'),
    })
    .map(({ operation, object, other, old }): Case => {
      if (operation === 'CREATE') return { world: w, operation, object };
      // an UPDATE's old object: another set, the same one, or the same one with other template annotation values
      let oldObject = other;
      if (old !== 'other') {
        oldObject = structuredClone(object);
        const annotations = (oldObject.spec as { template: { metadata?: { annotations?: Record<string, string> } } }).template.metadata?.annotations;
        if (old === 'same-bumped' && annotations) for (const key of Object.keys(annotations)) annotations[key] = `${annotations[key]}0`;
      }
      return { world: w, operation, object, oldObject };
    }),
);

function reviewOf(c: Case, object: Record<string, Json>): AdmissionReview {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'u-property',
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      namespace: NAMESPACE,
      name: 'db',
      operation: c.operation,
      object,
      ...(c.oldObject ? { oldObject: c.oldObject } : {}),
    },
  };
}

/** admit as main.ts wires it: the restarter's annotations, then the partition hold. */
function patchFor(c: Case, object: Record<string, Json>): Operation[] {
  const answer = admit(reviewOf(c, object), { cachesSynced: true, lookup: lookupOf(c.world), mutators: [holdPartitionMutator] });
  if (answer.response?.allowed !== true) throw new Error(`not allowed: ${JSON.stringify(answer.response)}`);
  const patch = answer.response?.patch;
  return patch === undefined ? [] : (JSON.parse(Buffer.from(patch, 'base64').toString('utf8')) as Operation[]);
}

/** What the API server stores: the patch applied, with validation, to the object it sent. */
function applied(object: Record<string, Json>, ops: Operation[]): Record<string, Json> {
  return jsonpatch.applyPatch(structuredClone(object), ops, true, false).newDocument;
}

const setAnnotations = (set: Record<string, Json>): Record<string, Json> => ((set.metadata as { annotations?: Record<string, Json> }).annotations ?? {});
const templateAnnotations = (set: Record<string, Json>): Record<string, Json> =>
  ((set.spec as { template?: { metadata?: { annotations?: Record<string, Json> } } }).template?.metadata?.annotations ?? {});

/** The object without what rollguard may write: template annotations, the partition, its own keys on the set. */
function besidesRollguardsFields(set: Record<string, Json>): unknown {
  const copy = structuredClone(set) as { metadata: { annotations?: Record<string, Json> }; spec: { template: { metadata?: Record<string, Json> }; updateStrategy?: unknown } };
  delete copy.spec.updateStrategy;
  if (copy.metadata.annotations) {
    copy.metadata.annotations = Object.fromEntries(Object.entries(copy.metadata.annotations).filter(([key]) => !isRollguards(key)));
    if (Object.keys(copy.metadata.annotations).length === 0) delete copy.metadata.annotations;
  }
  if (copy.spec.template.metadata) {
    delete copy.spec.template.metadata.annotations;
    if (Object.keys(copy.spec.template.metadata).length === 0) delete copy.spec.template.metadata;
  }
  return copy;
}

describe('admit over generated StatefulSets (property-based)', () => {
  it('writes a patch that applies, only valid rollguard keys, and leaves everything else as it was', () => {
    fc.assert(
      fc.property(admissionCase, (c) => {
        const ops = patchFor(c, c.object);
        const after = applied(c.object, ops);
        const pairs: [Record<string, Json>, Record<string, Json>][] = [
          [templateAnnotations(c.object), templateAnnotations(after)],
          [setAnnotations(c.object), setAnnotations(after)],
        ];
        for (const [before, now] of pairs) {
          for (const key of new Set([...Object.keys(before), ...Object.keys(now)])) {
            if (Object.hasOwn(before, key) && Object.hasOwn(now, key) && before[key] === now[key]) continue;
            if (!isRollguards(key)) throw new Error(`changed the annotation ${JSON.stringify(key)} of others: ${JSON.stringify(before[key])} -> ${JSON.stringify(now[key])}`);
            const problem = Object.hasOwn(now, key) ? annotationKeyProblem(key) : undefined;
            if (problem) throw new Error(`wrote the key ${JSON.stringify(key)}, which the API server rejects: ${problem}`);
          }
        }
        // only the template annotations and the partition are rollguard's to write
        if (!isDeepStrictEqual(besidesRollguardsFields(after), besidesRollguardsFields(c.object))) {
          expect(besidesRollguardsFields(after)).toEqual(besidesRollguardsFields(c.object));
        }
      }),
      propertyRuns(3000),
    );
  }, PROPERTY_TIMEOUT_MS);

  it('admitting the patched object again patches nothing (reinvocation)', () => {
    fc.assert(
      fc.property(admissionCase, (c) => {
        const after = applied(c.object, patchFor(c, c.object));
        const again = patchFor(c, after);
        if (again.length > 0) expect(again, 'the second admission patched again').toEqual([]);
      }),
      propertyRuns(2500),
    );
  }, PROPERTY_TIMEOUT_MS);

  it('maps distinct object names to distinct, valid keys', () => {
    fc.assert(
      fc.property(objectName, objectName, fc.constantFrom<ObjectKind>('ConfigMap', 'Secret'), (a, b, kind) => {
        expect(annotationKeyProblem(annotationKey(kind, a))).toBeUndefined();
        if (a !== b) expect(annotationKey(kind, a)).not.toBe(annotationKey(kind, b));
      }),
      propertyRuns(2000),
    );
  }, PROPERTY_TIMEOUT_MS);
});
