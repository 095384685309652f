import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { isTerminating, podHealth, podOrdinal, podRevision } from '../../src/rollout/pods.js';

const NOW = new Date('2025-03-01T12:00:00Z');

function secondsAgo(seconds: number): Date {
  return new Date(NOW.getTime() - seconds * 1000);
}

function container(name: string, ready: boolean, waiting?: string): V1ContainerStatus {
  return {
    name,
    ready,
    image: 'registry.example/app:1',
    imageID: '',
    restartCount: 0,
    state: waiting ? { waiting: { reason: waiting } } : { running: {} },
  };
}

/** A Running pod whose Ready condition turned True `readyFor` seconds ago. */
function runningPod(readyFor: number): V1Pod {
  return {
    metadata: { name: 'web-0', labels: { 'controller-revision-hash': 'web-6c4f8d' } },
    status: {
      phase: 'Running',
      conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: secondsAgo(readyFor) }],
      containerStatuses: [container('app', true)],
    },
  };
}

describe('podOrdinal', () => {
  it.each([
    { pod: 'web-0', set: 'web', ordinal: 0 },
    { pod: 'web-2', set: 'web', ordinal: 2 },
    { pod: 'web-10', set: 'web', ordinal: 10 },
    { pod: 'my-db-3', set: 'my-db', ordinal: 3 },
    { pod: 'web-1-0', set: 'web-1', ordinal: 0 },
    { pod: 'web-1-0', set: 'web', ordinal: undefined },
    { pod: 'web-01', set: 'web', ordinal: undefined },
    { pod: 'web-', set: 'web', ordinal: undefined },
    { pod: 'web-x', set: 'web', ordinal: undefined },
    { pod: 'db-1', set: 'web', ordinal: undefined },
    { pod: 'webby-1', set: 'web', ordinal: undefined },
  ])('$pod of set $set → $ordinal', ({ pod, set, ordinal }) => {
    expect(podOrdinal(pod, set)).toBe(ordinal);
  });

  it('orders pods as numbers: web-10 after web-2', () => {
    const names = ['web-10', 'web-2', 'web-1', 'web-11', 'web-9'];
    const sorted = [...names].sort((a, b) => podOrdinal(a, 'web')! - podOrdinal(b, 'web')!);
    expect(sorted).toEqual(['web-1', 'web-2', 'web-9', 'web-10', 'web-11']);
  });
});

describe('podRevision and isTerminating', () => {
  it('reads the controller-revision-hash label', () => {
    expect(podRevision(runningPod(60))).toBe('web-6c4f8d');
    expect(podRevision({ metadata: { name: 'web-0' } })).toBeUndefined();
  });

  it('is terminating once deletionTimestamp is set', () => {
    const pod = runningPod(60);
    expect(isTerminating(pod)).toBe(false);
    pod.metadata!.deletionTimestamp = NOW;
    expect(isTerminating(pod)).toBe(true);
  });
});

describe('podHealth', () => {
  const cases: { name: string; pod: V1Pod; minReadySeconds: number; ready: boolean; reason?: string; availableInMs?: number }[] = [
    { name: 'Ready, no minReadySeconds', pod: runningPod(0), minReadySeconds: 0, ready: true },
    { name: 'Ready exactly minReadySeconds', pod: runningPod(30), minReadySeconds: 30, ready: true },
    { name: 'Ready longer than minReadySeconds', pod: runningPod(600), minReadySeconds: 30, ready: true },
    {
      name: 'Ready for less than minReadySeconds',
      pod: runningPod(10),
      minReadySeconds: 30,
      ready: false,
      reason: 'ready for 10s of minReadySeconds 30',
      availableInMs: 20_000,
    },
    {
      name: 'crash-looping container',
      pod: {
        ...runningPod(0),
        status: {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'False', reason: 'ContainersNotReady' }],
          containerStatuses: [container('sidecar', true), container('app', false, 'CrashLoopBackOff')],
        },
      },
      minReadySeconds: 0,
      ready: false,
      reason: 'CrashLoopBackOff',
    },
    {
      name: 'image that cannot be pulled',
      pod: { metadata: {}, status: { phase: 'Pending', containerStatuses: [container('app', false, 'ImagePullBackOff')] } },
      minReadySeconds: 0,
      ready: false,
      reason: 'ImagePullBackOff',
    },
    {
      name: 'first failed pull',
      pod: { metadata: {}, status: { phase: 'Pending', containerStatuses: [container('app', false, 'ErrImagePull')] } },
      minReadySeconds: 0,
      ready: false,
      reason: 'ErrImagePull',
    },
    {
      name: 'crash-looping init container',
      pod: {
        metadata: {},
        status: {
          phase: 'Pending',
          initContainerStatuses: [container('migrate', false, 'CrashLoopBackOff')],
          containerStatuses: [container('app', false, 'PodInitializing')],
        },
      },
      minReadySeconds: 0,
      ready: false,
      reason: 'CrashLoopBackOff',
    },
    {
      name: 'unscheduled',
      pod: { metadata: {}, status: { phase: 'Pending' } },
      minReadySeconds: 0,
      ready: false,
      reason: 'Pending',
    },
    {
      name: 'containers being created',
      pod: { metadata: {}, status: { phase: 'Pending', containerStatuses: [container('app', false, 'ContainerCreating')] } },
      minReadySeconds: 0,
      ready: false,
      reason: 'Pending',
    },
    { name: 'no status yet', pod: { metadata: {} }, minReadySeconds: 0, ready: false, reason: 'Pending' },
    { name: 'Failed', pod: { metadata: {}, status: { phase: 'Failed', reason: 'Evicted' } }, minReadySeconds: 0, ready: false, reason: 'Failed' },
    {
      name: 'terminating though Ready',
      pod: { ...runningPod(600), metadata: { name: 'web-0', deletionTimestamp: NOW } },
      minReadySeconds: 0,
      ready: false,
      reason: 'Terminating',
    },
    {
      name: 'Running, readiness probe failing',
      pod: {
        metadata: {},
        status: {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'False', reason: 'ContainersNotReady', lastTransitionTime: secondsAgo(5) }],
          containerStatuses: [container('app', false)],
        },
      },
      minReadySeconds: 0,
      ready: false,
      reason: 'not Ready (ContainersNotReady)',
    },
    {
      name: 'Ready condition True but a container not ready',
      pod: {
        metadata: {},
        status: {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: secondsAgo(600) }],
          containerStatuses: [container('app', true), container('proxy', false)],
        },
      },
      minReadySeconds: 0,
      ready: false,
      reason: 'container proxy not ready',
    },
    {
      name: 'no lastTransitionTime while minReadySeconds applies',
      pod: { metadata: {}, status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] } },
      minReadySeconds: 30,
      ready: false,
      reason: 'Ready condition has no lastTransitionTime',
    },
  ];

  it.each(cases)('$name', ({ pod, minReadySeconds, ready, reason, availableInMs }) => {
    const health = podHealth(pod, NOW, minReadySeconds);
    expect(health.ready).toBe(ready);
    if (!health.ready) {
      expect(health.reason).toBe(reason);
      expect(health.availableInMs).toBe(availableInMs);
    }
  });

  it('reads lastTransitionTime given as a JSON string (pods decoded from raw JSON)', () => {
    const pod = runningPod(0);
    const fromJson = JSON.parse(JSON.stringify({ ...pod, status: { ...pod.status, conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: secondsAgo(45) }] } })) as V1Pod;
    expect(podHealth(fromJson, NOW, 30)).toEqual({ ready: true });
    expect(podHealth(fromJson, NOW, 60)).toMatchObject({ ready: false, availableInMs: 15_000 });
  });
});
