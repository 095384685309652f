import { describe, expect, it } from 'vitest';
import jsonpatch from 'fast-json-patch';
import type { Operation } from 'fast-json-patch';
import type { V1StatefulSet } from '@kubernetes/client-node';
import { admit, type AdmissionDeps } from '../../src/restarter/admit.js';
import { dialectFor, STACKABLE_ENABLED_LABEL } from '../../src/compat/stackable.js';
import type { Mutator as TemplateMutator } from '../../src/admission/mutators.js';
import { admissionResponseFor, type AdmissionRequest, type AdmissionReview } from '../../src/admission/review.js';
import {
  ABSENT,
  annotationKey,
  desiredAnnotations,
  IGNORE_SECRETS_ANNOTATION,
  withDesiredAnnotations,
  type ObjectVersion,
  type VersionLookup,
} from '../../src/restarter/annotations.js';

const UID = 'b6d7e3c0-1f2a-4c3b-9d8e-000000000001';

const versions: Record<string, ObjectVersion> = {
  'ConfigMap/shop/db-config': { uid: 'cm-uid', resourceVersion: '11', ignored: false },
  'Secret/shop/db-tls': { uid: 'tls-uid', resourceVersion: '22', ignored: false },
  'ConfigMap/shop/ca-bundle': { uid: 'ca-uid', resourceVersion: '33', ignored: true },
  'ConfigMap/other/db-config': { uid: 'other-uid', resourceVersion: '44', ignored: false },
};
const lookup: VersionLookup = (kind, namespace, name) => versions[`${kind}/${namespace}/${name}`];
const synced: AdmissionDeps = { cachesSynced: true, lookup };

// A StatefulSet as the API server sends it: decoded JSON, no class instances.
function statefulSet(template: Record<string, unknown>, metadata: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: 'db', namespace: 'shop', labels: { 'rollguard.io/enabled': 'true' }, ...metadata },
    spec: {
      serviceName: 'db',
      replicas: 3,
      selector: { matchLabels: { app: 'db' } },
      template: {
        ...template,
        spec: {
          containers: [
            { name: 'db', image: 'postgres:16', envFrom: [{ secretRef: { name: 'db-tls' } }] },
          ],
          volumes: [{ name: 'config', configMap: { name: 'db-config' } }],
          ...(template.spec as Record<string, unknown> | undefined),
        },
      },
    },
  };
}

/** The same pod template in a Deployment's shape and in a DaemonSet's: the template sits at spec.template in each. */
function deployment(template: Record<string, unknown>, metadata: Record<string, unknown> = {}): Record<string, unknown> {
  const { serviceName: _serviceName, ...spec } = statefulSet(template, metadata).spec as Record<string, unknown>;
  return { ...statefulSet(template, metadata), kind: 'Deployment', spec: { ...spec, strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1 } } } };
}

function daemonSet(template: Record<string, unknown>, metadata: Record<string, unknown> = {}): Record<string, unknown> {
  const { serviceName: _serviceName, replicas: _replicas, ...spec } = statefulSet(template, metadata).spec as Record<string, unknown>;
  return { ...statefulSet(template, metadata), kind: 'DaemonSet', spec: { ...spec, updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } } } };
}

function review(object: unknown, request: Partial<AdmissionRequest> = {}): AdmissionReview {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: UID,
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      namespace: 'shop',
      name: 'db',
      operation: 'CREATE',
      object,
      ...request,
    },
  };
}

function patchOf(answer: AdmissionReview): Operation[] | undefined {
  const response = answer.response!;
  if (response.patch === undefined) {
    expect(response.patchType).toBeUndefined();
    return undefined;
  }
  expect(response.patchType).toBe('JSONPatch');
  return JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) as Operation[];
}

// What the API server does with the answer: apply the patch to the object it sent.
function patched(object: Record<string, unknown>, answer: AdmissionReview): V1StatefulSet {
  const ops = patchOf(answer) ?? [];
  return jsonpatch.applyPatch(structuredClone(object), ops, true, true).newDocument as V1StatefulSet;
}

const configKey = annotationKey('ConfigMap', 'db-config');
const tlsKey = annotationKey('Secret', 'db-tls');
const upToDate = { [configKey]: 'cm-uid/11', [tlsKey]: 'tls-uid/22' };

describe('admit: the patched template carries the desired annotations', () => {
  const cases: {
    name: string;
    object: Record<string, unknown>;
    request?: Partial<AdmissionRequest>;
    want: Record<string, string>;
  }[] = [
    { name: 'CREATE of a template without metadata', object: statefulSet({}), want: upToDate },
    {
      name: 'template metadata without annotations',
      object: statefulSet({ metadata: { labels: { app: 'db' } } }),
      want: upToDate,
    },
    {
      name: 'template metadata with annotations: null',
      object: statefulSet({ metadata: { labels: { app: 'db' }, annotations: null } }),
      want: upToDate,
    },
    {
      name: "others' annotations remain",
      object: statefulSet({ metadata: { annotations: { 'prometheus.io/scrape': 'true', 'kubectl.kubernetes.io/restartedAt': 'now' } } }),
      want: { 'prometheus.io/scrape': 'true', 'kubectl.kubernetes.io/restartedAt': 'now', ...upToDate },
    },
    {
      name: 'UPDATE with a changed version and a stale annotation',
      object: statefulSet({
        metadata: { annotations: { [configKey]: 'cm-uid/10', [tlsKey]: 'tls-uid/22', 'configmap.rollguard.io/removed': 'x/1', team: 'a' } },
      }),
      request: { operation: 'UPDATE' },
      want: { team: 'a', ...upToDate },
    },
    {
      name: 'a missing object is absent',
      object: statefulSet({ spec: { volumes: [{ name: 'config', configMap: { name: 'not-created-yet', optional: true } }] } }),
      want: { [annotationKey('ConfigMap', 'not-created-yet')]: ABSENT, [tlsKey]: 'tls-uid/22' },
    },
    {
      name: 'an object labelled ignore is not tracked',
      object: statefulSet({ spec: { volumes: [{ name: 'ca', configMap: { name: 'ca-bundle' } }] } }),
      want: { [tlsKey]: 'tls-uid/22' },
    },
    {
      name: 'a Secret named in rollguard.io/ignore-secrets is not tracked',
      object: statefulSet({}, { annotations: { [IGNORE_SECRETS_ANNOTATION]: 'db-tls' } }),
      want: { [configKey]: 'cm-uid/11' },
    },
    {
      name: 'namespace from the object when the request has none',
      object: statefulSet({}, { namespace: 'other' }),
      request: { namespace: undefined },
      want: { [configKey]: 'other-uid/44', [tlsKey]: ABSENT },
    },
    {
      name: "the request's namespace wins over an empty object namespace",
      object: statefulSet({}, { namespace: undefined }),
      want: upToDate,
    },
    {
      name: 'references only in init containers and projected volumes',
      object: statefulSet({
        spec: {
          containers: [{ name: 'db', image: 'postgres:16' }],
          initContainers: [{ name: 'init', envFrom: [{ secretRef: { name: 'db-tls' } }] }],
          volumes: [{ name: 'all', projected: { sources: [{ configMap: { name: 'db-config' } }] } }],
        },
      }),
      want: upToDate,
    },
    {
      name: 'a 253-character name gets a shortened key the API server accepts',
      object: statefulSet({ spec: { volumes: [{ name: 'c', configMap: { name: 'c'.repeat(253) } }] } }),
      want: { [annotationKey('ConfigMap', 'c'.repeat(253))]: ABSENT, [tlsKey]: 'tls-uid/22' },
    },
  ];

  it.each(cases)('$name', ({ object, request, want }) => {
    const before = structuredClone(object);
    const answer = admit(review(object, request), synced);

    expect(answer).toMatchObject({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: UID, allowed: true } });
    expect(patchOf(answer)).not.toBeUndefined();
    expect(patched(object, answer).spec!.template.metadata!.annotations).toEqual(want);
    // the request's object is left as it came
    expect(object).toEqual(before);
  });

  it('agrees with withDesiredAnnotations', () => {
    const object = statefulSet({ metadata: { annotations: { a: '1', 'secret.rollguard.io/old': 'x/1' } } });
    const set = object as V1StatefulSet;
    const want = withDesiredAnnotations(set.spec!.template.metadata!.annotations, desiredAnnotations(set, lookup));
    expect(patched(object, admit(review(object), synced)).spec!.template.metadata!.annotations).toEqual(want);
  });

  it('escapes "/" in annotation keys as ~1 and touches only rollguard keys', () => {
    const object = statefulSet({ metadata: { annotations: { 'example.com/keep': 'v', [configKey]: 'cm-uid/10', 'secret.rollguard.io/old': 'x/1' } } });
    expect(patchOf(admit(review(object, { operation: 'UPDATE' }), synced))).toEqual([
      { op: 'replace', path: '/spec/template/metadata/annotations/configmap.rollguard.io~1db-config', value: 'cm-uid/11' },
      { op: 'add', path: '/spec/template/metadata/annotations/secret.rollguard.io~1db-tls', value: 'tls-uid/22' },
      { op: 'remove', path: '/spec/template/metadata/annotations/secret.rollguard.io~1old' },
    ]);
  });

  it('patches a second time to nothing (reinvocation is idempotent)', () => {
    const object = statefulSet({});
    const once = patched(object, admit(review(object), synced)) as unknown as Record<string, unknown>;
    expect(patchOf(admit(review(once), synced))).toBeUndefined();
  });

  it('answers a dry run like any request', () => {
    const object = statefulSet({});
    expect(admit(review(object, { dryRun: true }), synced)).toEqual(admit(review(object), synced));
  });
});

describe('admit: allowed without a patch', () => {
  const plainTemplate = statefulSet({ metadata: { annotations: { team: 'a' } }, spec: { containers: [{ name: 'db' }], volumes: [] } });
  const cases: { name: string; review: AdmissionReview; deps?: AdmissionDeps }[] = [
    { name: 'UPDATE already carrying the right annotations', review: review(statefulSet({ metadata: { annotations: upToDate } }), { operation: 'UPDATE' }) },
    { name: 'template without references and without rollguard annotations', review: review(plainTemplate) },
    { name: 'caches not synced', review: review(statefulSet({})), deps: { cachesSynced: false, lookup } },
    { name: 'a ReplicaSet (its Deployment carries the template)', review: review(statefulSet({}), { kind: { group: 'apps', version: 'v1', kind: 'ReplicaSet' } }) },
    { name: 'a Deployment of another group', review: review(deployment({}), { kind: { group: 'example.com', version: 'v1', kind: 'Deployment' } }) },
    { name: 'a StatefulSet of another group', review: review(statefulSet({}), { kind: { group: 'example.com', version: 'v1', kind: 'StatefulSet' } }) },
    { name: 'apps/v1beta2', review: review(statefulSet({}), { kind: { group: 'apps', version: 'v1beta2', kind: 'StatefulSet' } }) },
    { name: 'DELETE', review: review(null, { operation: 'DELETE', oldObject: statefulSet({}) }) },
    { name: 'CONNECT', review: review(null, { operation: 'CONNECT' }) },
    { name: 'an UPDATE of the status subresource', review: review(statefulSet({}), { operation: 'UPDATE', subResource: 'status' }) },
    { name: 'an object that is not an object', review: review('nonsense') },
    { name: 'a StatefulSet without spec', review: review({ metadata: { name: 'db' } }) },
  ];

  it.each(cases)('$name', ({ review, deps }) => {
    expect(admit(review, deps ?? synced)).toEqual({
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      response: { uid: UID, allowed: true },
    });
  });

  it('throws, naming the fix, for a review without request', () => {
    expect(() => admit({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' }, synced)).toThrow(/parseAdmissionReview/);
  });
});

describe('admit: mutators', () => {
  const partition: Operation = { op: 'replace', path: '/spec/replicas', value: 3 };

  it('appends their operations after the annotation operations and hands them the request', () => {
    const seen: { uid: string; name: unknown }[] = [];
    const mutator: TemplateMutator = (req, object) => {
      seen.push({ uid: req.uid, name: (object.metadata as { name?: string }).name });
      return [partition];
    };
    const ops = patchOf(admit(review(statefulSet({})), { ...synced, mutators: [mutator] }))!;
    expect(ops[0]).toMatchObject({ op: 'add', path: '/spec/template/metadata' });
    expect(ops.at(-1)).toEqual(partition);
    expect(seen).toEqual([{ uid: UID, name: 'db' }]);
  });

  it('patches for a mutator alone when the annotations are up to date', () => {
    const object = statefulSet({ metadata: { annotations: upToDate } });
    expect(patchOf(admit(review(object, { operation: 'UPDATE' }), { ...synced, mutators: [() => [partition]] }))).toEqual([partition]);
  });

  it('is not asked before the caches have synced nor for other kinds', () => {
    let calls = 0;
    const mutators: TemplateMutator[] = [() => (calls++, [partition])];
    admit(review(statefulSet({})), { cachesSynced: false, lookup, mutators });
    admit(review(statefulSet({}), { kind: { group: 'apps', version: 'v1', kind: 'ReplicaSet' } }), { ...synced, mutators });
    expect(calls).toBe(0);
  });
});

describe('admit: Deployments and DaemonSets get the same annotations', () => {
  const kinds = [
    { kind: 'Deployment', resource: 'deployments', shape: deployment },
    { kind: 'DaemonSet', resource: 'daemonsets', shape: daemonSet },
  ];
  const as = (kind: string, resource: string, object: unknown, request: Partial<AdmissionRequest> = {}): AdmissionReview =>
    review(object, { kind: { group: 'apps', version: 'v1', kind }, resource: { group: 'apps', version: 'v1', resource }, ...request });

  it.each(kinds)('$kind: CREATE is patched to the versions the caches know, as a StatefulSet is', ({ kind, resource, shape }) => {
    const object = shape({});
    expect(patched(object, admit(as(kind, resource, object), synced)).spec?.template.metadata?.annotations).toEqual(upToDate);
    expect(patchOf(admit(as(kind, resource, object), synced))).toEqual(patchOf(admit(review(statefulSet({})), synced)));
  });

  it.each(kinds)('$kind: an UPDATE with the template unchanged keeps the old values', ({ kind, resource, shape }) => {
    const old = shape({ metadata: { annotations: { team: 'a', [configKey]: 'cm-uid/5', [tlsKey]: 'tls-uid/22' } } });
    // the owner's re-apply, without rollguard's annotations
    const object = shape({ metadata: { annotations: { team: 'a' } } });
    const answer = admit(as(kind, resource, object, { operation: 'UPDATE', oldObject: old }), synced);
    expect(patched(object, answer).spec?.template.metadata?.annotations).toEqual({ team: 'a', [configKey]: 'cm-uid/5', [tlsKey]: 'tls-uid/22' });
  });

  it.each(kinds)('$kind with both labels under --compat stackable: rollguard\'s keys (Stackable\'s restarter is for StatefulSets)', ({ kind, resource, shape }) => {
    const object = shape({}, { labels: { 'rollguard.io/enabled': 'true', [STACKABLE_ENABLED_LABEL]: 'true' } });
    const deps: AdmissionDeps = { ...synced, dialectOf: (labels) => dialectFor(labels, 'stackable') };
    expect(patched(object, admit(as(kind, resource, object), deps)).spec?.template.metadata?.annotations).toEqual(upToDate);
    const set = statefulSet({}, { labels: { [STACKABLE_ENABLED_LABEL]: 'true' } });
    expect(Object.keys(patched(set, admit(review(set), deps)).spec?.template.metadata?.annotations ?? {}).every((k) => k.includes('restarter.stackable.tech/'))).toBe(true);
  });

  it.each(kinds)('$kind: opt-outs on the workload hold', ({ kind, resource, shape }) => {
    const object = shape({}, { annotations: { [IGNORE_SECRETS_ANNOTATION]: 'db-tls' } });
    expect(patched(object, admit(as(kind, resource, object), synced)).spec?.template.metadata?.annotations).toEqual({ [configKey]: 'cm-uid/11' });
  });
});

describe('admit: Argo Rollouts, only with --argo-rollouts', () => {
  const ARGO = { group: 'argoproj.io', version: 'v1alpha1' };
  function rollout(template: Record<string, unknown> | undefined, metadata: Record<string, unknown> = {}): Record<string, unknown> {
    const { serviceName: _serviceName, ...spec } = statefulSet(template ?? {}, metadata).spec as Record<string, unknown>;
    const base = { ...statefulSet({}, metadata), apiVersion: 'argoproj.io/v1alpha1', kind: 'Rollout' };
    if (template === undefined) {
      const { template: _template, ...rest } = spec;
      return { ...base, spec: { ...rest, workloadRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'db-base' } } };
    }
    return { ...base, spec: { ...spec, strategy: { canary: { steps: [{ setWeight: 50 }] } } } };
  }
  const as = (object: unknown, request: Partial<AdmissionRequest> = {}): AdmissionReview =>
    review(object, { kind: { ...ARGO, kind: 'Rollout' }, resource: { ...ARGO, resource: 'rollouts' }, ...request });
  const argo: AdmissionDeps = { ...synced, kinds: ['StatefulSet', 'Deployment', 'DaemonSet', 'Rollout'] };

  it('CREATE of a Rollout with its own template is patched to the versions the caches know, as a Deployment is', () => {
    const object = rollout({});
    expect(patched(object, admit(as(object), argo)).spec?.template.metadata?.annotations).toEqual(upToDate);
    expect(patchOf(admit(as(object), argo))).toEqual(patchOf(admit(review(deployment({}), { kind: { group: 'apps', version: 'v1', kind: 'Deployment' } }), synced)));
  });

  it('an UPDATE with the template unchanged keeps the old values', () => {
    const old = rollout({ metadata: { labels: { app: 'db' }, annotations: { [configKey]: 'cm-uid/5', [tlsKey]: 'tls-uid/22' } } });
    // the owner's re-apply, without rollguard's annotations
    const object = rollout({ metadata: { labels: { app: 'db' } } });
    const answer = admit(as(object, { operation: 'UPDATE', oldObject: old }), argo);
    expect(patched(object, answer).spec?.template.metadata?.annotations).toEqual({ [configKey]: 'cm-uid/5', [tlsKey]: 'tls-uid/22' });
  });

  it('without the flag (kinds omitted: the apps/v1 three), a Rollout is allowed without a patch', () => {
    const object = rollout({});
    expect(admit(as(object), synced).response).toEqual({ uid: UID, allowed: true });
    expect(admit(as(object), { ...synced, kinds: ['StatefulSet', 'Deployment', 'DaemonSet'] }).response).toEqual({ uid: UID, allowed: true });
  });

  it('a Rollout of another group or version, or a status write, is not routed', () => {
    const object = rollout({});
    expect(admit(as(object, { kind: { group: 'example.com', version: 'v1alpha1', kind: 'Rollout' } }), argo).response?.patch).toBeUndefined();
    expect(admit(as(object, { kind: { ...ARGO, kind: 'Rollout' }, subResource: 'status', operation: 'UPDATE', oldObject: object }), argo).response?.patch).toBeUndefined();
  });

  it('a Rollout with spec.workloadRef has no template to annotate: no template is added', () => {
    const object = rollout(undefined);
    const after = patched(object, admit(as(object), argo)) as unknown as { spec?: { template?: unknown } };
    expect(after.spec?.template).toBeUndefined();
  });
});

describe('admissionResponseFor', () => {
  it.each([
    { name: 'no operations', ops: [], want: { uid: 'u', allowed: true } },
    {
      name: 'operations as base64 JSON Patch',
      ops: [{ op: 'remove', path: '/a' }] satisfies Operation[],
      want: { uid: 'u', allowed: true, patchType: 'JSONPatch', patch: Buffer.from('[{"op":"remove","path":"/a"}]').toString('base64') },
    },
  ])('$name', ({ ops, want }) => {
    expect(admissionResponseFor('u', ops)).toEqual({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: want });
  });
});
