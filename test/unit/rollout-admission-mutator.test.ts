import jsonpatch from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import type { AdmissionOperation, AdmissionRequest } from '../../src/admission/review.js';
import { admit } from '../../src/restarter/admit.js';
import { holdPartitionMutator } from '../../src/rollout/partition-hold-mutator.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';

type Json = Record<string, unknown>;

/** A StatefulSet as the API server puts it in an AdmissionReview: defaulted wire JSON. */
function wireSet(opts: { replicas?: number; partition?: number; image?: string; gated?: boolean; revisions?: [string, string] } = {}): Json {
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: {
      name: 'web',
      namespace: 'shop',
      labels: { 'rollguard.io/enabled': 'true' },
      annotations: opts.gated === false ? {} : { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE },
      creationTimestamp: '2025-03-01T10:00:00Z',
    },
    spec: {
      replicas: opts.replicas ?? 3,
      serviceName: 'web',
      selector: { matchLabels: { app: 'web' } },
      template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'app', image: opts.image ?? 'registry.example/web:1' }] } },
      updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: opts.partition ?? 0 } },
    },
    status: opts.revisions ? { currentRevision: opts.revisions[0], updateRevision: opts.revisions[1] } : {},
  };
}

function request(operation: AdmissionOperation, object: Json, oldObject?: Json): AdmissionRequest {
  return {
    uid: 'req-1',
    kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
    resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
    namespace: 'shop',
    name: 'web',
    operation,
    object,
    ...(oldObject ? { oldObject } : {}),
  };
}

function partitionAfter(object: Json, ops: ReturnType<typeof holdPartitionMutator>): unknown {
  const patched = jsonpatch.applyPatch(structuredClone(object), ops).newDocument as { spec: { updateStrategy: { rollingUpdate: { partition: number } } } };
  return patched.spec.updateStrategy.rollingUpdate.partition;
}

describe('holdPartitionMutator', () => {
  it.each([
    ['Deployment', 'deployments'],
    ['DaemonSet', 'daemonsets'],
  ])('holds nothing on a health-gated %s, whose admission the webhook now takes too (StatefulSets only)', (kind, resource) => {
    const object = { ...wireSet({ replicas: 3, partition: 0 }), kind };
    const req = { ...request('CREATE', object), kind: { group: 'apps', version: 'v1', kind }, resource: { group: 'apps', version: 'v1', resource } };
    expect(holdPartitionMutator(req, object)).toEqual([]);
    const answer = admit({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: req }, { cachesSynced: true, lookup: () => undefined, mutators: [holdPartitionMutator] });
    expect(answer.response?.patch, 'no template references, no hold: nothing to patch').toBeUndefined();
  });

  it('holds a new health-gated set at partition = replicas', () => {
    const object = wireSet({ replicas: 3, partition: 0 });
    const ops = holdPartitionMutator(request('CREATE', object), object);
    expect(partitionAfter(object, ops)).toBe(3);
  });

  it('holds again when an UPDATE changes the template mid-rollout', () => {
    const oldObject = wireSet({ partition: 1, revisions: ['web-a', 'web-b'] });
    const object = wireSet({ partition: 1, image: 'registry.example/web:2', revisions: ['web-a', 'web-b'] });
    expect(partitionAfter(object, holdPartitionMutator(request('UPDATE', object, oldObject), object))).toBe(3);
  });

  it("leaves rollguard's own step (partition only) alone", () => {
    const oldObject = wireSet({ partition: 3, image: 'registry.example/web:2', revisions: ['web-a', 'web-b'] });
    const object = wireSet({ partition: 2, image: 'registry.example/web:2', revisions: ['web-a', 'web-b'] });
    expect(holdPartitionMutator(request('UPDATE', object, oldObject), object)).toEqual([]);
  });

  it('follows a scale at rest, and keeps a rollout\'s progress when scaled mid-rollout', () => {
    const atRest = wireSet({ replicas: 5, partition: 3, revisions: ['web-a', 'web-a'] });
    expect(partitionAfter(atRest, holdPartitionMutator(request('UPDATE', atRest, wireSet({ partition: 3, revisions: ['web-a', 'web-a'] })), atRest))).toBe(5);
    const rolling = wireSet({ replicas: 5, partition: 1, revisions: ['web-a', 'web-b'] });
    expect(holdPartitionMutator(request('UPDATE', rolling, wireSet({ partition: 1, revisions: ['web-a', 'web-b'] })), rolling)).toEqual([]);
  });

  it('leaves sets that are not health-gated, and anything but CREATE and UPDATE, alone', () => {
    const plain = wireSet({ gated: false });
    expect(holdPartitionMutator(request('CREATE', plain), plain)).toEqual([]);
    const gated = wireSet();
    expect(holdPartitionMutator(request('DELETE', gated), gated)).toEqual([]);
  });

  it("appends to the webhook's answer and applies on top of the annotation ops", () => {
    const object = wireSet({ replicas: 2 });
    const review = admit(
      { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: request('CREATE', object) },
      { cachesSynced: true, lookup: () => undefined, mutators: [holdPartitionMutator] },
    );
    const ops = JSON.parse(Buffer.from(review.response!.patch!, 'base64').toString('utf8')) as ReturnType<typeof holdPartitionMutator>;
    expect(partitionAfter(object, ops)).toBe(2);
  });

  it('decides the hold on the object as the restarter left it: a step that gets a template change is held', () => {
    const annotated = (value: string, partition: number): Json => {
      const set = wireSet({ partition, revisions: ['web-a', 'web-b'] });
      const template = (set.spec as Json).template as Json;
      template.metadata = { labels: { app: 'web' }, annotations: { 'configmap.rollguard.io/cfg': value } };
      ((template.spec as Json).containers as Json[])[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
      return set;
    };
    const lookup = () => ({ uid: 'u', resourceVersion: '264', ignored: false });
    const answer = (object: Json, oldObject: Json) => {
      const review = admit({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: request('UPDATE', object, oldObject) }, { cachesSynced: true, lookup, mutators: [holdPartitionMutator] });
      return review.response?.patch ? (JSON.parse(Buffer.from(review.response.patch, 'base64').toString('utf8')) as { path: string }[]) : [];
    };
    // rollguard's step 2 -> 1 while the ConfigMap changed: the template stays, so nothing bumps and the step goes on
    expect(answer(annotated('u/208', 1), annotated('u/208', 2))).toEqual([]);
    // an owner's template change in the same write: bumped, and the hold sees the bump
    const changed = annotated('u/208', 1);
    (((changed.spec as Json).template as Json).spec as { containers: Json[] }).containers[0]!.image = 'registry.example/web:2';
    const paths = answer(changed, annotated('u/208', 2)).map((op) => op.path);
    expect(paths).toContain('/spec/template/metadata/annotations/configmap.rollguard.io~1cfg');
    expect(paths).toContain('/spec/updateStrategy/rollingUpdate/partition');
  });
});

