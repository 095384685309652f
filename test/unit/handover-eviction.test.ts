import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { decideEviction, type EvictionFacts } from '../../src/handover/eviction.js';

const NOW = new Date('2026-03-01T12:00:00Z');
const set = (annotations: Record<string, string> = {}, readyReplicas = 3): V1StatefulSet => ({
  metadata: {
    name: 'db',
    labels: { 'rollguard.io/enabled': 'true' },
    annotations: { 'rollguard.io/rollout': 'health-gated', 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': 'POST :8008/switchover', ...annotations },
  },
  status: { replicas: 3, readyReplicas },
});
const pod = (role: string, requested = false): V1Pod => ({
  metadata: { name: 'db-0', uid: 'u0', labels: { role }, ...(requested ? { annotations: { 'rollguard.io/handover': 'requested' } } : {}) },
});
const facts = (over: Partial<EvictionFacts>): EvictionFacts => ({ pod: pod('primary'), set: set(), dryRun: false, now: NOW, maxDeferMs: 600_000, ...over });

describe('decideEviction', () => {
  it('defers the eviction of the primary with 429 and marks the pod for a handover', () => {
    expect(decideEviction(facts({}))).toEqual({ allow: false, mark: true, message: 'rollguard: pod db-0 is the primary of StatefulSet db; eviction triggered a handover of the role, retry' });
  });

  it('marks nothing on a dry run, or when a handover is already requested or in flight', () => {
    expect(decideEviction(facts({ dryRun: true }))).toMatchObject({ allow: false, mark: false });
    expect(decideEviction(facts({ pod: pod('primary', true) }))).toMatchObject({ allow: false, mark: false, message: expect.stringContaining('in progress') });
    const inFlight = set({ 'rollguard.io/handover-state': JSON.stringify({ from: 'db-0', fromUid: 'u0', to: 'db-1', trigger: 'rollout', startedAt: NOW.toISOString(), attempt: 1, fallback: false }) });
    expect(decideEviction(facts({ set: inFlight }))).toMatchObject({ allow: false, mark: false });
  });

  it('allows every other eviction at once', () => {
    expect(decideEviction(facts({ pod: pod('replica') }))).toEqual({ allow: true });
    expect(decideEviction(facts({ set: undefined }))).toEqual({ allow: true });
    expect(decideEviction(facts({ pod: undefined }))).toEqual({ allow: true });
    const notGated = set();
    delete notGated.metadata!.annotations!['rollguard.io/rollout'];
    expect(decideEviction(facts({ set: notGated }))).toEqual({ allow: true });
  });

  it('allows with a warning when no other pod is Ready, or once the deferral has lasted its bound', () => {
    expect(decideEviction(facts({ set: set({}, 1) }))).toMatchObject({ allow: true, warning: expect.stringContaining('no other pod is Ready') });
    expect(decideEviction(facts({ firstDeferredAt: new Date(NOW.getTime() - 600_000) }))).toMatchObject({ allow: true, warning: expect.stringContaining('after 10 m') });
    expect(decideEviction(facts({ firstDeferredAt: new Date(NOW.getTime() - 599_000) }))).toMatchObject({ allow: false });
  });
});
