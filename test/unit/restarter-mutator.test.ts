import jsonpatch, { type Operation } from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { restarterMutator } from '../../src/restarter/mutator.js';
import type { AdmissionRequest } from '../../src/admission/review.js';
import { LAST_RESTART_ANNOTATION, RESTART_REASON_ANNOTATION, annotationKey, type VersionLookup } from '../../src/restarter/annotations.js';

type Json = Record<string, unknown>;
const KEY = annotationKey('ConfigMap', 'app-config');
const NOW = { uid: 'cm-uid', resourceVersion: '264', ignored: false };
const lookup: VersionLookup = (kind, _ns, name) => (kind === 'ConfigMap' && name === 'app-config' ? NOW : undefined);

function set(opts: { image?: string; value?: string; annotations?: Record<string, string>; rv?: string } = {}): Json {
  return {
    metadata: { name: 'web', namespace: 'demo', resourceVersion: opts.rv ?? '300', annotations: opts.annotations ?? {} },
    spec: {
      template: {
        metadata: { annotations: opts.value === undefined ? {} : { [KEY]: opts.value } },
        spec: { containers: [{ name: 'app', image: opts.image ?? 'web:1', envFrom: [{ configMapRef: { name: 'app-config' } }] }] },
      },
    },
  };
}

function update(object: Json, oldObject: Json): AdmissionRequest {
  return {
    uid: 'u',
    kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
    resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
    namespace: 'demo',
    operation: 'UPDATE',
    object,
    oldObject,
  };
}

const apply = (object: Json, ops: Operation[]): Json => jsonpatch.applyPatch(structuredClone(object), ops, true, false).newDocument;
const templateValue = (object: Json): string | undefined =>
  ((object.spec as Json).template as { metadata: { annotations: Record<string, string> } }).metadata.annotations[KEY];
const setAnnotations = (object: Json): Record<string, string> => (object.metadata as { annotations: Record<string, string> }).annotations;

describe('restarterMutator on UPDATE', () => {
  const mutate = restarterMutator({ cachesSynced: true, lookup, cacheProgress: () => '400' });

  // kubectl annotate, a GitOps re-apply, a partition step: the template is the same
  it('keeps the old values of an unchanged template although the ConfigMap changed: the bump is the loop\'s', () => {
    const old = set({ value: 'cm-uid/208' });
    const annotated = set({ value: 'cm-uid/208', annotations: { team: 'a' } });
    expect(mutate(update(annotated, old), annotated)).toEqual([]);
  });

  it('restores the old values when the owner re-applies without them, even before the caches sync', () => {
    const old = set({ value: 'cm-uid/208' });
    const reapplied = set();
    for (const synced of [true, false]) {
      const m = restarterMutator({ cachesSynced: synced, lookup });
      expect(templateValue(apply(reapplied, m(update(reapplied, old), reapplied)))).toBe('cm-uid/208');
    }
  });

  it('folds a bump into an owner\'s template change and says so for the leader\'s Event; a reinvocation adds nothing', () => {
    const old = set({ value: 'cm-uid/208' });
    const upgraded = set({ value: 'cm-uid/208', image: 'web:2' });
    const ops = mutate(update(upgraded, old), upgraded);
    const patched = apply(upgraded, ops);
    expect(templateValue(patched)).toBe('cm-uid/264');
    expect(setAnnotations(patched)[RESTART_REASON_ANNOTATION]).toBe('ConfigMap app-config changed (resourceVersion 208 → 264)');
    expect(mutate(update(patched, old), patched)).toEqual([]);
  });

  it('takes the loop\'s own write as written', () => {
    const old = set({ value: 'cm-uid/208', annotations: { [LAST_RESTART_ANNOTATION]: '2026-12-01T09:00:00Z' } });
    const loopWrite = set({ value: 'cm-uid/264', annotations: { [LAST_RESTART_ANNOTATION]: '2026-12-01T10:00:00Z' } });
    expect(mutate(update(loopWrite, old), loopWrite)).toEqual([]);
  });

  it('never writes an older value back from a lagging cache, across uids', () => {
    const lagging = restarterMutator({ cachesSynced: true, lookup: () => ({ uid: 'old-uid', resourceVersion: '100', ignored: false }), cacheProgress: () => '150' });
    const old = set({ value: 'new-uid/200' });
    const upgraded = set({ value: 'new-uid/200', image: 'web:2' });
    expect(templateValue(apply(upgraded, lagging(update(upgraded, old), upgraded)))).toBe('new-uid/200');
    // nor absent, from a cache that has not seen the object yet
    const blind = restarterMutator({ cachesSynced: true, lookup: () => undefined, cacheProgress: () => '150' });
    expect(templateValue(apply(upgraded, blind(update(upgraded, old), upgraded)))).toBe('new-uid/200');
  });
});

describe('restarterMutator and a deleted referenced object', () => {
  const gone = restarterMutator({ cachesSynced: true, lookup: () => undefined, cacheProgress: () => '400' });

  it('an owner\'s template change while a required object is gone keeps the version the pods run with, and names no restart', () => {
    const old = set({ value: 'cm-uid/208' });
    const upgraded = set({ value: 'cm-uid/208', image: 'web:2' });
    const patched = apply(upgraded, gone(update(upgraded, old), upgraded));
    expect(templateValue(patched)).toBe('cm-uid/208');
    expect(setAnnotations(patched)[RESTART_REASON_ANNOTATION]).toBeUndefined();
  });

  it('read with optional: true, the change takes absent (its pods start without the object)', () => {
    const optional = (s: Json): Json => {
      const copy = structuredClone(s);
      ((copy.spec as Json).template as { spec: { containers: { envFrom: unknown }[] } }).spec.containers[0]!.envFrom = [{ configMapRef: { name: 'app-config', optional: true } }];
      return copy;
    };
    const old = optional(set({ value: 'cm-uid/208' }));
    const upgraded = optional(set({ value: 'cm-uid/208', image: 'web:2' }));
    expect(templateValue(apply(upgraded, gone(update(upgraded, old), upgraded)))).toBe('absent');
  });
});

describe('restarterMutator and the digest record', () => {
  const mutate = restarterMutator({ cachesSynced: true, lookup, cacheProgress: () => '400' });
  const record = (v: string): Record<string, string> => ({ 'rollguard.io/digests': JSON.stringify({ [KEY]: { v, k: 'k1', d: { a: '0123456789abcdef' } } }) });

  it('an owner\'s template change does not bump a version the record knows to hold the same data', () => {
    const old = set({ value: 'cm-uid/208', annotations: record('cm-uid/264') });
    const upgraded = set({ value: 'cm-uid/208', image: 'web:2', annotations: record('cm-uid/264') });
    const after = apply(upgraded, mutate(update(upgraded, old), upgraded));
    expect(templateValue(after)).toBe('cm-uid/208');
    expect(setAnnotations(after)[RESTART_REASON_ANNOTATION]).toBeUndefined();
  });

  it('bumps when the record is older than the cache\'s version, or stale for the template\'s value', () => {
    for (const [value, v] of [['cm-uid/208', 'cm-uid/230'], ['cm-uid/240', 'cm-uid/230']] as const) {
      const old = set({ value, annotations: record(v) });
      const upgraded = set({ value, image: 'web:2', annotations: record(v) });
      expect(templateValue(apply(upgraded, mutate(update(upgraded, old), upgraded)))).toBe('cm-uid/264');
    }
  });
});

describe('restarterMutator and the rollguard.io/timing record', () => {
  const TIMING = 'debounce=5s min-restart-interval=1m max-restarts-per-second=5 rollout-min-step-interval=10s rollout-min-ready=10s';
  const create = (object: Json): AdmissionRequest => ({ ...update(object, {}), operation: 'CREATE', oldObject: undefined });

  it("writes it into a CREATE, beside the template's versions, before the caches sync too (a new object's generation is 1 whatever it carries)", () => {
    for (const synced of [true, false]) {
      const m = restarterMutator({ cachesSynced: synced, lookup, timing: TIMING });
      for (const annotations of [{}, { team: 'a' }] as Record<string, string>[]) {
        const created = set({ annotations });
        const patched = apply(created, m(create(created), created));
        expect(setAnnotations(patched)).toEqual({ ...annotations, 'rollguard.io/timing': TIMING });
        expect(templateValue(patched)).toBe(synced ? 'cm-uid/264' : undefined);
      }
      const bare = set();
      delete (bare.metadata as Json).annotations;
      expect(setAnnotations(apply(bare, m(create(bare), bare)))).toEqual({ 'rollguard.io/timing': TIMING });
    }
  });

  it('never into an UPDATE: the loop refreshes it with the writes it makes anyway', () => {
    const m = restarterMutator({ cachesSynced: true, lookup, timing: TIMING });
    const old = set({ value: 'cm-uid/208' });
    const annotated = set({ value: 'cm-uid/208', annotations: { team: 'a' } });
    expect(m(update(annotated, old), annotated)).toEqual([]);
    const upgraded = set({ value: 'cm-uid/208', image: 'web:2' });
    expect(setAnnotations(apply(upgraded, m(update(upgraded, old), upgraded)))['rollguard.io/timing']).toBeUndefined();
  });
});

describe('restarterMutator and whole-object writes (kubectl replace, rollout undo, a copy)', () => {
  const OWN = 'system:serviceaccount:rollguard-system:rollguard';
  const RECORDS = { [LAST_RESTART_ANNOTATION]: '2026-12-01T09:00:00Z', 'rollguard.io/digests': '{}', 'rollguard.io/timing': 'debounce=5s' };
  const by = (request: AdmissionRequest, username: string): AdmissionRequest => ({ ...request, userInfo: { username } });
  const create = (object: Json): AdmissionRequest => ({ ...update(object, {}), operation: 'CREATE', oldObject: undefined });
  const manifest = (): Json => {
    // the manifest the set was created from: no annotation map in the template, none on the set
    const m = set();
    delete ((m.spec as Json).template as { metadata: Json }).metadata.annotations;
    delete (m.metadata as Json).annotations;
    return m;
  };

  it("a replace of the unchanged manifest keeps the template's values although the ConfigMap changed: an absent map is the owner's, as {} is", () => {
    const mutate = restarterMutator({ cachesSynced: true, lookup, cacheProgress: () => '400' });
    const old = set({ value: 'cm-uid/208' });
    const replaced = apply(manifest(), mutate(update(manifest(), old), manifest()));
    expect(templateValue(replaced)).toBe('cm-uid/208');
    expect(setAnnotations(replaced)?.[RESTART_REASON_ANNOTATION]).toBeUndefined();
  });

  it("with its own identity known, keeps rollguard's records through a user's write that drops or changes them, and takes its own writes as written", () => {
    const mutate = restarterMutator({ cachesSynced: true, lookup, cacheProgress: () => '400', ownUser: OWN });
    const old = set({ value: 'cm-uid/208', annotations: { ...RECORDS, team: 'a' } });
    const replaced = apply(manifest(), mutate(by(update(manifest(), old), 'admin'), manifest()));
    expect(setAnnotations(replaced)).toEqual(RECORDS);
    expect(templateValue(replaced)).toBe('cm-uid/208');
    // `kubectl rollout undo` of a Deployment copies an old ReplicaSet's annotations: older records
    const undone = set({ value: 'cm-uid/208', annotations: { ...RECORDS, [LAST_RESTART_ANNOTATION]: '2026-11-01T09:00:00Z' } });
    expect(setAnnotations(apply(undone, mutate(by(update(undone, old), 'admin'), undone)))).toEqual({ ...RECORDS });
    // the loop's removal of the restart reason passes, although it changes no restart time
    const withReason = set({ value: 'cm-uid/208', annotations: { ...RECORDS, [RESTART_REASON_ANNOTATION]: 'x' } });
    expect(mutate(by(update(old, withReason), OWN), old)).toEqual([]);
    // a user who writes a restart time is no longer taken for the loop
    const forged = set({ value: 'cm-uid/264', annotations: { ...RECORDS, [LAST_RESTART_ANNOTATION]: '2026-12-01T10:00:00Z' } });
    const after = apply(forged, mutate(by(update(forged, old), 'admin'), forged));
    expect(setAnnotations(after)[LAST_RESTART_ANNOTATION]).toBe(RECORDS[LAST_RESTART_ANNOTATION]);
    expect(templateValue(after)).toBe('cm-uid/208');
  });

  it("a copy of another set (kubectl get -o yaml, a restore) brings neither its records nor versions of another object", () => {
    const mutate = restarterMutator({ cachesSynced: true, lookup, cacheProgress: () => '400' });
    for (const copied of ['other-uid/900', 'other-uid/10']) {
      const copy = set({ value: copied, annotations: { ...RECORDS, [RESTART_REASON_ANNOTATION]: 'x', 'rollguard.io/frozen': 'ConfigMap/app-config', team: 'a' } });
      const created = apply(copy, mutate(create(copy), copy));
      expect(templateValue(created)).toBe('cm-uid/264');
      expect(setAnnotations(created)).toEqual({ team: 'a' });
    }
    // the same object's version, newer than the cache (a lagging cache): kept
    const fresh = set({ value: 'cm-uid/500' });
    expect(templateValue(apply(fresh, mutate(create(fresh), fresh)))).toBe('cm-uid/500');
  });
});

describe('restarterMutator: a user\'s template change that drops the records is planned with the set\'s own', () => {
  it('does not bump a version the stored digest record knows to hold the same data, though the PUT left the record out', () => {
    const OWN = 'system:serviceaccount:rollguard-system:rollguard';
    const record = { 'rollguard.io/digests': JSON.stringify({ [KEY]: { v: 'cm-uid/264', k: 'k1', d: { a: '0123456789abcdef' } } }) };
    const mutate = restarterMutator({ cachesSynced: true, lookup, cacheProgress: () => '400', ownUser: OWN });
    const old = set({ value: 'cm-uid/208', annotations: record });
    const upgraded = set({ image: 'web:2' });
    const after = apply(upgraded, mutate({ ...update(upgraded, old), userInfo: { username: 'argocd' } }, upgraded));
    expect(templateValue(after)).toBe('cm-uid/208');
    expect(setAnnotations(after)).toEqual(record);
  });
});
