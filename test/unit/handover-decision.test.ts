import type { V1Pod } from '@kubernetes/client-node';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chooseCandidate, decideHandover, type CallAnswer, type HandoverInput, type HandoverStep } from '../../src/handover/decision.js';
import { matches } from '../../src/handover/selector.js';
import { handoverSettings, type HandoverSettings } from '../../src/handover/settings.js';
import type { HandoverState } from '../../src/handover/state.js';
import { propertyRuns } from '../env/property-runs.js';

const NOW = new Date('2026-03-01T12:00:00Z');
const OLD = 'db-old';
const NEW = 'db-new';

function settings(extra: Record<string, string> = {}): HandoverSettings {
  const parsed = handoverSettings({
    metadata: {
      annotations: { 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': 'POST :8008/switchover', 'rollguard.io/handover-interval': '10s', ...extra },
    },
  });
  if (!parsed?.ok) throw new Error(parsed?.reason ?? 'no settings');
  return parsed.settings;
}

interface PodSpec {
  role?: string;
  revision?: string;
  ready?: boolean;
  requested?: boolean;
  /** rollguard.io/handover=cancel on the pod */
  cancel?: boolean;
  uid?: string;
  /** the eviction guard allowed an eviction this long before NOW */
  evictedMsAgo?: number;
}

function pod(ordinal: number, spec: PodSpec = {}): V1Pod {
  return {
    metadata: {
      name: `db-${ordinal}`,
      uid: spec.uid ?? `uid-${ordinal}`,
      labels: { 'controller-revision-hash': spec.revision ?? OLD, ...(spec.role ? { role: spec.role } : {}) },
      annotations: {
        ...(spec.requested ? { 'rollguard.io/handover': 'requested' } : {}),
        ...(spec.cancel ? { 'rollguard.io/handover': 'cancel' } : {}),
        ...(spec.evictedMsAgo !== undefined ? { 'rollguard.io/eviction-allowed': new Date(NOW.getTime() - spec.evictedMsAgo).toISOString() } : {}),
      },
    },
    status: { conditions: [{ type: 'Ready', status: spec.ready === false ? 'False' : 'True' }] },
  };
}

function input(over: Partial<HandoverInput>): HandoverInput {
  return {
    namespace: 'shop',
    setName: 'db',
    settings: settings(),
    state: { kind: 'none' },
    pods: [pod(0, { role: 'primary' }), pod(1, { role: 'replica' }), pod(2, { role: 'replica' })],
    replacing: [],
    updateRevision: NEW,
    now: NOW,
    ...over,
  };
}

const state = (over: Partial<HandoverState> = {}): HandoverState => ({
  from: 'db-0',
  fromUid: 'uid-0',
  to: 'db-2',
  trigger: 'rollout',
  startedAt: NOW.toISOString(),
  attempt: 1,
  fallback: false,
  calledAt: NOW.toISOString(),
  ...over,
});
const later = (ms: number): Date => new Date(NOW.getTime() + ms);

describe('decideHandover: the ways out of a paused handover', () => {
  const paused = (over: Partial<HandoverState> = {}): HandoverState =>
    state({ outcome: 'paused', attempt: 5, calledAt: undefined, nextAt: later(5_000).toISOString(), pausedAt: NOW.toISOString(), ...over });

  it('gives up once paused past handover-pause-timeout: a Warning, no call, the state kept as gave-up', () => {
    const s = settings({ 'rollguard.io/handover-pause-timeout': '2m' });
    // the wait for the next attempt ends at the timeout
    expect(decideHandover(input({ settings: s, state: { kind: 'state', state: paused({ nextAt: later(200_000).toISOString() }) }, now: later(119_000) }))).toMatchObject({ kind: 'wait', retryAfterMs: 1_000 });
    const step = decideHandover(input({ settings: s, state: { kind: 'state', state: paused() }, now: later(120_000) }));
    expect(step).toMatchObject({ kind: 'write', state: { outcome: 'gave-up', from: 'db-0' }, result: 'gave_up', event: { type: 'Warning', reason: 'HandoverFailed' } });
    expect(step.kind === 'write' && step.call).toBeUndefined();
    expect(step.kind === 'write' && step.state?.nextAt).toBeUndefined();
    expect(step.kind === 'write' && step.event?.message).toContain('gave up after 2m paused');
    expect(step.kind === 'write' && step.event?.message).toContain('the rollout stays paused at pod db-0, db-0 stays primary');
    expect(step.kind === 'write' && step.event?.message).toContain('kubectl annotate pod db-0 rollguard.io/handover=cancel');
    // gave up: held, no more calls, no requeue of its own
    const held = decideHandover(input({ settings: s, state: { kind: 'state', state: paused({ outcome: 'gave-up', nextAt: undefined }) }, now: later(600_000) }));
    expect(held.kind).toBe('held');
  });

  it('the pause timeout counts from the pause (the default: 1h), from the start for a state without pausedAt', () => {
    expect(decideHandover(input({ state: { kind: 'state', state: paused({ pausedAt: later(10_000).toISOString() }) }, now: later(3_600_000) })).kind).toBe('write');
    expect(decideHandover(input({ state: { kind: 'state', state: paused({ pausedAt: later(10_000).toISOString() }) }, now: later(3_600_000) }))).not.toMatchObject({ result: 'gave_up' });
    expect(decideHandover(input({ state: { kind: 'state', state: paused({ pausedAt: undefined }) }, now: later(3_600_000) }))).toMatchObject({ result: 'gave_up' });
  });

  it('the transition to paused records when it paused', () => {
    const s = settings({ 'rollguard.io/handover-retries': '1' });
    const step = decideHandover(input({ settings: s, state: { kind: 'state', state: state() }, answer: { attempt: 1, fallback: false, failed: true, detail: 'HTTP 500' }, now: later(200) }));
    expect(step).toMatchObject({ kind: 'write', state: { outcome: 'paused', pausedAt: later(200).toISOString() }, result: 'paused' });
  });

  it('a cancel on the primary pod lets the step go on without a handover, and is removed', () => {
    for (const s of [paused(), paused({ outcome: 'gave-up', nextAt: undefined }), state()]) {
      const pods = [pod(0, { role: 'primary', cancel: true }), pod(1), pod(2)];
      const step = decideHandover(input({ pods, state: { kind: 'state', state: s }, replacing: ['db-0'] }));
      expect(step).toMatchObject({ kind: 'write', state: { outcome: 'proceed' }, result: 'cancelled', clearCancel: 'db-0', event: { type: 'Warning', reason: 'HandoverCancelled' } });
      expect(step.kind === 'write' && step.call).toBeUndefined();
      expect(step.kind === 'write' && step.event?.message).toContain('the rollout replaces db-0 without a handover, the application fails over');
      // then the step goes on
      if (step.kind === 'write') expect(decideHandover(input({ pods: [pod(0, { role: 'primary' }), pod(1), pod(2)], state: { kind: 'state', state: step.state! }, replacing: ['db-0'] }))).toEqual({ kind: 'open' });
    }
  });

  it('a cancel of a requested handover drops it; a cancel with nothing in flight is removed with a Normal Event', () => {
    const pods = [pod(0, { role: 'primary', cancel: true }), pod(1), pod(2)];
    expect(decideHandover(input({ pods, state: { kind: 'state', state: paused({ trigger: 'requested', outcome: undefined }) } }))).toMatchObject({
      kind: 'write',
      state: undefined,
      result: 'cancelled',
      clearCancel: 'db-0',
      event: { type: 'Normal', reason: 'HandoverCancelled' },
    });
    expect(decideHandover(input({ pods, replacing: ['db-0'] }))).toMatchObject({ kind: 'clear-request', pod: 'db-0', value: 'cancel', event: { type: 'Normal', reason: 'HandoverSkipped' } });
  });

  it('a rollback ends a rollout handover: its primary runs the update revision, which no step replaces', () => {
    const pods = [pod(0, { role: 'primary', revision: NEW }), pod(1, { revision: OLD }), pod(2, { revision: OLD })];
    for (const s of [paused(), paused({ outcome: 'gave-up', nextAt: undefined }), state()]) {
      const step = decideHandover(input({ pods, state: { kind: 'state', state: s }, replacing: ['db-2'] }));
      expect(step).toMatchObject({ kind: 'write', state: undefined, result: 'abandoned', event: { type: 'Normal', reason: 'HandoverSkipped' } });
      expect(step.kind === 'write' && step.event?.message).toContain('the rollout no longer replaces db-0, which runs the update revision db-new');
    }
    // a scale-down handover is not the rollout's: it goes on
    expect(decideHandover(input({ pods, state: { kind: 'state', state: paused({ trigger: 'scale-down' }) }, scaleDownTo: { replicas: 1, ordinalStart: 0 } }))).toMatchObject({ kind: 'wait' });
  });
});

describe('decideHandover', () => {
  it('leaves a step alone that replaces no primary', () => {
    expect(decideHandover(input({ replacing: ['db-2'] }))).toEqual({ kind: 'open' });
    expect(decideHandover(input({ replacing: [] }))).toEqual({ kind: 'open' });
  });

  it('blocks any step when no pod or several pods match the selector', () => {
    const none = decideHandover(input({ pods: [pod(0), pod(1), pod(2)], replacing: ['db-2'] }));
    expect(none).toMatchObject({ kind: 'blocked', cause: 'primary:none', pod: 'db-2' });
    const two = decideHandover(input({ pods: [pod(0, { role: 'primary' }), pod(1, { role: 'primary' }), pod(2)], replacing: ['db-2'] }));
    expect(two).toMatchObject({ kind: 'blocked', cause: 'primary:several' });
    expect(two.kind === 'blocked' && two.message).toContain('2 pods (db-0, db-1) match the primary selector "role=primary"');
  });

  it('starts a handover before the primary is replaced: writes the state with the call, then calls', () => {
    const step = decideHandover(input({ replacing: ['db-0'], pods: [pod(0, { role: 'primary' }), pod(1, { revision: NEW }), pod(2, { revision: NEW })] }));
    expect(step).toMatchObject({
      kind: 'write',
      state: { from: 'db-0', fromUid: 'uid-0', to: 'db-1', attempt: 1, fallback: false, calledAt: NOW.toISOString(), trigger: 'rollout' },
      event: { type: 'Normal', reason: 'HandoverStarted', message: 'Handing the primary role over from db-0 to db-1 (attempt 1 of 3, POST :8008/switchover on the primary), before the rollout replaces pod db-0' },
      call: { target: 'db-0', primary: 'db-0', candidate: 'db-1', attempt: 1 },
    });
  });

  it('waits for the labels while the answer is a 503 or a 200, until the timeout', () => {
    const answer: CallAnswer = { attempt: 1, fallback: false, failed: false, detail: 'HTTP 503' };
    expect(decideHandover(input({ state: { kind: 'state', state: state() }, answer, now: later(5_000) }))).toMatchObject({ kind: 'wait', retryAfterMs: 1_000 });
    const timedOut = decideHandover(input({ state: { kind: 'state', state: state() }, answer: { ...answer, detail: 'HTTP 200 "{}" from pod db-0 at 10.0.0.1' }, now: later(30_000) }));
    expect(timedOut).toMatchObject({ kind: 'write', state: { attempt: 2, nextAt: later(40_000).toISOString() }, event: { type: 'Warning', reason: 'HandoverFailed' } });
    expect(timedOut.kind === 'write' && timedOut.event?.message).toBe(
      'Handover of the primary role from db-0 to db-2 failed (attempt 1 of 3): the endpoint answered HTTP 200 "{}" from pod db-0 at 10.0.0.1; after 30s db-0 still matches the primary selector; next attempt in 10s',
    );
  });

  it('a definite failure (500, refused) fails the attempt at once', () => {
    const step = decideHandover(input({ state: { kind: 'state', state: state() }, answer: { attempt: 1, fallback: false, failed: true, detail: 'HTTP 500' }, now: later(200) }));
    expect(step).toMatchObject({ kind: 'write', state: { attempt: 2 }, event: { reason: 'HandoverFailed' } });
    expect(step.kind === 'write' && step.state?.calledAt).toBeUndefined();
  });

  it('ignores an answer of an earlier attempt', () => {
    const step = decideHandover(input({ state: { kind: 'state', state: state({ attempt: 2 }) }, answer: { attempt: 1, fallback: false, failed: true, detail: 'HTTP 500' }, now: later(200) }));
    expect(step.kind).toBe('wait');
  });

  it('succeeds when the label moved to another Ready pod, whatever the answer', () => {
    const pods = [pod(0, { role: 'replica' }), pod(1, { role: 'replica' }), pod(2, { role: 'primary' })];
    const step = decideHandover(input({ pods, state: { kind: 'state', state: state({ attempt: 2 }) }, now: later(12_300) }));
    expect(step).toMatchObject({ kind: 'write', state: undefined, result: 'succeeded', durationMs: 12_300, event: { reason: 'HandoverSucceeded', message: 'Handed the primary role over from db-0 to db-2 in 12.3s (attempt 2)' } });
  });

  it('does not count a new primary that is not Ready', () => {
    const pods = [pod(0), pod(1), pod(2, { role: 'primary', ready: false })];
    expect(decideHandover(input({ pods, state: { kind: 'state', state: state() }, now: later(1_000) })).kind).toBe('wait');
  });

  it('skips the call of the next attempt when the role moved meanwhile (re-read before every attempt)', () => {
    const pods = [pod(0), pod(1, { role: 'primary' }), pod(2)];
    const step = decideHandover(input({ pods, state: { kind: 'state', state: state({ attempt: 2, calledAt: undefined, nextAt: NOW.toISOString() }) }, now: later(1) }));
    expect(step).toMatchObject({ kind: 'write', result: 'succeeded' });
    expect(step.kind === 'write' && step.call).toBeUndefined();
  });

  it('after the last attempt tries the fallback once, then pauses with a Warning', () => {
    const s = settings({ 'rollguard.io/handover-fallback': 'POST :8008/failover' });
    const last = decideHandover(input({ settings: s, state: { kind: 'state', state: state({ attempt: 3 }) }, now: later(30_000) }));
    expect(last).toMatchObject({ kind: 'write', state: { fallback: true, attempt: 4 } });
    const fallback = decideHandover(input({ settings: s, state: { kind: 'state', state: state({ attempt: 4, fallback: true, calledAt: undefined, nextAt: NOW.toISOString() }) }, now: later(1) }));
    expect(fallback).toMatchObject({ kind: 'write', event: { reason: 'HandoverFallback' }, call: { fallback: true, action: { path: '/failover' } } });
    const failed = decideHandover(input({ settings: s, state: { kind: 'state', state: state({ attempt: 4, fallback: true }) }, now: later(30_000) }));
    expect(failed).toMatchObject({ kind: 'write', state: { outcome: 'paused', fallback: false }, result: 'paused', event: { type: 'Warning' } });
    expect(failed.kind === 'write' && failed.event?.message).toContain('the rollout is paused at pod db-0, which stays primary and is not replaced');
  });

  it('with handover-on-failure: proceed, lets the step replace the primary after the last attempt', () => {
    const s = settings({ 'rollguard.io/handover-on-failure': 'proceed' });
    const failed = decideHandover(input({ settings: s, state: { kind: 'state', state: state({ attempt: 3 }) }, now: later(30_000), replacing: ['db-0'] }));
    expect(failed).toMatchObject({ kind: 'write', state: { outcome: 'proceed' }, result: 'proceeded' });
    const after = decideHandover(input({ settings: s, state: { kind: 'state', state: state({ attempt: 3, outcome: 'proceed', calledAt: undefined }) }, replacing: ['db-0'] }));
    expect(after).toEqual({ kind: 'open' });
  });

  it('a request on the primary starts a handover; on another pod it is removed with an Event', () => {
    const asked = decideHandover(input({ pods: [pod(0, { role: 'primary', requested: true }), pod(1), pod(2)] }));
    expect(asked).toMatchObject({ kind: 'write', state: { trigger: 'requested', from: 'db-0' } });
    const elsewhere = decideHandover(input({ pods: [pod(0, { role: 'primary' }), pod(1, { requested: true }), pod(2)] }));
    expect(elsewhere).toMatchObject({ kind: 'clear-request', pod: 'db-1', event: { reason: 'HandoverSkipped' } });
  });

  it('a requested handover that succeeds removes the request', () => {
    const pods = [pod(0, { requested: true }), pod(1, { role: 'primary' }), pod(2)];
    expect(decideHandover(input({ pods, state: { kind: 'state', state: state({ trigger: 'requested' }) } }))).toMatchObject({ clearRequest: 'db-0', result: 'succeeded' });
  });

  it('the old primary pod replaced under it: waits for the role until the deadline of the call, then ends the handover', () => {
    const pods = [pod(0, { uid: 'uid-0b' }), pod(1, { role: 'primary', ready: false }), pod(2)];
    const called = (msAgo: number) => state({ calledAt: new Date(NOW.getTime() - msAgo).toISOString() });
    expect(decideHandover(input({ pods, state: { kind: 'state', state: called(1_000) } }))).toMatchObject({ kind: 'wait', reason: expect.stringContaining('db-0 went away mid-handover') });
    // the role arrives: a Ready pod holds it
    const arrived = [pod(0, { uid: 'uid-0b' }), pod(1, { role: 'primary' }), pod(2)];
    expect(decideHandover(input({ pods: arrived, state: { kind: 'state', state: called(1_000) } }))).toMatchObject({ kind: 'write', state: undefined, result: 'succeeded' });
    // the call failed with the pod (its endpoint went with it): the labels still decide
    const failed: CallAnswer = { attempt: 1, fallback: false, failed: true, detail: 'POST failed: socket hang up' };
    expect(decideHandover(input({ pods, state: { kind: 'state', state: called(1_000) }, answer: failed }))).toMatchObject({ kind: 'wait' });
    for (const gone of [called(30_000), state({ calledAt: undefined })]) {
      expect(decideHandover(input({ pods, state: { kind: 'state', state: gone } }))).toMatchObject({ kind: 'write', state: undefined, result: 'abandoned', event: { reason: 'HandoverFailed' } });
    }
  });

  it('removes a state annotation it cannot read, with a Warning', () => {
    expect(decideHandover(input({ state: { kind: 'unreadable', raw: '{nope' } }))).toMatchObject({ kind: 'write', state: undefined, event: { type: 'Warning' } });
  });
});

describe('chooseCandidate', () => {
  it('prefers a Ready pod on the update revision, else the one rolled last (lowest ordinal)', () => {
    expect(chooseCandidate([pod(0), pod(1), pod(2, { revision: NEW })], 'db-0', 'db', NEW, NOW)).toBe('db-2');
    expect(chooseCandidate([pod(0), pod(1), pod(2)], 'db-2', 'db', NEW, NOW)).toBe('db-0');
    expect(chooseCandidate([pod(0), pod(1, { ready: false }), pod(2, { revision: NEW, ready: false })], 'db-0', 'db', NEW, NOW)).toBeUndefined();
  });

  it('passes over a pod whose eviction the guard allowed in the last minute', () => {
    expect(chooseCandidate([pod(0), pod(1), pod(2, { revision: NEW, evictedMsAgo: 1_000 })], 'db-0', 'db', NEW, NOW)).toBe('db-1');
    expect(chooseCandidate([pod(0), pod(1), pod(2, { revision: NEW, evictedMsAgo: 60_000 })], 'db-0', 'db', NEW, NOW)).toBe('db-2');
  });

  it('waits, rather than fail, while every other Ready pod is being evicted', () => {
    const pods = [pod(0, { role: 'primary', requested: true }), pod(1, { role: 'replica', evictedMsAgo: 0 }), pod(2, { role: 'replica', ready: false })];
    expect(decideHandover(input({ pods }))).toEqual({ kind: 'wait', retryAfterMs: 1_000, reason: 'every other Ready pod of db is being evicted (db-1); waiting for one that stays' });
    const retry = { kind: 'state' as const, state: state({ attempt: 2, calledAt: undefined }) };
    expect(decideHandover(input({ pods, state: retry }))).toMatchObject({ kind: 'wait', reason: expect.stringContaining('being evicted (db-1)') });
    expect(decideHandover(input({ pods: [pods[0]!, pod(1, { role: 'replica', evictedMsAgo: 61_000 })] }))).toMatchObject({ kind: 'write', state: { to: 'db-1' } });
  });
});

// The contract as one property: whatever the endpoint does, attempt by attempt, the primary's
// pod is never let go while it holds the label (unless the user chose `proceed`), the primary
// action is called at most `retries` times and the fallback at most once before a pause, and
// every run ends (stepped, or paused) within a bounded number of decisions.
describe('decideHandover, driven to the end (fast-check)', () => {
  type Behaviour = 'move' | 'move-late' | 'fail' | 'no-move';
  it('never opens the step over a labelled primary, and bounds the calls', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 }),
        fc.array(fc.constantFrom<Behaviour>('move', 'move-late', 'fail', 'no-move'), { minLength: 1, maxLength: 6 }),
        fc.integer({ min: 1, max: 4 }),
        fc.boolean(),
        fc.constantFrom<'pause' | 'proceed'>('pause', 'proceed'),
        (primary, behaviours, retries, withFallback, onFailure) => {
          const s = settings({
            'rollguard.io/handover-retries': String(retries),
            'rollguard.io/handover-timeout': '5s',
            'rollguard.io/handover-on-failure': onFailure,
            ...(withFallback ? { 'rollguard.io/handover-fallback': 'POST :8008/failover' } : {}),
          });
          let roles = [0, 1, 2].map((i) => (i === primary ? 'primary' : 'replica'));
          let current: HandoverState | undefined;
          let now = NOW.getTime();
          let answer: CallAnswer | undefined;
          let pendingMoveAt: number | undefined;
          const calls: { fallback: boolean }[] = [];
          const target = `db-${primary}`;
          for (let i = 0; i < 200; i++) {
            if (pendingMoveAt !== undefined && now >= pendingMoveAt) {
              roles = roles.map((_, j) => (j === (primary + 1) % 3 ? 'primary' : 'replica'));
              pendingMoveAt = undefined;
            }
            const pods = roles.map((role, j) => pod(j, { role }));
            const step: HandoverStep = decideHandover(
              input({ settings: s, pods, replacing: [target], state: current ? { kind: 'state', state: current } : { kind: 'none' }, now: new Date(now), answer }),
            );
            if (step.kind === 'open') {
              const stillPrimary = matches(s.selector, pods[primary]!.metadata!.labels);
              expect(!stillPrimary || (onFailure === 'proceed' && current?.outcome === 'proceed')).toBe(true);
              return;
            }
            expect(step.kind).not.toBe('blocked');
            if (step.kind === 'wait') {
              now += step.retryAfterMs;
              continue;
            }
            if (step.kind !== 'write') throw new Error(`unexpected ${step.kind}`);
            current = step.state;
            if (current?.outcome === 'paused') {
              // paused: the rollout stays put; the run has shown what it must
              expect(calls.filter((c) => !c.fallback).length).toBe(retries);
              expect(calls.filter((c) => c.fallback).length).toBe(withFallback ? 1 : 0);
              expect(matches(s.selector, pods[primary]!.metadata!.labels)).toBe(true);
              return;
            }
            if (step.call) {
              calls.push({ fallback: step.call.fallback });
              const b = behaviours[(calls.length - 1) % behaviours.length]!;
              answer = { attempt: step.call.attempt, fallback: step.call.fallback, failed: b === 'fail', detail: b };
              if (b === 'move') roles = roles.map((_, j) => (j === (primary + 1) % 3 ? 'primary' : 'replica'));
              if (b === 'move-late') pendingMoveAt = now + 2_000;
            }
            now += 1;
          }
          throw new Error(`no end after 200 decisions: ${JSON.stringify(current)}`);
        },
      ),
      propertyRuns(300),
    );
  });
});

describe('decideHandover, a held scale-down', () => {
  const scaleDownTo = { replicas: 2, ordinalStart: 0 };
  const pods = [pod(0, { role: 'replica' }), pod(1, { role: 'replica' }), pod(2, { role: 'primary', revision: NEW })];

  it('hands the role over before the scale-down removes the primary, to a pod that stays (never one it removes)', () => {
    const four = [...pods, pod(3, { role: 'replica', revision: NEW })];
    const step = decideHandover(input({ pods: four, replacing: ['db-3', 'db-2'], scaleDownTo }));
    expect(step).toMatchObject({
      kind: 'write',
      state: { from: 'db-2', to: 'db-0', trigger: 'scale-down' },
      event: { reason: 'HandoverStarted', message: 'Handing the primary role over from db-2 to db-0 (attempt 1 of 3, POST :8008/switchover on the primary), before a scale-down removes pod db-2' },
    });
    // without the bound the updated db-3 would be chosen, and removed next
    expect(chooseCandidate(four, 'db-2', 'db', NEW, NOW)).toBe('db-3');
    expect(chooseCandidate(four, 'db-2', 'db', NEW, NOW, scaleDownTo)).toBe('db-0');
  });

  it('opens when no pod it removes is the primary', () => {
    expect(decideHandover(input({ replacing: ['db-2'], scaleDownTo }))).toEqual({ kind: 'open' });
  });

  it('holds, naming the scale-down, when no pod that stays can take the role', () => {
    const step = decideHandover(input({ pods: [pod(0, { ready: false }), pod(1, { role: 'replica' }), pod(2, { role: 'primary' })], replacing: ['db-2', 'db-1'], scaleDownTo: { replicas: 1, ordinalStart: 0 } }));
    expect(step).toMatchObject({ kind: 'blocked', cause: 'handover:no-candidate', pod: 'db-2' });
    expect(step.kind === 'blocked' && step.message).toBe('Scale-down held before pod db-2, the primary: no other pod of db that the scale-down to 1 keeps is Ready to take the primary role from db-2');
  });

  it('keeps the scale-down held when every attempt failed, and says so', () => {
    const failing = state({ from: 'db-2', fromUid: 'uid-2', to: 'db-0', trigger: 'scale-down', attempt: 3 });
    const step = decideHandover(input({ pods, replacing: ['db-2'], scaleDownTo, state: { kind: 'state', state: failing }, answer: { attempt: 3, fallback: false, failed: true, detail: 'HTTP 500' }, now: later(100) }));
    expect(step).toMatchObject({ kind: 'write', state: { outcome: 'paused' }, result: 'paused', event: { type: 'Warning', reason: 'HandoverFailed' } });
    expect(step.kind === 'write' && step.event?.message).toContain('every attempt failed: the scale-down stays held, pod db-2 stays primary and is not removed; rollguard tries again every 10s');
  });
});

describe('decideHandover, a scale-down no longer held', () => {
  it('drops the handover it started, saying why', () => {
    const paused = state({ from: 'db-2', fromUid: 'uid-2', to: 'db-0', trigger: 'scale-down', outcome: 'paused', calledAt: undefined, nextAt: later(5_000).toISOString() });
    const pods = [pod(0, { role: 'replica' }), pod(1, { role: 'replica' }), pod(2, { role: 'primary' })];
    const step = decideHandover(input({ pods, state: { kind: 'state', state: paused } }));
    expect(step).toMatchObject({ kind: 'write', state: undefined, result: 'abandoned', event: { reason: 'HandoverSkipped' } });
    expect(step.kind === 'write' && step.event?.message).toBe('Handover from db-2 ended: the scale-down it was for is no longer held; db-2 stays primary');
  });

  it('after a scale-down that went on (handover-on-failure: proceed), clears the state without an Event, before the pod is gone too', () => {
    const proceeded = state({ from: 'db-2', fromUid: 'uid-2', to: 'db-0', trigger: 'scale-down', outcome: 'proceed', calledAt: undefined, nextAt: later(5_000).toISOString() });
    const pods = [pod(0, { role: 'replica' }), pod(1, { role: 'replica' }), pod(2, { role: 'primary' })];
    const step = decideHandover(input({ pods, state: { kind: 'state', state: proceeded } }));
    expect(step).toEqual({ kind: 'write', state: undefined, log: 'scale-down went on after a failed handover (proceed)' });
  });
});
