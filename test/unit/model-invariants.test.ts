import type { CoreV1Event, V1PodTemplateSpec } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { LAST_RESTART_ANNOTATION } from '../../src/restarter/annotations.js';
import { floorViolations, missingEvents, transitions, type RecordedRun } from '../model/invariants.js';
import type { ObjectVersionRecord, WorkloadHistory, WorkloadState } from '../model/recorder.js';

// The model checker's transition checks on recorded histories: each invariant can fail.

const KEY = 'configmap.rollguard.io/cfg';

function template(value: string | undefined, read: 'envFrom' | 'k1' = 'envFrom', image = 'app:1'): V1PodTemplateSpec {
  const env = read === 'envFrom' ? { envFrom: [{ configMapRef: { name: 'cfg' } }] } : { env: [{ name: 'V', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'k1' } } }] };
  return { metadata: { annotations: value ? { [KEY]: value } : {} }, spec: { containers: [{ name: 'app', image, ...env }] } };
}

function state(resourceVersion: string, t: V1PodTemplateSpec, lastRestartAt?: string): WorkloadState {
  return {
    resourceVersion,
    generation: 1,
    template: t,
    templateText: JSON.stringify(t),
    values: { ...(t.metadata?.annotations ?? {}) },
    annotations: lastRestartAt ? { [LAST_RESTART_ANNOTATION]: lastRestartAt } : {},
    deleted: false,
    afterGap: false,
  };
}

function version(resourceVersion: string, data: Record<string, string>): ObjectVersionRecord {
  return { namespace: 'ns', kind: 'ConfigMap', name: 'cfg', uid: 'u', resourceVersion, data };
}

function run(states: WorkloadState[], versions: ObjectVersionRecord[], checkerWrites: string[] = ['10']): RecordedRun {
  const history: WorkloadHistory = { kind: 'StatefulSet', namespace: 'ns', name: 'set', uid: 'set-uid', states };
  return {
    recorder: { workloads: new Map([['set-uid', history]]), versions: new Map(versions.map((v) => [`${v.uid}/${v.resourceVersion}`, v])) },
    checkerWrites: new Set(checkerWrites),
    floorMs: 2_000,
  };
}

const event = (message: string, resourceVersion?: string): CoreV1Event =>
  ({ involvedObject: { uid: 'set-uid', resourceVersion }, message, reason: 'ConfigChanged', metadata: {} }) as CoreV1Event;

describe('the model checker\'s transition checks', () => {
  it('a rollout by rollguard for a data change is explained; without its Event it is a violation', () => {
    const r = run([state('10', template('u/5')), state('12', template('u/11'))], [version('5', { k1: 'x' }), version('11', { k1: 'y' })]);
    const { loop, violations, figures } = transitions(r, new Map());
    expect(violations).toEqual([]);
    expect(figures).toMatchObject({ loopRollouts: 1, dataRollouts: 1 });
    expect(missingEvents(loop, [event('ConfigMap cfg: data changed (key k1), resourceVersion 5 → 11')])).toEqual([]);
    expect(missingEvents(loop, [event('ConfigMap cfg: data changed (key k1), resourceVersion 5 → 9')]).map((v) => v.invariant)).toEqual(['event']);
  });

  it('a rollout when what the set reads did not change is unexplained', () => {
    const r = run([state('10', template('u/5', 'k1')), state('12', template('u/11', 'k1'))], [version('5', { k1: 'x', k2: 'a' }), version('11', { k1: 'x', k2: 'b' })]);
    expect(transitions(r, new Map()).violations.map((v) => v.invariant)).toEqual(['explained']);
  });

  it('a value older than the one it replaces is backwards', () => {
    const r = run([state('10', template('u/11')), state('12', template('u/5'))], [version('5', { k1: 'x' }), version('11', { k1: 'y' })]);
    expect(transitions(r, new Map()).violations.map((v) => v.invariant)).toEqual(['backwards']);
  });

  it('a rollout into a missing required key is a violation', () => {
    const r = run([state('10', template('u/5', 'k1')), state('12', template('u/11', 'k1'))], [version('5', { k1: 'x' }), version('11', {})]);
    expect(transitions(r, new Map()).violations.map((v) => v.detail)).toEqual([expect.stringContaining('cannot start')]);
  });

  it('the checker\'s own template writes are not rollguard\'s; a change beyond the annotations by anyone else is', () => {
    const user = run([state('9', template('u/5')), state('10', template('u/5', 'envFrom', 'app:2'))], [version('5', { k1: 'x' })]);
    expect(transitions(user, new Map()).figures).toMatchObject({ loopRollouts: 0, userTemplateWrites: 1 });
    const other = run([state('9', template('u/5')), state('11', template('u/5', 'envFrom', 'app:2'))], [version('5', { k1: 'x' })]);
    expect(transitions(other, new Map()).violations.map((v) => v.invariant)).toEqual(['own-fields']);
  });

  it('two rollouts of one set within the restart floor are a violation', () => {
    const r = run(
      [state('10', template('u/5'), '2026-01-01T00:00:00.000Z'), state('12', template('u/11'), '2026-01-01T00:00:01.000Z'), state('14', template('u/13'), '2026-01-01T00:00:01.500Z')],
      [version('5', { k1: 'x' }), version('11', { k1: 'y' }), version('13', { k1: 'z' })],
    );
    const { loop } = transitions(r, new Map());
    expect(floorViolations(r, loop).map((v) => v.invariant)).toEqual(['floor']);
  });
});
