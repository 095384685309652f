import jsonpatch, { type Operation } from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { restarterMutator } from '../../src/restarter/mutator.js';
import type { AdmissionRequest } from '../../src/admission/review.js';
import { CHANGES_IGNORED, dialectFor } from '../../src/compat/stackable.js';
import type { VersionLookup } from '../../src/restarter/annotations.js';

type Json = Record<string, unknown>;
const CM_KEY = 'configmap.restarter.stackable.tech/app-config';
const SECRET_KEY = 'secret.restarter.stackable.tech/creds';
const lookup: VersionLookup = (kind, _ns, name) => (kind === 'ConfigMap' && name === 'app-config' ? { uid: 'cm-uid', resourceVersion: '264', ignored: false } : undefined);

function set(labels: Record<string, string>, templateAnnotations: Record<string, string> = {}, image = 'web:1'): Json {
  return {
    metadata: { name: 'web', namespace: 'demo', resourceVersion: '300', labels, annotations: {} },
    spec: {
      template: {
        metadata: { annotations: templateAnnotations },
        spec: {
          volumes: [{ name: 'bundle', projected: { sources: [{ configMap: { name: 'projected' } }] } }],
          containers: [{ name: 'app', image, envFrom: [{ configMapRef: { name: 'app-config' } }, { secretRef: { name: 'creds' } }] }],
        },
      },
    },
  };
}

function request(operation: 'CREATE' | 'UPDATE', object: Json, oldObject?: Json): AdmissionRequest {
  return {
    uid: 'u',
    kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
    resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
    namespace: 'demo',
    operation,
    object,
    ...(oldObject ? { oldObject } : {}),
  };
}

const annotationsAfter = (object: Json, ops: Operation[]): Record<string, string> =>
  ((jsonpatch.applyPatch(structuredClone(object), ops, true, false).newDocument.spec as Json).template as { metadata: { annotations: Record<string, string> } }).metadata.annotations;

describe('the webhook under --compat stackable', () => {
  const mutate = restarterMutator({ cachesSynced: true, lookup, cacheProgress: () => '400', dialectOf: (labels) => dialectFor(labels, 'stackable') });
  const stackable = { 'restarter.stackable.tech/enabled': 'true' };

  it('annotates a new Stackable set in commons-operator\'s keys and values, without projected volumes', () => {
    const created = set(stackable);
    expect(annotationsAfter(created, mutate(request('CREATE', created), created))).toEqual({ [CM_KEY]: 'cm-uid/264', [SECRET_KEY]: CHANGES_IGNORED });
  });

  it('annotates a rollguard set in rollguard\'s keys, projected volumes included', () => {
    const created = set({ 'rollguard.io/enabled': 'true' });
    expect(Object.keys(annotationsAfter(created, mutate(request('CREATE', created), created))).sort()).toEqual([
      'configmap.rollguard.io/app-config',
      'configmap.rollguard.io/projected',
      'secret.rollguard.io/creds',
    ]);
  });

  it('keeps the old values when the Stackable operator re-applies the template without them', () => {
    const old = set(stackable, { [CM_KEY]: 'cm-uid/208', [SECRET_KEY]: CHANGES_IGNORED });
    const reapplied = set(stackable);
    expect(annotationsAfter(reapplied, mutate(request('UPDATE', reapplied, old), reapplied))).toEqual({ [CM_KEY]: 'cm-uid/208', [SECRET_KEY]: CHANGES_IGNORED });
  });

  it('leaves a set as commons-operator annotated it alone', () => {
    const stored = set(stackable, { [CM_KEY]: 'cm-uid/264', [SECRET_KEY]: CHANGES_IGNORED });
    expect(mutate(request('UPDATE', stored, stored), stored)).toEqual([]);
  });
});
