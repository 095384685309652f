import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import pino from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { HandoverRunner } from '../../src/handover/runner.js';
import { createMetrics } from '../../src/metrics.js';

const HANDOVER = { 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': 'POST :8008/switchover' };

function set(replicas: number): V1StatefulSet {
  return { metadata: { namespace: 'ns', name: 'db', uid: 'set-uid', annotations: HANDOVER }, spec: { replicas, serviceName: 'db', selector: {}, template: {} } };
}

function pod(ordinal: number, role: string): V1Pod {
  return { metadata: { namespace: 'ns', name: `db-${ordinal}`, uid: `uid-${ordinal}`, labels: { role } } };
}

function runner(): HandoverRunner {
  return new HandoverRunner({
    patchPod: async () => ({}),
    readSecret: async () => undefined,
    lookups: {} as never,
    enqueue: () => undefined,
    metrics: createMetrics(new Registry()),
    logger: pino({ level: 'silent' }),
    signal: new AbortController().signal,
  });
}

describe('HandoverRunner memory', () => {
  it('reports a scale-down of the primary once, and keeps its uid only while the pod is among the set’s pods', async () => {
    const r = runner();
    const reasons: string[] = [];
    const record = async (spec: { reason: string }): Promise<void> => void reasons.push(spec.reason);
    const pods = [pod(0, 'replica'), pod(1, 'replica'), pod(2, 'primary')];
    r.noteSetChange(set(3), set(2), pods, record);
    r.noteSetChange(set(3), set(2), pods, record);
    await new Promise((resolve) => setImmediate(resolve));
    expect(reasons).toEqual(['PrimaryScaledDown']);
    expect(r.memory().scaled_down).toBe(1);
    // db-2 is gone: the next scale-down of the set finds no uid of it left
    r.noteSetChange(set(2), set(1), pods.slice(0, 2), record);
    await new Promise((resolve) => setImmediate(resolve));
    expect(r.memory().scaled_down).toBe(0);
    expect(reasons).toEqual(['PrimaryScaledDown']);
  });

  it('forgets a set that is gone: its reported and acknowledged pods', () => {
    const r = runner();
    r.acknowledgeRemoval('ns/db', [pod(2, 'primary')]);
    r.acknowledgeRemoval('ns/other', [pod(5, 'primary')]);
    expect(r.memory().scaled_down).toBe(2);
    r.forget('ns/db');
    expect(r.memory().scaled_down).toBe(1);
  });
});
