import { describe, expect, it } from 'vitest';
import type { V1PodTemplateSpec } from '@kubernetes/client-node';
import {
  CHANGES_IGNORED,
  STACKABLE_DIALECT,
  dialectFor,
  enabledLabels,
  compatDialects,
  isContentDigestValue,
  stackableAnnotationKey,
  stackableAnnotationTarget,
  stackableIgnoredNames,
} from '../../src/compat/stackable.js';
import { stackableContentDigest } from '../../src/compat/content-digest.js';
import { ABSENT, ROLLGUARD_DIALECT, annotationChanges, keySegment, planAnnotations, type ObjectVersion, type VersionLookup } from '../../src/restarter/annotations.js';
import type { ObjectKind } from '../../src/restarter/references.js';

const CM = 'configmap.restarter.stackable.tech/';
const SECRET = 'secret.restarter.stackable.tech/';

function template(annotations?: Record<string, string>): V1PodTemplateSpec {
  return {
    metadata: annotations ? { annotations } : {},
    spec: {
      volumes: [
        { name: 'config', configMap: { name: 'app' } },
        { name: 'tls', secret: { secretName: 'tls' } },
        { name: 'bundle', projected: { sources: [{ configMap: { name: 'projected-cm' } }] } },
      ],
      initContainers: [{ name: 'init', envFrom: [{ secretRef: { name: 'init-creds' } }] }],
      containers: [{ name: 'main', env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'env-cm', key: 'x' } } }] }],
    },
  };
}

function lookupOf(objects: Record<string, ObjectVersion>): VersionLookup {
  return (kind: ObjectKind, _namespace: string, name: string) => objects[`${kind}/${name}`];
}

const objects = {
  'ConfigMap/app': { uid: 'u-app', resourceVersion: '100', ignored: false },
  'ConfigMap/env-cm': { uid: 'u-env', resourceVersion: '101', ignored: false },
  'Secret/tls': { uid: 'u-tls', resourceVersion: '102', ignored: false },
  'Secret/init-creds': { uid: 'u-init', resourceVersion: '103', ignored: false },
  'ConfigMap/projected-cm': { uid: 'u-proj', resourceVersion: '104', ignored: false },
};

function plan(stored: Record<string, string> | undefined, opts: { annotations?: Record<string, string>; lookup?: VersionLookup; storedAt?: string; cacheProgress?: string } = {}) {
  return planAnnotations({
    dialect: STACKABLE_DIALECT,
    namespace: 'ns',
    annotations: opts.annotations,
    template: template(stored),
    stored,
    storedAt: opts.storedAt,
    ...(opts.cacheProgress !== undefined ? { cacheProgress: () => opts.cacheProgress ?? '' } : {}),
    lookup: opts.lookup ?? lookupOf(objects),
  });
}

function values(p: ReturnType<typeof plan>): Record<string, string> {
  return Object.fromEntries(p.desired.map((d) => [d.key, d.value]));
}

describe('the Stackable dialect: keys', () => {
  it.each([
    { kind: 'ConfigMap' as const, name: 'app', want: `${CM}app` },
    { kind: 'Secret' as const, name: 'tls', want: `${SECRET}tls` },
    { kind: 'ConfigMap' as const, name: 'c'.repeat(63), want: `${CM}${'c'.repeat(63)}` },
  ])('$kind $name → $want', ({ kind, name, want }) => {
    expect(stackableAnnotationKey(kind, name)).toBe(want);
    expect(stackableAnnotationTarget(want)).toEqual({ kind, name });
  });

  it('shortens a name over 63 characters (commons-operator\'s write of it is rejected) as rollguard does', () => {
    const name = 'c'.repeat(70);
    const key = stackableAnnotationKey('ConfigMap', name);
    expect(key).toBe(`${CM}${keySegment(name)}`);
    expect(key.length - CM.length).toBeLessThanOrEqual(63);
    expect(key).not.toBe(stackableAnnotationKey('ConfigMap', 'c'.repeat(71)));
    expect(stackableAnnotationTarget(key)).toEqual({ kind: 'ConfigMap' });
  });

  it.each([['configmap.rollguard.io/app'], [CM], ['restarter.stackable.tech/enabled'], ['secret.restarter.stackable.tech']])('%s is not a Stackable reference key', (key) => {
    expect(stackableAnnotationTarget(key)).toBeUndefined();
    expect(STACKABLE_DIALECT.isOwnAnnotation(key)).toBe(false);
  });
});

describe('the Stackable dialect: opt-outs and opt-in', () => {
  it('reads the ignore-configmap.* / ignore-secret.* annotations by their values', () => {
    const ignored = stackableIgnoredNames({
      'restarter.stackable.tech/ignore-configmap.0': 'app',
      'restarter.stackable.tech/ignore-configmap.anything': 'other',
      'restarter.stackable.tech/ignore-secret.x': ' tls ',
      'rollguard.io/ignore-configmaps': 'not-this-one',
    });
    expect([...ignored.ConfigMap].sort()).toEqual(['app', 'other']);
    expect([...ignored.Secret]).toEqual(['tls']);
  });

  it.each([
    { labels: { 'restarter.stackable.tech/enabled': 'true' }, compat: 'stackable' as const, want: 'stackable' },
    { labels: { 'restarter.stackable.tech/enabled': 'true' }, compat: '' as const, want: undefined },
    { labels: { 'rollguard.io/enabled': 'true' }, compat: 'stackable' as const, want: 'rollguard' },
    { labels: { 'rollguard.io/enabled': 'true', 'restarter.stackable.tech/enabled': 'true' }, compat: 'stackable' as const, want: 'stackable' },
    { labels: { 'restarter.stackable.tech/enabled': 'false' }, compat: 'stackable' as const, want: undefined },
    { labels: undefined, compat: 'stackable' as const, want: undefined },
  ] as { labels: Record<string, string> | undefined; compat: '' | 'stackable'; want: string | undefined }[])('labels $labels, compat "$compat" → $want', ({ labels, compat, want }) => {
    expect(dialectFor(labels, compat)?.name).toBe(want);
  });

  it('watches and ignores by both labels only under --compat stackable', () => {
    expect(enabledLabels('')).toEqual(['rollguard.io/enabled']);
    expect(enabledLabels('stackable')).toEqual(['rollguard.io/enabled', 'restarter.stackable.tech/enabled']);
    expect([ROLLGUARD_DIALECT, ...compatDialects('stackable')].map((d) => d.ignoreLabel)).toEqual(['rollguard.io/ignore', 'restarter.stackable.tech/ignore']);
    expect([ROLLGUARD_DIALECT, ...compatDialects('')].map((d) => d.ignoreLabel)).toEqual(['rollguard.io/ignore']);
  });
});

describe('planAnnotations in the Stackable dialect', () => {
  it('annotates what commons-operator annotates, with its keys and values; no projected volume', () => {
    expect(values(plan(undefined))).toEqual({
      [`${CM}app`]: 'u-app/100',
      [`${CM}env-cm`]: 'u-env/101',
      [`${SECRET}init-creds`]: 'u-init/103',
      [`${SECRET}tls`]: 'u-tls/102',
    });
  });

  it('gives a missing object and an opted-out one changes-ignored, as commons-operator does', () => {
    const lookup = lookupOf({ ...objects, 'Secret/tls': { uid: 'u-tls', resourceVersion: '102', ignored: true } });
    const got = values(plan(undefined, { lookup: (k, ns, n) => (n === 'env-cm' ? undefined : lookup(k, ns, n)), annotations: { 'restarter.stackable.tech/ignore-secret.a': 'init-creds' } }));
    expect(got[`${CM}env-cm`]).toBe(CHANGES_IGNORED);
    expect(got[`${SECRET}tls`]).toBe(CHANGES_IGNORED);
    expect(got[`${SECRET}init-creds`]).toBe(CHANGES_IGNORED);
    expect(got[`${CM}app`]).toBe('u-app/100');
  });

  const asCommonsLeftIt = {
    [`${CM}app`]: 'u-app/100',
    [`${CM}env-cm`]: CHANGES_IGNORED,
    [`${SECRET}init-creds`]: CHANGES_IGNORED,
    [`${SECRET}tls`]: 'u-tls/102',
  };

  it('keeps a set exactly as commons-operator left it: no change at all', () => {
    const lookup: VersionLookup = (k, ns, n) => (n === 'env-cm' ? undefined : lookupOf(objects)(k, ns, n));
    const p = plan(asCommonsLeftIt, { lookup, annotations: { 'restarter.stackable.tech/ignore-secret.a': 'init-creds' } });
    expect(annotationChanges(asCommonsLeftIt, p.desired, STACKABLE_DIALECT)).toEqual([]);
    expect(p.heldBack).toEqual([]);
  });

  it('an opt-out made after the switch freezes the stored version (no restart), as rollguard does', () => {
    const stored = { ...asCommonsLeftIt, [`${SECRET}init-creds`]: 'u-init/103', [`${CM}env-cm`]: 'u-env/101' };
    const lookup = lookupOf({ ...objects, 'ConfigMap/app': { uid: 'u-app', resourceVersion: '200', ignored: true } });
    const p = plan(stored, { lookup, annotations: { 'restarter.stackable.tech/ignore-secret.a': 'init-creds' } });
    expect(annotationChanges(stored, p.desired, STACKABLE_DIALECT)).toEqual([]);
    expect(p.frozen).toEqual(['ConfigMap/app']);
  });

  it('an object that appears after changes-ignored was written rolls the set, as commons-operator does', () => {
    const stored = { ...asCommonsLeftIt, [`${SECRET}init-creds`]: 'u-init/103' };
    const p = plan(stored, { storedAt: '50' });
    expect(annotationChanges(stored, p.desired, STACKABLE_DIALECT)).toEqual([
      { key: `${CM}env-cm`, kind: 'ConfigMap', name: 'env-cm', from: CHANGES_IGNORED, to: 'u-env/101' },
    ]);
  });

  it('an object older than the set holding changes-ignored is held back for a fresh read, compared as absent', () => {
    const stored = { ...asCommonsLeftIt, [`${SECRET}init-creds`]: 'u-init/103' };
    const p = plan(stored, { storedAt: '500', cacheProgress: '600' });
    expect(p.heldBack).toEqual([{ key: `${CM}env-cm`, kind: 'ConfigMap', name: 'env-cm', stored: ABSENT, candidate: 'u-env/101' }]);
    expect(values(p)[`${CM}env-cm`]).toBe(CHANGES_IGNORED);
  });

  it('a version bump replaces the value; a version never moves backwards', () => {
    const stored = { ...asCommonsLeftIt, [`${SECRET}init-creds`]: 'u-init/103', [`${CM}env-cm`]: 'u-env/101', [`${CM}app`]: 'u-app/90' };
    const bumped = plan(stored);
    expect(values(bumped)[`${CM}app`]).toBe('u-app/100');
    const newer = { ...stored, [`${CM}app`]: 'u-app/150' };
    expect(values(plan(newer))[`${CM}app`]).toBe('u-app/150');
  });

  it('plans <uid>/<resourceVersion> over the content-digest form (the loop keeps it while the data matches: stackable-migration.test.ts)', () => {
    const stored = { ...asCommonsLeftIt, [`${SECRET}init-creds`]: 'u-init/103', [`${CM}env-cm`]: 'u-env/101', [`${CM}app`]: 'u-app/401bdc692ecd7b9bb6b02f186e2976c3' };
    expect(isContentDigestValue(stored[`${CM}app`]!)).toBe(true);
    expect(values(plan(stored))[`${CM}app`]).toBe('u-app/100');
  });

  it('leaves rollguard keys alone and rollguard leaves Stackable keys alone', () => {
    const current = { ...asCommonsLeftIt, 'configmap.rollguard.io/app': 'u-app/100' };
    expect(annotationChanges(current, [], STACKABLE_DIALECT).map((c) => c.key)).not.toContain('configmap.rollguard.io/app');
    expect(annotationChanges(current, [], ROLLGUARD_DIALECT).map((c) => c.key)).toEqual(['configmap.rollguard.io/app']);
  });
});

describe('stackableContentDigest', () => {
  it('matches the known answer of commons-operator for data {foo: bar}', () => {
    expect(stackableContentDigest('ConfigMap', { data: { foo: 'bar' } })).toBe('401bdc692ecd7b9bb6b02f186e2976c3');
  });

  it('tells apart entry splits, data from binaryData, and ConfigMaps from Secrets', () => {
    const base = stackableContentDigest('ConfigMap', { data: { foo: 'bar' } });
    expect(stackableContentDigest('ConfigMap', { data: { ab: 'c' } })).not.toBe(stackableContentDigest('ConfigMap', { data: { a: 'bc' } }));
    expect(stackableContentDigest('ConfigMap', { binaryData: { foo: Buffer.from('bar').toString('base64') } })).not.toBe(base);
    expect(stackableContentDigest('Secret', { data: { foo: Buffer.from('bar').toString('base64') } })).not.toBe(base);
    expect(stackableContentDigest('ConfigMap', { data: { b: '2', a: '1' } })).toBe(stackableContentDigest('ConfigMap', { data: { a: '1', b: '2' } }));
  });
});
