import type { V1DaemonSet, V1Deployment, V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { MetadataEvent } from '../../src/kube/metadata-cache.js';
import type { ObjectEvent } from '../../src/kube/object-store.js';
import { WORKLOAD_KINDS, type ArgoRollout, type Workload, type WorkloadKind } from '../../src/kube/workloads.js';
import { objectEventWakesReferrers, workloadEventEffect } from '../../src/restarter/wakes.js';

type SetOptions = { generation?: number; annotations?: Record<string, string>; configMap?: string; rv?: string; uid?: string };

/** The same workload in each kind's own shape: the template sits at spec.template in all four. */
function workload(kind: WorkloadKind, opts: SetOptions = {}): Workload {
  const metadata = { namespace: 'ns', name: 'web', uid: opts.uid ?? 'uid-1', generation: opts.generation ?? 1, resourceVersion: opts.rv ?? '1', annotations: opts.annotations };
  const template = { spec: { containers: [{ name: 'app', envFrom: [{ configMapRef: { name: opts.configMap ?? 'app-config' } }] }] } };
  switch (kind) {
    case 'StatefulSet':
      return { metadata, spec: { selector: {}, serviceName: 'web', template } } satisfies V1StatefulSet;
    case 'Deployment':
      return { metadata, spec: { selector: {}, replicas: 2, strategy: { type: 'RollingUpdate' }, template } } satisfies V1Deployment;
    case 'DaemonSet':
      return { metadata, spec: { selector: {}, updateStrategy: { type: 'RollingUpdate' }, template } } satisfies V1DaemonSet;
    case 'Rollout':
      return { apiVersion: 'argoproj.io/v1alpha1', kind: 'Rollout', metadata, spec: { replicas: 2, template } } satisfies ArgoRollout;
  }
}

const CASES = (kind: WorkloadKind) => {
  const set = (opts?: SetOptions) => workload(kind, opts);
  const key = `${kind}/ns/web`;
  return [
    {
      name: 'a new workload is indexed and reconciled',
      event: { type: 'added' as const, current: set() },
      want: { key, index: [{ kind: 'ConfigMap', name: 'app-config' }], wake: true },
    },
    {
      name: 'a template change (new generation) is indexed again and reconciled',
      event: { type: 'updated' as const, previous: set(), current: set({ generation: 2, configMap: 'other' }) },
      want: { key, index: [{ kind: 'ConfigMap', name: 'other' }], wake: true },
    },
    {
      // a relist folds "deleted, created again" into one update, and both generations are 1
      name: 'a set recreated under the same name is indexed again and reconciled',
      event: { type: 'updated' as const, previous: set(), current: set({ uid: 'uid-2', rv: '9', configMap: 'other' }) },
      want: { key, index: [{ kind: 'ConfigMap', name: 'other' }], wake: true },
    },
    {
      name: 'a status write wakes nothing',
      event: { type: 'updated' as const, previous: set(), current: set({ rv: '2' }) },
      want: { key, wake: false },
    },
    {
      name: 'an opt-out annotation wakes the set, the index stays',
      event: { type: 'updated' as const, previous: set(), current: set({ annotations: { 'rollguard.io/ignore-configmaps': 'app-config' } }) },
      want: { key, wake: true },
    },
    {
      name: 'a deleted set leaves the index',
      event: { type: 'deleted' as const, previous: set() },
      want: { key, index: 'remove', wake: false },
    },
  ].map((c) => ({ ...c, kind, event: c.event as ObjectEvent<Workload> }));
};

describe('workloadEventEffect', () => {
  it.each(WORKLOAD_KINDS.flatMap(CASES))('$kind: $name', ({ kind, event, want }) => {
    expect(workloadEventEffect(kind, event)).toEqual(want);
  });

  it('keys the same name of two kinds apart', () => {
    const event = (kind: WorkloadKind): ObjectEvent<Workload> => ({ type: 'added', current: workload(kind) });
    expect(new Set(WORKLOAD_KINDS.map((kind) => workloadEventEffect(kind, event(kind)).key)).size).toBe(WORKLOAD_KINDS.length);
  });
});

describe('objectEventWakesReferrers', () => {
  const version = (ignored: boolean) => ({ uid: 'u', resourceVersion: '1', ignored });
  it.each([
    { name: 'a change of a tracked object', previous: version(false), current: version(false), want: true },
    { name: 'a new object', previous: undefined, current: version(false), want: true },
    { name: 'an object that became ignored', previous: version(false), current: version(true), want: true },
    { name: 'an ignored object that stays ignored', previous: version(true), current: version(true), want: false },
  ])('$name: $want', ({ previous, current, want }) => {
    const event: MetadataEvent = { type: previous ? 'updated' : 'added', namespace: 'ns', name: 'cm', previous, current };
    expect(objectEventWakesReferrers(event)).toBe(want);
  });
});
