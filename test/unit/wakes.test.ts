import type { V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { MetadataEvent } from '../../src/kube/metadata-cache.js';
import { objectEventWakesReferrers, statefulSetEventEffect } from '../../src/restarter/wakes.js';

function set(opts: { generation?: number; annotations?: Record<string, string>; configMap?: string; rv?: string; uid?: string } = {}): V1StatefulSet {
  return {
    metadata: { namespace: 'ns', name: 'web', uid: opts.uid ?? 'uid-1', generation: opts.generation ?? 1, resourceVersion: opts.rv ?? '1', annotations: opts.annotations },
    spec: {
      selector: {},
      serviceName: 'web',
      template: { spec: { containers: [{ name: 'app', envFrom: [{ configMapRef: { name: opts.configMap ?? 'app-config' } }] }] } },
    },
  };
}

describe('statefulSetEventEffect', () => {
  it.each([
    {
      name: 'a new set is indexed and reconciled',
      event: { type: 'added' as const, current: set() },
      want: { key: 'ns/web', index: [{ kind: 'ConfigMap', name: 'app-config' }], wake: true },
    },
    {
      name: 'a template change (new generation) is indexed again and reconciled',
      event: { type: 'updated' as const, previous: set(), current: set({ generation: 2, configMap: 'other' }) },
      want: { key: 'ns/web', index: [{ kind: 'ConfigMap', name: 'other' }], wake: true },
    },
    {
      // a relist folds "deleted, created again" into one update, and both generations are 1
      name: 'a set recreated under the same name is indexed again and reconciled',
      event: { type: 'updated' as const, previous: set(), current: set({ uid: 'uid-2', rv: '9', configMap: 'other' }) },
      want: { key: 'ns/web', index: [{ kind: 'ConfigMap', name: 'other' }], wake: true },
    },
    {
      name: 'a status write wakes nothing',
      event: { type: 'updated' as const, previous: set(), current: set({ rv: '2' }) },
      want: { key: 'ns/web', wake: false },
    },
    {
      name: 'an opt-out annotation wakes the set, the index stays',
      event: { type: 'updated' as const, previous: set(), current: set({ annotations: { 'rollguard.io/ignore-configmaps': 'app-config' } }) },
      want: { key: 'ns/web', wake: true },
    },
    {
      name: 'a deleted set leaves the index',
      event: { type: 'deleted' as const, previous: set() },
      want: { key: 'ns/web', index: 'remove', wake: false },
    },
  ])('$name', ({ event, want }) => {
    expect(statefulSetEventEffect(event)).toEqual(want);
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
