import { describe, expect, it } from 'vitest';
import type { V1ObjectMeta, V1PodTemplateSpec, V1Volume } from '@kubernetes/client-node';
import {
  ABSENT,
  ANNOTATION_SEGMENT,
  annotationChanges,
  annotationKey,
  annotationTarget,
  desiredAnnotations,
  FROZEN_ANNOTATION,
  IGNORE_CONFIGMAPS_ANNOTATION,
  IGNORE_SECRETS_ANNOTATION,
  isRollguardAnnotation,
  planAnnotations,
  withDesiredAnnotations,
  type DesiredAnnotation,
  type ObjectVersion,
  type VersionLookup,
} from '../../src/restarter/annotations.js';
import type { ObjectKind } from '../../src/restarter/references.js';

// A DNS-1123 subdomain (what ConfigMap and Secret names are) of exactly `length` characters.
function longName(length: number, last = 'z'): string {
  return 'payments-config.v2-'.repeat(14).slice(0, length - 1) + last;
}

function segmentOf(key: string): string {
  return key.slice(key.indexOf('/') + 1);
}

describe('annotationKey', () => {
  it.each([
    { kind: 'ConfigMap' as const, name: 'db-config', want: 'configmap.rollguard.io/db-config' },
    { kind: 'Secret' as const, name: 'db-tls', want: 'secret.rollguard.io/db-tls' },
    { kind: 'ConfigMap' as const, name: 'app.example.com', want: 'configmap.rollguard.io/app.example.com' },
    { kind: 'Secret' as const, name: 'x', want: 'secret.rollguard.io/x' },
    { kind: 'ConfigMap' as const, name: 'c'.repeat(63), want: `configmap.rollguard.io/${'c'.repeat(63)}` },
  ])('keeps a name that is a valid segment: $name', ({ kind, name, want }) => {
    expect(annotationKey(kind, name)).toBe(want);
  });

  const shortened = [
    { why: '64 characters', name: 'c'.repeat(64) },
    { why: '253 characters, the longest object name', name: longName(253) },
    { why: '253 characters, differing only in the last character', name: longName(253, 'y') },
    { why: 'dots and dashes', name: `${'web-config.'.repeat(8)}v2` },
    { why: 'starting with a character a segment cannot start with', name: '.hidden-config' },
    { why: 'containing characters a segment cannot hold', name: 'team/config:v1' },
    { why: 'nothing usable for the readable part', name: '-'.repeat(80) },
  ];

  it.each(shortened)('shortens a name with $why to a valid, hashed segment', ({ name }) => {
    for (const kind of ['ConfigMap', 'Secret'] as const) {
      const key = annotationKey(kind, name);
      const segment = segmentOf(key);
      expect(segment.length).toBeLessThanOrEqual(63);
      expect(segment).toMatch(ANNOTATION_SEGMENT);
      // the "_" keeps it apart from every real object name, which cannot contain one
      expect(segment).toContain('_');
      expect(annotationKey(kind, name)).toBe(key);
    }
  });

  it('keeps the start of a long name readable', () => {
    const segment = segmentOf(annotationKey('ConfigMap', `payments-service-settings-${'x'.repeat(60)}`));
    expect(segment.startsWith('payments-service-settings-')).toBe(true);
  });

  it('gives distinct keys to long names that share their whole readable prefix', () => {
    const base = longName(252);
    const names = [...'abcdefghijklmnopqrstuvwxyz0123456789'].map((c) => `${base}${c}`);
    const keys = new Set(names.map((name) => annotationKey('Secret', name)));
    expect(keys.size).toBe(names.length);
  });

  it('is deterministic across calls (same name, same key)', () => {
    const name = longName(200);
    const keys = Array.from({ length: 5 }, () => annotationKey('ConfigMap', name));
    expect(new Set(keys).size).toBe(1);
  });

  it('produces a valid segment for every name length from 1 to 253', () => {
    for (let length = 1; length <= 253; length++) {
      const segment = segmentOf(annotationKey('ConfigMap', longName(length)));
      expect(segment.length, `name of ${length} characters`).toBeLessThanOrEqual(63);
      expect(segment, `name of ${length} characters`).toMatch(ANNOTATION_SEGMENT);
    }
  });
});

describe('isRollguardAnnotation and annotationTarget', () => {
  it.each([
    { key: 'configmap.rollguard.io/db-config', rollguard: true, target: { kind: 'ConfigMap', name: 'db-config' } },
    { key: 'secret.rollguard.io/db-tls', rollguard: true, target: { kind: 'Secret', name: 'db-tls' } },
    { key: annotationKey('Secret', longName(100)), rollguard: true, target: { kind: 'Secret' } },
    { key: 'configmap.rollguard.io/', rollguard: false, target: undefined },
    { key: 'rollguard.io/enabled', rollguard: false, target: undefined },
    { key: 'rollguard.io/ignore-configmaps', rollguard: false, target: undefined },
    { key: 'example.com/configmap.rollguard.io/x', rollguard: false, target: undefined },
    { key: 'kubectl.kubernetes.io/restartedAt', rollguard: false, target: undefined },
  ])('$key', ({ key, rollguard, target }) => {
    expect(isRollguardAnnotation(key)).toBe(rollguard);
    expect(annotationTarget(key)).toEqual(target);
  });
});

type Store = Partial<Record<`${ObjectKind}/${string}/${string}`, ObjectVersion>>;

function lookupFrom(store: Store): VersionLookup {
  return (kind, namespace, name) => store[`${kind}/${namespace}/${name}`];
}

function statefulSet(volumes: V1Volume[], metadata: V1ObjectMeta = {}): { metadata: V1ObjectMeta; spec: { template: V1PodTemplateSpec } } {
  return {
    metadata: { name: 'db', namespace: 'shop', ...metadata },
    spec: { template: { spec: { containers: [{ name: 'db' }], volumes } } },
  };
}

const version = (uid: string, resourceVersion: string, ignored = false): ObjectVersion => ({ uid, resourceVersion, ignored });

describe('desiredAnnotations', () => {
  const store: Store = {
    'ConfigMap/shop/db-config': version('u-1', '100'),
    'Secret/shop/db-tls': version('u-2', '200'),
    'ConfigMap/shop/ca-bundle': version('u-3', '300', true),
    'Secret/shop/shared': version('u-4', '400'),
    'ConfigMap/shop/shared': version('u-5', '500'),
    'ConfigMap/other/only-elsewhere': version('u-6', '600'),
  };
  const lookup = lookupFrom(store);
  const long = longName(120);

  const cases: { name: string; set: ReturnType<typeof statefulSet>; want: Omit<DesiredAnnotation, 'key'>[] }[] = [
    {
      name: 'existing objects: uid/resourceVersion',
      set: statefulSet([
        { name: 'c', configMap: { name: 'db-config' } },
        { name: 's', secret: { secretName: 'db-tls' } },
      ]),
      want: [
        { kind: 'ConfigMap', name: 'db-config', value: 'u-1/100' },
        { kind: 'Secret', name: 'db-tls', value: 'u-2/200' },
      ],
    },
    {
      name: 'a missing object is absent',
      set: statefulSet([{ name: 'c', configMap: { name: 'not-yet' } }]),
      want: [{ kind: 'ConfigMap', name: 'not-yet', value: ABSENT }],
    },
    {
      name: 'a missing optional object is absent too',
      set: statefulSet([{ name: 's', secret: { secretName: 'maybe', optional: true } }]),
      want: [{ kind: 'Secret', name: 'maybe', value: ABSENT }],
    },
    {
      name: 'an object in another namespace does not count',
      set: statefulSet([{ name: 'c', configMap: { name: 'only-elsewhere' } }]),
      want: [{ kind: 'ConfigMap', name: 'only-elsewhere', value: ABSENT }],
    },
    {
      name: 'an object labelled rollguard.io/ignore is not tracked',
      set: statefulSet([
        { name: 'ca', configMap: { name: 'ca-bundle' } },
        { name: 'c', configMap: { name: 'db-config' } },
      ]),
      want: [{ kind: 'ConfigMap', name: 'db-config', value: 'u-1/100' }],
    },
    {
      name: 'ignore annotations: names trimmed, per kind',
      set: statefulSet(
        [
          { name: 'c', configMap: { name: 'db-config' } },
          { name: 'cs', configMap: { name: 'shared' } },
          { name: 'ss', secret: { secretName: 'shared' } },
          { name: 's', secret: { secretName: 'db-tls' } },
        ],
        { annotations: { [IGNORE_CONFIGMAPS_ANNOTATION]: ' shared , ,db-config ', [IGNORE_SECRETS_ANNOTATION]: 'other' } },
      ),
      want: [
        { kind: 'Secret', name: 'db-tls', value: 'u-2/200' },
        { kind: 'Secret', name: 'shared', value: 'u-4/400' },
      ],
    },
    {
      name: 'a long name gets its shortened key',
      set: statefulSet([{ name: 'c', configMap: { name: long } }]),
      want: [{ kind: 'ConfigMap', name: long, value: ABSENT }],
    },
    { name: 'no references', set: statefulSet([]), want: [] },
  ];

  it.each(cases)('$name', ({ set, want }) => {
    expect(desiredAnnotations(set, lookup)).toEqual(want.map((w) => ({ ...w, key: annotationKey(w.kind, w.name) })));
  });

  it('asks the lookup in the set namespace', () => {
    const asked: string[] = [];
    desiredAnnotations(statefulSet([{ name: 'c', configMap: { name: 'db-config' } }], { namespace: 'team-a' }), (kind, namespace, name) => {
      asked.push(`${kind}/${namespace}/${name}`);
      return undefined;
    });
    expect(asked).toEqual(['ConfigMap/team-a/db-config']);
  });

  it('tracks nothing for a set without spec', () => {
    expect(desiredAnnotations({ metadata: { namespace: 'shop' } }, lookup)).toEqual([]);
  });
});

const desired = (kind: ObjectKind, name: string, value: string): DesiredAnnotation => ({
  key: annotationKey(kind, name),
  kind,
  name,
  value,
});

describe('withDesiredAnnotations and annotationChanges', () => {
  const longStale = annotationKey('Secret', longName(90));
  const cases: {
    name: string;
    current: Record<string, string> | undefined;
    desired: DesiredAnnotation[];
    want: Record<string, string>;
    changes: { key: string; kind?: ObjectKind; name?: string; from?: string; to?: string }[];
  }[] = [
    {
      name: 'no annotations yet',
      current: undefined,
      desired: [desired('ConfigMap', 'db-config', 'u-1/1')],
      want: { 'configmap.rollguard.io/db-config': 'u-1/1' },
      changes: [{ key: 'configmap.rollguard.io/db-config', kind: 'ConfigMap', name: 'db-config', to: 'u-1/1' }],
    },
    {
      name: 'nothing to track, nothing there',
      current: { 'prometheus.io/scrape': 'true' },
      desired: [],
      want: { 'prometheus.io/scrape': 'true' },
      changes: [],
    },
    {
      name: 'up to date',
      current: { 'configmap.rollguard.io/db-config': 'u-1/1', 'prometheus.io/scrape': 'true' },
      desired: [desired('ConfigMap', 'db-config', 'u-1/1')],
      want: { 'configmap.rollguard.io/db-config': 'u-1/1', 'prometheus.io/scrape': 'true' },
      changes: [],
    },
    {
      name: 'changed value, others kept',
      current: { 'configmap.rollguard.io/db-config': 'u-1/1', 'kubectl.kubernetes.io/restartedAt': '2024-01-01T00:00:00Z' },
      desired: [desired('ConfigMap', 'db-config', 'u-1/2')],
      want: { 'configmap.rollguard.io/db-config': 'u-1/2', 'kubectl.kubernetes.io/restartedAt': '2024-01-01T00:00:00Z' },
      changes: [{ key: 'configmap.rollguard.io/db-config', kind: 'ConfigMap', name: 'db-config', from: 'u-1/1', to: 'u-1/2' }],
    },
    {
      name: 'absent object appears',
      current: { 'secret.rollguard.io/db-tls': ABSENT },
      desired: [desired('Secret', 'db-tls', 'u-2/7')],
      want: { 'secret.rollguard.io/db-tls': 'u-2/7' },
      changes: [{ key: 'secret.rollguard.io/db-tls', kind: 'Secret', name: 'db-tls', from: ABSENT, to: 'u-2/7' }],
    },
    {
      name: 'stale rollguard annotations removed, including shortened keys',
      current: {
        'configmap.rollguard.io/old': 'u-9/9',
        [longStale]: 'u-8/8',
        'secret.rollguard.io/db-tls': 'u-2/7',
        'app.kubernetes.io/version': '1.2.3',
      },
      desired: [desired('Secret', 'db-tls', 'u-2/7')],
      want: { 'secret.rollguard.io/db-tls': 'u-2/7', 'app.kubernetes.io/version': '1.2.3' },
      changes: [
        { key: 'configmap.rollguard.io/old', kind: 'ConfigMap', name: 'old', from: 'u-9/9' },
        { key: longStale, kind: 'Secret', from: 'u-8/8' },
      ],
    },
  ];

  it.each(cases)('$name', ({ current, desired, want, changes }) => {
    const before = structuredClone(current);
    expect(withDesiredAnnotations(current, desired)).toEqual(want);
    expect(annotationChanges(current, desired)).toEqual(changes);
    expect(current).toEqual(before);
  });

  it('keeps an odd key such as __proto__ as an ordinary annotation', () => {
    const current = JSON.parse('{"__proto__": "x", "configmap.rollguard.io/old": "u/1"}') as Record<string, string>;
    const result = withDesiredAnnotations(current, []);
    expect(Object.keys(result)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(result)).toBe(Object.prototype);
  });
});

describe('desiredAnnotations with a lagging cache', () => {
  const set = (annotation?: string) => ({
    metadata: { namespace: 'ns' },
    spec: {
      template: {
        metadata: { annotations: (annotation ? { 'configmap.rollguard.io/cfg': annotation } : {}) as Record<string, string> },
        spec: { containers: [{ name: 'c', envFrom: [{ configMapRef: { name: 'cfg' } }] }] },
      },
    },
  });
  const lookup = (rv: string) => () => ({ uid: 'u1', resourceVersion: rv, ignored: false });

  it.each([
    ['keeps a newer version of the same object that another replica wrote', 'u1/20', '10', 'u1/20'],
    ['moves forward to the newer cached version', 'u1/10', '20', 'u1/20'],
    // a stale cache holding an older object (another uid) must not move the annotation back
    ['keeps a stored version newer than the cached one, whatever its uid', 'u0/99', '10', 'u0/99'],
    ['takes a recreated object (other uid, larger resourceVersion)', 'u0/9', '10', 'u1/10'],
    ['replaces absent', 'absent', '10', 'u1/10'],
    ['ignores a value it cannot read', 'garbage', '10', 'u1/10'],
  ])('%s', (_what, current, cachedRv, want) => {
    const [d] = desiredAnnotations(set(current), lookup(cachedRv));
    expect(d!.value).toBe(want);
  });
});

describe('planAnnotations', () => {
  const template = {
    metadata: { annotations: {} as Record<string, string> },
    spec: { containers: [{ name: 'c', envFrom: [{ configMapRef: { name: 'cfg' } }] }] },
  };
  const key = annotationKey('ConfigMap', 'cfg');
  const plan = (opts: { stored?: string; cached?: ObjectVersion; progress?: string; storedAt?: string; annotations?: Record<string, string> }) =>
    planAnnotations({
      namespace: 'ns',
      annotations: opts.annotations,
      template,
      stored: opts.stored === undefined ? {} : { [key]: opts.stored },
      storedAt: opts.storedAt,
      lookup: () => opts.cached,
      cacheProgress: opts.progress === undefined ? undefined : () => opts.progress!,
    });
  const cached = (rv: string, ignored = false): ObjectVersion => ({ uid: 'u2', resourceVersion: rv, ignored });

  it.each([
    // a lagging replica's cache does not know the object yet: absent must not replace the stored version
    { name: 'absent from a cache behind the stored version is held back', stored: 'u1/200', progress: '150', want: 'u1/200', held: true },
    // the object was deleted, and the template's envFrom requires it: no rollout into pods that cannot start
    { name: 'absent from a cache past the stored version: a required object was deleted, the version kept', stored: 'u1/200', progress: '250', want: 'u1/200', held: false },
    { name: 'a version older than the stored one, another uid: held back', stored: 'u1/200', cached: cached('100'), progress: '150', want: 'u1/200', held: true },
    { name: 'stored absent, a version newer than the workload: taken', stored: ABSENT, storedAt: '300', cached: cached('310'), progress: '310', want: 'u2/310', held: false },
    // a lagging cache may still hold a deleted object's last version: a fresh read decides
    { name: 'stored absent, a version older than the workload: held back', stored: ABSENT, storedAt: '300', cached: cached('100'), progress: '320', want: ABSENT, held: true },
  ])('$name', ({ stored, cached: c, progress, storedAt, want, held }) => {
    const result = plan({ stored, cached: c, progress, storedAt });
    expect(result.desired.map((d) => d.value)).toEqual([want]);
    expect(result.heldBack.length > 0).toBe(held);
  });

  it('a deleted object that the pods require keeps its version and is listed missing; read optionally, it becomes absent', () => {
    const gone = plan({ stored: 'u1/200', progress: '250' });
    expect(gone.missing).toEqual([{ key, kind: 'ConfigMap', name: 'cfg', stored: 'u1/200' }]);
    const optionalTemplate = { ...template, spec: { containers: [{ name: 'c', envFrom: [{ configMapRef: { name: 'cfg', optional: true } }] }] } };
    const optional = planAnnotations({ namespace: 'ns', annotations: undefined, template: optionalTemplate, stored: { [key]: 'u1/200' }, lookup: () => undefined, cacheProgress: () => '250' });
    expect(optional.desired.map((d) => d.value)).toEqual([ABSENT]);
    expect(optional.missing).toEqual([]);
    // one optional read and one required read of the same object: required
    const both = { ...template, spec: { containers: [{ name: 'c', envFrom: [{ configMapRef: { name: 'cfg', optional: true } }], env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'a' } } }] }] } };
    expect(planAnnotations({ namespace: 'ns', annotations: undefined, template: both, stored: { [key]: 'u1/200' }, lookup: () => undefined }).desired.map((d) => d.value)).toEqual(['u1/200']);
    // a CREATE holds nothing: a new set's pods cannot start either way
    expect(planAnnotations({ namespace: 'ns', annotations: undefined, template, stored: { [key]: 'u1/200' }, lookup: () => undefined, holdMissing: false }).desired.map((d) => d.value)).toEqual([ABSENT]);
    // absent stays absent, with nothing to tell
    expect(plan({ stored: ABSENT, progress: '250' }).missing).toEqual([]);
  });

  it('freezes an ignored object at its stored value, also once it is gone, and tracks it again when it comes back unignored', () => {
    const ignoredNow = plan({ stored: 'u1/200', cached: cached('210', true) });
    expect(ignoredNow.desired.map((d) => d.value)).toEqual(['u1/200']);
    expect(ignoredNow.frozen).toEqual(['ConfigMap/cfg']);
    const annotations = { [FROZEN_ANNOTATION]: ignoredNow.frozen.join(',') };
    const gone = plan({ stored: 'u1/200', annotations });
    expect(gone.desired.map((d) => d.value)).toEqual(['u1/200']);
    expect(gone.frozen).toEqual(['ConfigMap/cfg']);
    const back = plan({ stored: 'u1/200', cached: cached('400'), annotations });
    expect(back.desired.map((d) => d.value)).toEqual(['u2/400']);
    expect(back.frozen).toEqual([]);
  });

  it('keeps the value of a reference opted out by the workload, and adds none for a new one', () => {
    const annotations = { [IGNORE_CONFIGMAPS_ANNOTATION]: 'cfg' };
    expect(plan({ stored: 'u1/200', cached: cached('300'), annotations }).desired.map((d) => d.value)).toEqual(['u1/200']);
    expect(plan({ cached: cached('300'), annotations }).desired).toEqual([]);
  });
});

