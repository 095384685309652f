import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  HEALTH_GATED_ANNOTATION,
  HEALTH_GATED_VALUE,
  HEALTH_URL_ANNOTATION,
  decideRollout,
  isHealthGated,
  type RolloutDecision,
  type RolloutInput,
} from '../../src/rollout/decision.js';

const NOW = new Date('2025-03-01T12:00:00Z');
/** The revision the pods run before the template change (status.currentRevision). */
const OLD = 'web-5d8f7c';
/** The revision of the changed template (status.updateRevision). */
const NEW = 'web-7b9c4e';
const MIN_STEP_INTERVAL_MS = 60_000;
const DEFAULT_MIN_READY_SECONDS = 30;
const HEALTH_URL = 'http://web.shop.svc:8080/healthz';

interface PodState {
  revision: string;
  /** When the Ready condition turned True; long ago unless given. */
  readySince?: Date;
  /** A container waiting with this reason (CrashLoopBackOff, ImagePullBackOff, ...): not Ready. */
  waiting?: string;
  terminating?: boolean;
}

const secondsAgo = (seconds: number, now = NOW): Date => new Date(now.getTime() - seconds * 1000);
const healthy = (revision: string): PodState => ({ revision });
const readyFor = (revision: string, seconds: number): PodState => ({ revision, readySince: secondsAgo(seconds) });
const crashLooping = (revision: string): PodState => ({ revision, waiting: 'CrashLoopBackOff' });
const pullFailing = (revision: string): PodState => ({ revision, waiting: 'ImagePullBackOff' });
const terminating = (revision: string): PodState => ({ revision, terminating: true });
/** n pods in the same state. */
const all = (n: number, state: PodState): PodState[] => Array.from({ length: n }, () => state);

function makePod(ordinal: number, state: PodState): V1Pod {
  const broken = state.waiting !== undefined;
  return {
    metadata: {
      name: `web-${ordinal}`,
      namespace: 'shop',
      labels: { app: 'web', 'controller-revision-hash': state.revision },
      ...(state.terminating ? { deletionTimestamp: NOW } : {}),
    },
    status: {
      phase: broken && state.waiting !== 'CrashLoopBackOff' ? 'Pending' : 'Running',
      conditions: [
        {
          type: 'Ready',
          status: broken ? 'False' : 'True',
          lastTransitionTime: state.readySince ?? secondsAgo(3600),
        },
      ],
      containerStatuses: [
        {
          name: 'app',
          image: 'registry.example/web',
          imageID: '',
          restartCount: broken ? 5 : 0,
          ready: !broken,
          state: broken ? { waiting: { reason: state.waiting } } : { running: {} },
        },
      ],
    },
  };
}

interface SetOptions {
  replicas?: number;
  partition?: number;
  update?: string;
  current?: string;
  generation?: number;
  observed?: number;
  minReadySeconds?: number;
  annotations?: Record<string, string>;
  podManagementPolicy?: string;
  strategyType?: string;
}

function makeSet(options: SetOptions = {}): V1StatefulSet {
  const replicas = options.replicas ?? 3;
  return {
    metadata: {
      name: 'web',
      namespace: 'shop',
      generation: options.generation ?? 2,
      labels: { 'rollguard.io/enabled': 'true' },
      annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE, ...options.annotations },
    },
    spec: {
      replicas,
      serviceName: 'web',
      podManagementPolicy: options.podManagementPolicy ?? 'OrderedReady',
      ...(options.minReadySeconds !== undefined ? { minReadySeconds: options.minReadySeconds } : {}),
      selector: { matchLabels: { app: 'web' } },
      template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'app', image: 'registry.example/web' }] } },
      updateStrategy: { type: options.strategyType ?? 'RollingUpdate', rollingUpdate: { partition: options.partition ?? replicas } },
    },
    status: {
      replicas,
      observedGeneration: options.observed ?? options.generation ?? 2,
      currentRevision: options.current ?? OLD,
      updateRevision: options.update ?? NEW,
    },
  };
}

/** Pods by ordinal (undefined = missing), handed over sorted as strings, the way a careless caller would. */
function makePods(states: (PodState | undefined)[]): V1Pod[] {
  return states
    .flatMap((state, ordinal) => (state ? [makePod(ordinal, state)] : []))
    .sort((a, b) => a.metadata!.name!.localeCompare(b.metadata!.name!));
}

function decide(set: SetOptions, pods: (PodState | undefined)[], extra: Partial<RolloutInput> = {}): RolloutDecision {
  return decideRollout({
    set: makeSet(set),
    pods: makePods(pods),
    now: NOW,
    minStepIntervalMs: MIN_STEP_INTERVAL_MS,
    defaultMinReadySeconds: DEFAULT_MIN_READY_SECONDS,
    ...extra,
  });
}

interface Case {
  name: string;
  set: SetOptions;
  pods: (PodState | undefined)[];
  extra?: Partial<RolloutInput>;
  expected: Record<string, unknown>;
}

describe('decideRollout: a template change on 3 replicas', () => {
  const cases: Case[] = [
    {
      name: 'steps 3→2 when web-0, web-1 and the target web-2 (old revision) are healthy',
      set: { partition: 3 },
      pods: all(3, healthy(OLD)),
      expected: {
        action: 'set-partition',
        from: 3,
        to: 2,
        event: 'PartitionUpdate',
        message: 'Updated partition from 3 to 2: pod web-2 ready, web-0 and web-1 healthy',
      },
    },
    {
      name: 'waits while web-1 has been Ready for less than minReadySeconds',
      set: { partition: 3 },
      pods: [healthy(OLD), readyFor(OLD, 10), healthy(OLD)],
      expected: { action: 'wait', retryAfterMs: 20_000, reason: 'pod web-1 ready for 10s of minReadySeconds 30' },
    },
    {
      name: 'blocks on a crash-looping web-0, naming it',
      set: { partition: 3 },
      pods: [crashLooping(OLD), healthy(OLD), healthy(OLD)],
      expected: {
        action: 'blocked',
        pod: 'web-0',
        cause: 'web-0:CrashLoopBackOff',
        message: 'Rollout blocked at partition 3: pod web-0 is not ready (CrashLoopBackOff)',
      },
    },
    {
      name: 'steps over a target stuck in ImagePullBackOff so that it gets replaced',
      set: { partition: 3 },
      pods: [healthy(OLD), healthy(OLD), pullFailing(OLD)],
      expected: {
        action: 'set-partition',
        from: 3,
        to: 2,
        event: 'PartitionUpdate',
        message: 'Updated partition from 3 to 2: pod web-2 not ready (ImagePullBackOff), stepped over, web-0 and web-1 healthy',
      },
    },
    {
      name: 'steps over a crash-looping target too',
      set: { partition: 3 },
      pods: [healthy(OLD), healthy(OLD), crashLooping(OLD)],
      expected: { action: 'set-partition', from: 3, to: 2 },
    },
    {
      name: 'blocks at 2 while web-2 is being recreated (missing)',
      set: { partition: 2 },
      pods: [healthy(OLD), healthy(OLD), undefined],
      expected: { action: 'blocked', pod: 'web-2', cause: 'web-2:missing' },
    },
    {
      name: 'blocks at 2 while web-2 still runs the old revision',
      set: { partition: 2 },
      pods: [healthy(OLD), healthy(OLD), healthy(OLD)],
      expected: {
        action: 'blocked',
        pod: 'web-2',
        message: `Rollout blocked at partition 2: pod web-2 runs revision ${OLD}, not yet updateRevision ${NEW}`,
      },
    },
    {
      name: 'waits at 2 until web-2 has been Ready on updateRevision for minReadySeconds',
      set: { partition: 2 },
      pods: [healthy(OLD), healthy(OLD), readyFor(NEW, 10)],
      expected: { action: 'wait', retryAfterMs: 20_000, reason: 'pod web-2 ready for 10s of minReadySeconds 30' },
    },
    {
      name: 'steps 2→1 once web-2 has been Ready on updateRevision for minReadySeconds',
      set: { partition: 2 },
      pods: [healthy(OLD), healthy(OLD), readyFor(NEW, 30)],
      expected: {
        action: 'set-partition',
        from: 2,
        to: 1,
        event: 'PartitionUpdate',
        message: 'Updated partition from 2 to 1: pod web-1 ready, web-0 and web-2 healthy',
      },
    },
    {
      name: 'does not step on while the updated web-2 crash-loops',
      set: { partition: 2 },
      pods: [healthy(OLD), healthy(OLD), crashLooping(NEW)],
      expected: { action: 'blocked', pod: 'web-2', cause: 'web-2:CrashLoopBackOff' },
    },
    {
      name: 'blocks on a terminating web-0',
      set: { partition: 3 },
      pods: [terminating(OLD), healthy(OLD), healthy(OLD)],
      expected: { action: 'blocked', pod: 'web-0', cause: 'web-0:terminating', message: 'Rollout blocked at partition 3: pod web-0 is terminating' },
    },
    {
      name: 'blocks on a terminating target',
      set: { partition: 3 },
      pods: [healthy(OLD), healthy(OLD), terminating(OLD)],
      expected: { action: 'blocked', pod: 'web-2', cause: 'web-2:terminating' },
    },
    {
      name: 'blocks on a missing web-1',
      set: { partition: 3 },
      pods: [healthy(OLD), undefined, healthy(OLD)],
      expected: { action: 'blocked', pod: 'web-1', cause: 'web-1:missing' },
    },
    {
      name: 'does nothing while the controller has not observed the new generation',
      set: { partition: 3, generation: 3, observed: 2 },
      pods: all(3, healthy(OLD)),
      expected: { action: 'none', reason: expect.stringContaining('has not observed generation 3') },
    },
    {
      name: 'puts the partition back to replicas once every pod runs updateRevision and is ready',
      set: { partition: 0 },
      pods: all(3, healthy(NEW)),
      expected: {
        action: 'set-partition',
        from: 0,
        to: 3,
        event: 'RolloutComplete',
        message: `Updated partition from 0 to 3: rollout complete, all 3 pods run revision ${NEW} and are ready`,
      },
    },
    {
      name: 'completes the same when the controller has already made updateRevision current',
      set: { partition: 0, current: NEW },
      pods: all(3, healthy(NEW)),
      expected: { action: 'set-partition', from: 0, to: 3, event: 'RolloutComplete' },
    },
    {
      name: 'completes only after the last pod has been Ready for minReadySeconds',
      set: { partition: 0 },
      pods: [readyFor(NEW, 25), healthy(NEW), healthy(NEW)],
      expected: { action: 'wait', retryAfterMs: 5_000 },
    },
    {
      name: 'does not complete while the last replaced pod crash-loops',
      set: { partition: 0 },
      pods: [crashLooping(NEW), healthy(NEW), healthy(NEW)],
      expected: { action: 'blocked', pod: 'web-0', cause: 'web-0:CrashLoopBackOff' },
    },
  ];

  it.each(cases)('$name', ({ set, pods, extra, expected }) => {
    expect(decide(set, pods, extra)).toMatchObject(expected);
  });
});

describe('decideRollout: rate limit and health check', () => {
  const withUrl = { partition: 3, annotations: { [HEALTH_URL_ANNOTATION]: HEALTH_URL } };
  const cases: Case[] = [
    {
      name: 'waits out the minimum interval since the last step',
      set: { partition: 3 },
      pods: all(3, healthy(OLD)),
      extra: { lastStepAt: secondsAgo(20) },
      expected: { action: 'wait', retryAfterMs: 40_000, reason: expect.stringContaining('rate limit') },
    },
    {
      name: 'steps once the interval has passed',
      set: { partition: 3 },
      pods: all(3, healthy(OLD)),
      extra: { lastStepAt: secondsAgo(60) },
      expected: { action: 'set-partition', from: 3, to: 2 },
    },
    {
      name: 'checks the rate limit last: a crash-looping pod is reported, not the interval',
      set: { partition: 3 },
      pods: [crashLooping(OLD), healthy(OLD), healthy(OLD)],
      extra: { lastStepAt: secondsAgo(20) },
      expected: { action: 'blocked', pod: 'web-0' },
    },
    {
      name: 'asks for the health URL before a step',
      set: withUrl,
      pods: all(3, healthy(OLD)),
      expected: { action: 'check-health', url: HEALTH_URL },
    },
    {
      name: 'does not ask for the health URL while a pod blocks',
      set: withUrl,
      pods: [crashLooping(OLD), healthy(OLD), healthy(OLD)],
      expected: { action: 'blocked', pod: 'web-0' },
    },
    {
      name: 'blocks when the health check fails',
      set: withUrl,
      pods: all(3, healthy(OLD)),
      extra: { healthCheck: { ok: false, detail: 'HTTP 503' } },
      expected: {
        action: 'blocked',
        pod: 'web-2',
        cause: `health-check:${HEALTH_URL}`,
        message: `Rollout blocked at partition 3: health check ${HEALTH_URL} failed (HTTP 503), pod web-2 not replaced`,
      },
    },
    {
      name: 'steps when the health check passed, and says so',
      set: withUrl,
      pods: all(3, healthy(OLD)),
      extra: { healthCheck: { ok: true, detail: 'HTTP 200' } },
      expected: {
        action: 'set-partition',
        from: 3,
        to: 2,
        message: 'Updated partition from 3 to 2: pod web-2 ready, web-0 and web-1 healthy, health check passed (HTTP 200)',
      },
    },
    {
      name: 'checks the rate limit after the health check',
      set: withUrl,
      pods: all(3, healthy(OLD)),
      extra: { healthCheck: { ok: true, detail: 'HTTP 200' }, lastStepAt: secondsAgo(1) },
      expected: { action: 'wait', retryAfterMs: 59_000 },
    },
  ];

  it.each(cases)('$name', ({ set, pods, extra, expected }) => {
    expect(decide(set, pods, extra)).toMatchObject(expected);
  });
});

describe('decideRollout: 12 replicas, ordinals as numbers', () => {
  const cases: Case[] = [
    {
      name: 'first target is web-11',
      set: { replicas: 12, partition: 12 },
      pods: all(12, healthy(OLD)),
      expected: { action: 'set-partition', from: 12, to: 11, message: expect.stringMatching(/^Updated partition from 12 to 11: pod web-11 ready, /) },
    },
    {
      name: 'then web-10, once web-11 is healthy on updateRevision',
      set: { replicas: 12, partition: 11 },
      pods: [...all(11, healthy(OLD)), healthy(NEW)],
      expected: {
        action: 'set-partition',
        from: 11,
        to: 10,
        message: 'Updated partition from 11 to 10: pod web-10 ready, all 11 other pods healthy',
      },
    },
    {
      name: 'then web-9, after web-11 and web-10',
      set: { replicas: 12, partition: 10 },
      pods: [...all(10, healthy(OLD)), healthy(NEW), healthy(NEW)],
      expected: { action: 'set-partition', from: 10, to: 9, message: expect.stringContaining('pod web-9 ready') },
    },
    {
      name: 'a crash-looping web-11 blocks at 10',
      set: { replicas: 12, partition: 10 },
      pods: [...all(10, healthy(OLD)), healthy(NEW), crashLooping(NEW)],
      expected: { action: 'blocked', pod: 'web-11', cause: 'web-11:CrashLoopBackOff' },
    },
  ];

  it.each(cases)('$name', ({ set, pods, extra, expected }) => {
    expect(decide(set, pods, extra)).toMatchObject(expected);
  });
});

describe('decideRollout: forced rollback', () => {
  // the template went back to OLD: updateRevision == currentRevision == OLD, web-2 still on NEW
  const cases: Case[] = [
    {
      name: 'deletes web-2 stuck crash-looping on the bad revision (OrderedReady)',
      set: { partition: 2, update: OLD, current: OLD, podManagementPolicy: 'OrderedReady' },
      pods: [healthy(OLD), healthy(OLD), crashLooping(NEW)],
      expected: {
        action: 'delete-pod',
        pod: 'web-2',
        message: `Deleted pod web-2: stuck not ready (CrashLoopBackOff) on revision ${NEW}, which the template no longer has; the StatefulSet controller recreates it on revision ${OLD}`,
      },
    },
    {
      name: 'deletes it under Parallel too, and after the webhook put the partition back to replicas',
      set: { partition: 3, update: OLD, current: OLD, podManagementPolicy: 'Parallel' },
      pods: [healthy(OLD), healthy(OLD), pullFailing(NEW)],
      expected: { action: 'delete-pod', pod: 'web-2' },
    },
    {
      name: 'deletes the highest stuck ordinal first',
      set: { partition: 3, update: OLD, current: OLD },
      pods: [healthy(OLD), crashLooping(NEW), crashLooping(NEW)],
      expected: { action: 'delete-pod', pod: 'web-2' },
    },
    {
      name: 'leaves a pod alone that is already terminating',
      set: { partition: 3, update: OLD, current: OLD },
      pods: [healthy(OLD), healthy(OLD), terminating(NEW)],
      expected: { action: 'blocked', pod: 'web-2', cause: 'web-2:terminating' },
    },
    {
      name: 'rolls a Ready pod on the bad revision back by stepping, not deleting',
      set: { partition: 3, update: OLD, current: OLD },
      pods: [healthy(OLD), healthy(NEW), healthy(NEW)],
      expected: { action: 'set-partition', from: 3, to: 2, event: 'PartitionUpdate' },
    },
    {
      name: 'never deletes a pod on updateRevision: a crash-looping new pod blocks the rollout instead',
      set: { partition: 2 },
      pods: [healthy(OLD), healthy(OLD), crashLooping(NEW)],
      expected: { action: 'blocked', pod: 'web-2' },
    },
  ];

  it.each(cases)('$name', ({ set, pods, extra, expected }) => {
    expect(decide(set, pods, extra)).toMatchObject(expected);
  });
});

describe('decideRollout: at rest and holding', () => {
  const cases: Case[] = [
    {
      name: 'nothing to do at rest',
      set: { partition: 3, update: OLD, current: OLD },
      pods: all(3, healthy(OLD)),
      expected: { action: 'none', reason: expect.stringContaining('at rest') },
    },
    {
      // from the set and its pods alone this is a finished rollout: the webhook holds such a set on its UPDATE
      name: 'puts a newly gated set at rest (partition 0, all pods ready) to replicas',
      set: { partition: 0, update: OLD, current: OLD },
      pods: all(3, healthy(OLD)),
      expected: { action: 'set-partition', from: 0, to: 3, event: 'RolloutComplete' },
    },
    {
      name: 'follows a scale-down at rest',
      set: { replicas: 2, partition: 3, update: OLD, current: OLD },
      pods: all(3, healthy(OLD)),
      expected: { action: 'set-partition', from: 3, to: 2, event: 'Hold' },
    },
    {
      name: 'follows a scale-up at rest without waiting for the new pods',
      set: { replicas: 5, partition: 3, update: OLD, current: OLD },
      pods: all(3, healthy(OLD)),
      expected: { action: 'set-partition', from: 3, to: 5, event: 'Hold' },
    },
    {
      name: 'steps at once over pods already on updateRevision after the partition was put back to replicas',
      set: { partition: 3 },
      pods: [healthy(OLD), healthy(NEW), healthy(NEW)],
      expected: {
        action: 'set-partition',
        from: 3,
        to: 1,
        event: 'PartitionUpdate',
        message: `Updated partition from 3 to 1: pods web-2 and web-1 already run revision ${NEW}`,
      },
    },
    {
      name: 'ignores a set that is not health-gated',
      set: { partition: 3, annotations: { [HEALTH_GATED_ANNOTATION]: 'off' } },
      pods: all(3, healthy(OLD)),
      expected: { action: 'none' },
    },
    {
      name: 'ignores OnDelete',
      set: { strategyType: 'OnDelete' },
      pods: all(3, healthy(OLD)),
      expected: { action: 'none', reason: expect.stringContaining('OnDelete') },
    },
  ];

  it.each(cases)('$name', ({ set, pods, extra, expected }) => {
    expect(decide(set, pods, extra)).toMatchObject(expected);
  });
});

describe('decideRollout: minReadySeconds', () => {
  it.each([
    { name: 'the default applies when the set has none', minReadySeconds: undefined, readySeconds: 45, retryAfterMs: undefined },
    { name: "the set's own minReadySeconds wins over the default", minReadySeconds: 60, readySeconds: 45, retryAfterMs: 15_000 },
    { name: 'a lower minReadySeconds of the set wins too', minReadySeconds: 10, readySeconds: 15, retryAfterMs: undefined },
  ])('$name', ({ minReadySeconds, readySeconds, retryAfterMs }) => {
    const decision = decide({ partition: 2, minReadySeconds }, [healthy(OLD), healthy(OLD), readyFor(NEW, readySeconds)]);
    if (retryAfterMs === undefined) expect(decision).toMatchObject({ action: 'set-partition', from: 2, to: 1 });
    else expect(decision).toEqual({ action: 'wait', retryAfterMs, reason: `pod web-2 ready for ${readySeconds}s of minReadySeconds ${minReadySeconds}` });
  });
});

describe('decideRollout over a whole rollout', () => {
  it('keeps one RolloutBlocked cause while the same pod stays broken', () => {
    const set = { partition: 3 };
    const pods = [crashLooping(OLD), healthy(OLD), healthy(OLD)];
    const first = decide(set, pods);
    const later = decide(set, pods, { now: new Date(NOW.getTime() + 300_000) });
    expect(first).toMatchObject({ action: 'blocked' });
    expect(later).toEqual(first);
  });

  it('steps 3→2→1→0 one pod at a time, paced by minReadySeconds and the rate limit, then completes', () => {
    // plays the StatefulSet controller: a step replaces the target at once, Ready from that moment
    const pods: PodState[] = all(3, healthy(OLD));
    let partition = 3;
    let now = NOW;
    let lastStepAt: Date | undefined;
    const log: string[] = [];
    for (let round = 0; round < 20 && !log.at(-1)?.includes('RolloutComplete'); round++) {
      const decision = decideRollout({
        set: makeSet({ partition }),
        pods: makePods(pods),
        now,
        lastStepAt,
        minStepIntervalMs: MIN_STEP_INTERVAL_MS,
        defaultMinReadySeconds: DEFAULT_MIN_READY_SECONDS,
      });
      const at = `t+${(now.getTime() - NOW.getTime()) / 1000}s`;
      if (decision.action === 'wait') {
        now = new Date(now.getTime() + decision.retryAfterMs);
      } else if (decision.action === 'set-partition') {
        log.push(`${at} ${decision.event} ${decision.from}→${decision.to}`);
        if (decision.event === 'PartitionUpdate') {
          pods[decision.to] = { revision: NEW, readySince: now };
          lastStepAt = now;
        }
        partition = decision.to;
      } else {
        throw new Error(`unexpected decision at ${at}: ${JSON.stringify(decision)}`);
      }
    }
    expect(log).toEqual([
      't+0s PartitionUpdate 3→2',
      't+60s PartitionUpdate 2→1',
      't+120s PartitionUpdate 1→0',
      't+150s RolloutComplete 0→3',
    ]);
  });
});

describe('isHealthGated', () => {
  it.each<{ name: string; labels: Record<string, string>; annotations: Record<string, string>; gated: boolean }>([
    { name: 'label and annotation', labels: { 'rollguard.io/enabled': 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE }, gated: true },
    { name: 'annotation without the enabled label', labels: {}, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE }, gated: false },
    { name: 'label without the annotation', labels: { 'rollguard.io/enabled': 'true' }, annotations: {}, gated: false },
    { name: 'another annotation value', labels: { 'rollguard.io/enabled': 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: 'fast' }, gated: false },
  ])('$name → $gated', ({ labels, annotations, gated }) => {
    expect(isHealthGated({ metadata: { name: 'web', labels, annotations } })).toBe(gated);
  });
});
