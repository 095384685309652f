import { KubeConfig, type CoreV1Event } from '@kubernetes/client-node';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { EventRecorder, type EventRecorderOptions } from '../../src/kube/events.js';
import { waitFor } from '../env/wait.js';

const subject = { apiVersion: 'apps/v1', kind: 'StatefulSet', namespace: 'ns', name: 'web', uid: 'set-uid', resourceVersion: '101' };
const spec = { type: 'Normal', reason: 'ConfigChanged', message: 'ConfigMap app changed (resourceVersion 812 → 845)', action: 'PatchPodTemplate' } as const;

/** An API whose create answers with the given outcomes in turn (then success); it keeps what was stored. */
function fakeApi(outcomes: ('stored' | 'refused' | 'lost' | 'stored-answer-lost' | 'exists')[]) {
  const stored: CoreV1Event[] = [];
  const tries: string[] = [];
  const api: NonNullable<EventRecorderOptions['api']> = {
    createNamespacedEvent: async ({ body }) => {
      const outcome = outcomes.shift() ?? 'stored';
      tries.push(body.metadata!.name!);
      if (stored.some((e) => e.metadata!.name === body.metadata!.name)) throw Object.assign(new Error('already exists'), { code: 409 });
      if (outcome === 'refused') throw Object.assign(new Error('forbidden'), { code: 403 });
      if (outcome === 'lost') throw new TypeError('fetch failed');
      stored.push(body);
      if (outcome === 'stored-answer-lost') throw new TypeError('fetch failed: read ECONNRESET');
      return body;
    },
    patchNamespacedEvent: async () => ({}) as CoreV1Event,
  };
  return { api, stored, tries };
}

const recorder = (api: EventRecorderOptions['api']): EventRecorder =>
  new EventRecorder({ kubeConfig: new KubeConfig(), component: 'rollguard', instance: 'test', logger: pino({ level: 'silent' }), api, retryDelaysMs: [5, 5, 5] });

describe('EventRecorder', () => {
  it('recordOnce: writes the Event under the name given, at the time given, and a second telling by anyone finds it there', async () => {
    const { api, stored, tries } = fakeApi(['stored', 'stored', 'refused']);
    const at = new Date('2026-12-01T10:00:00.000Z');
    const name = 'web.188cd3b1a2f3c4d5';
    await expect(recorder(api).recordOnce(subject, spec, { name, at })).resolves.toBe('created');
    // another replica, or this one after a restart: its own recorder, the same name
    await expect(recorder(api).recordOnce(subject, spec, { name, at })).resolves.toBe('found');
    expect(stored).toHaveLength(1);
    expect(stored[0]).toMatchObject({ metadata: { name, namespace: 'ns' }, reason: 'ConfigChanged', message: spec.message, count: 1, firstTimestamp: at, lastTimestamp: at });
    await expect(recorder(api).recordOnce(subject, spec, { name: 'web.other', at })).resolves.toBe('failed');
    expect(tries).toEqual([name, name, 'web.other']);
  });

  it('writes an Event again, the same one, when its write failed with no answer: a broken connection loses no Event', async () => {
    const { api, stored, tries } = fakeApi(['lost', 'lost']);
    const events = recorder(api);
    await events.record(subject, spec);
    await waitFor('the Event stored', () => (stored.length === 1 ? true : undefined), { timeoutMs: 2_000, intervalMs: 5 });
    expect(tries).toHaveLength(3);
    expect(new Set(tries).size).toBe(1);
    expect(stored[0]).toMatchObject({ reason: 'ConfigChanged', message: spec.message, involvedObject: { uid: 'set-uid' } });
    expect(events.pendingCount()).toBe(0);
  });

  it('stops at a 409 when the first write had landed and only its answer was lost', async () => {
    const { api, stored, tries } = fakeApi(['stored-answer-lost']);
    const events = recorder(api);
    await events.record(subject, spec);
    await waitFor('the retry', () => (tries.length === 2 ? true : undefined), { timeoutMs: 2_000, intervalMs: 5 });
    await new Promise((r) => setTimeout(r, 30));
    expect(stored).toHaveLength(1);
    expect(tries).toHaveLength(2);
    expect(events.pendingCount()).toBe(0);
  });

  it('does not retry a refused write, and gives up after the last delay', async () => {
    const refused = fakeApi(['refused']);
    await recorder(refused.api).record(subject, spec);
    await new Promise((r) => setTimeout(r, 30));
    expect(refused.tries).toHaveLength(1);
    const unreachable = fakeApi(['lost', 'lost', 'lost', 'lost', 'lost']);
    const events = recorder(unreachable.api);
    await events.record(subject, spec);
    await waitFor('every try', () => (unreachable.tries.length === 4 && events.pendingCount() === 0 ? true : undefined), { timeoutMs: 2_000, intervalMs: 5 });
    await new Promise((r) => setTimeout(r, 30));
    expect(unreachable.tries).toHaveLength(4);
    expect(unreachable.stored).toEqual([]);
  });

  it("forgets the aggregation of an object that is gone, and only that object's", async () => {
    const { api, stored } = fakeApi([]);
    const events = recorder(api);
    const other = { ...subject, name: 'db', uid: 'other-uid' };
    await events.record(subject, spec);
    await events.record(subject, { ...spec, reason: 'RestartsDeferred' });
    await events.record(other, spec);
    expect(events.aggregatedCount()).toBe(3);
    events.forget('set-uid');
    expect(events.aggregatedCount()).toBe(1);
    // the other object still counts on its Event (a PATCH, no new one); the gone one's uid is not a prefix of another's
    events.forget('other');
    await events.record(other, spec);
    expect(stored).toHaveLength(3);
    expect(events.aggregatedCount()).toBe(1);
  });
});

