import type { V1DaemonSet, V1Deployment, V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import type { Workload, WorkloadKind } from '../kube/workloads.js';
import type { Timing } from '../restarter/timing.js';
import { formatDuration } from '../restarter/timing.js';
import { decideRollout, isHealthGated } from '../rollout/decision.js';
import { annotatedLastStep } from '../rollout/last-step.js';
import { podHealth } from '../rollout/pods.js';
import { heldScaleDown } from '../rollout/scale-down-hold.js';
import { readHandoverState } from '../handover/state.js';
import { momentOf, type NextStep, type PodRevision } from './explanation.js';
import { podRevisionLabel, type EventFact, type RevisionFact } from './facts.js';

/** rollout/reconciler.ts's Event reason of a block. */
const REASON_ROLLOUT_BLOCKED = 'RolloutBlocked';

export type RolloutState = 'rolling' | 'held' | 'handover' | 'handover-paused';

export interface RolloutProgress {
  /** undefined: at rest, nothing rolling. */
  state?: RolloutState;
  summary?: string;
  next: NextStep[];
  pods: PodRevision[];
}

/** The revision new pods get: the StatefulSet's updateRevision, else the newest. */
function updateRevision(kind: WorkloadKind, workload: Workload, revisions: readonly RevisionFact[]): RevisionFact | undefined {
  if (kind === 'StatefulSet') {
    const name = (workload as V1StatefulSet).status?.updateRevision;
    const found = revisions.find((r) => r.name === name);
    if (found) return found;
  }
  return [...revisions].sort((a, b) => b.revision - a.revision)[0];
}

/** The running pods by the revision they were made from, the update revision first. */
export function podsByRevision(kind: WorkloadKind, workload: Workload, pods: readonly V1Pod[], revisions: readonly RevisionFact[], now: Date): PodRevision[] {
  const label = podRevisionLabel(kind);
  const update = updateRevision(kind, workload, revisions);
  const groups = new Map<string, PodRevision>();
  const live = pods.filter((p) => !p.metadata?.deletionTimestamp).sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? '', 'en', { numeric: true }));
  for (const pod of live) {
    const value = pod.metadata?.labels?.[label] ?? '';
    const revision = revisions.find((r) => r.podLabel === value)?.name ?? (value || '(none)');
    const group = groups.get(revision) ?? { revision, update: revision === update?.name, pods: [] };
    const created = pod.metadata?.creationTimestamp;
    group.pods.push({ name: pod.metadata?.name ?? '', ...(created ? { createdAt: momentOf(new Date(created), now) } : {}), ready: podHealth(pod, now, 0).ready });
    groups.set(revision, group);
  }
  return [...groups.values()].sort((a, b) => Number(b.update) - Number(a.update));
}

/** Whether the workload's own controller is still replacing pods, from its status. */
function controllerRolling(kind: WorkloadKind, workload: Workload): string | undefined {
  const generation = workload.metadata?.generation;
  if (kind === 'StatefulSet') {
    const s = (workload as V1StatefulSet).status;
    if (s?.observedGeneration !== undefined && s.observedGeneration !== generation) return `the StatefulSet controller has not observed generation ${generation} yet`;
    const replicas = (workload as V1StatefulSet).spec?.replicas ?? 1;
    if (s?.updateRevision && s.currentRevision !== s.updateRevision) return `${s.updatedReplicas ?? 0}/${replicas} pods on revision ${s.updateRevision}`;
    return undefined;
  }
  if (kind === 'Deployment') {
    const d = workload as V1Deployment;
    const s = d.status;
    if (s?.observedGeneration !== undefined && s.observedGeneration !== generation) return `the Deployment controller has not observed generation ${generation} yet`;
    const replicas = d.spec?.replicas ?? 1;
    if ((s?.updatedReplicas ?? 0) < replicas || (s?.replicas ?? 0) > (s?.updatedReplicas ?? 0)) return `${s?.updatedReplicas ?? 0}/${replicas} pods on the new ReplicaSet, ${s?.replicas ?? 0} in all`;
    return undefined;
  }
  const s = (workload as V1DaemonSet).status;
  if (s?.observedGeneration !== undefined && s.observedGeneration !== generation) return `the DaemonSet controller has not observed generation ${generation} yet`;
  if (s && (s.updatedNumberScheduled ?? 0) < s.desiredNumberScheduled) return `${s.updatedNumberScheduled ?? 0}/${s.desiredNumberScheduled} nodes run the new template`;
  return undefined;
}

/** The handover annotation's record: in flight, or paused after its attempts failed. */
function handover(set: V1StatefulSet, now: Date): RolloutProgress | undefined {
  const read = readHandoverState(set);
  if (read.kind === 'unreadable') return { next: [{ cause: 'handover', text: `rollguard cannot read rollguard.io/handover-state (${read.raw.slice(0, 80)}): the leader replaces it` }], pods: [] };
  if (read.kind !== 'state' || read.state.outcome === 'proceed') return undefined;
  const s = read.state;
  const nextAt = s.nextAt ? new Date(s.nextAt) : undefined;
  const at = nextAt && !Number.isNaN(nextAt.getTime()) ? { at: momentOf(nextAt, now) } : {};
  const attempt = `attempt ${s.attempt}${s.fallback ? ' (the fallback action)' : ''}`;
  if (s.outcome === 'paused') {
    return {
      state: 'handover-paused',
      summary: `handover of the primary role from ${s.from} paused since every attempt failed (started ${s.startedAt}); the rollout waits, no primary is stopped`,
      next: [{ cause: 'handover', ...at, text: `rollguard tries ${attempt} again${nextAt ? '' : ' at its interval'}; the Events HandoverFailed say why the attempts failed` }],
      pods: [],
    };
  }
  return {
    state: 'handover',
    summary: `handing the primary role from ${s.from} to ${s.to || 'a Ready pod'} (${attempt}, started ${s.startedAt}, trigger ${s.trigger})`,
    next: [{ cause: 'handover', ...at, text: `rollguard ${s.calledAt ? 'waits for the primary label to move after' : 'makes the call of'} ${attempt}` }],
    pods: [],
  };
}

/** The latest RolloutBlocked Event of rollguard's, whose message is the block's. */
function blockedSince(events: readonly EventFact[], message: string): Date | undefined {
  const blocked = events.filter((e) => e.reason === REASON_ROLLOUT_BLOCKED && e.message === message).sort((a, b) => b.lastAt.getTime() - a.lastAt.getTime());
  return blocked[0]?.firstAt;
}

/**
 * What the workload's rollout does now: a health-gated StatefulSet's next step, decided by the
 * same function the leader decides it with (decideRollout over the set and its pods, with the
 * recorded rules), its held scale-down and its handover; any other workload's rollout as its own
 * controller reports it. The health URL is not probed from here: a step that needs it says so.
 */
export function rolloutProgress(input: { kind: WorkloadKind; workload: Workload; pods: readonly V1Pod[]; revisions: readonly RevisionFact[]; events: readonly EventFact[]; timing: Timing; now: Date }): RolloutProgress {
  const { kind, workload, now, timing } = input;
  const pods = podsByRevision(kind, workload, input.pods, input.revisions, now);
  const rolling = controllerRolling(kind, workload);
  if (kind !== 'StatefulSet' || !isHealthGated(workload as V1StatefulSet)) {
    return rolling ? { state: 'rolling', summary: `rolling: ${rolling}`, next: [{ cause: 'controller', text: `the ${kind} controller replaces the pods (${rolling})` }], pods } : { next: [], pods };
  }
  const set = workload as V1StatefulSet;
  const inFlight = handover(set, now);
  if (inFlight?.state) return { ...inFlight, pods };
  const held = heldScaleDown(set);
  const scale: NextStep[] = held.kind === 'held' ? [{ cause: 'handover', text: `rollguard holds a scale-down to ${held.wanted} until the primary role has left ${held.removing.join(', ')}` }] : [];
  const decision = decideRollout({
    set,
    pods: [...input.pods],
    now,
    lastStepAt: annotatedLastStep(set),
    minStepIntervalMs: timing.rolloutMinStepIntervalMs,
    defaultMinReadySeconds: timing.rolloutMinReadyMs / 1000,
  });
  switch (decision.action) {
    case 'blocked': {
      const since = blockedSince(input.events, decision.message);
      return {
        state: 'held',
        summary: `${decision.message}${since ? ` (reported ${since.toISOString()})` : ' (not reported yet: a block is reported once it lasts)'}`,
        next: [...scale, { cause: 'rollout-blocked', text: `rollguard steps on once pod ${decision.pod} is healthy again; a rollback of the template goes through (the stuck pod is replaced)` }],
        pods,
      };
    }
    case 'wait':
      return { state: 'rolling', summary: `health-gated rollout: ${decision.reason}`, next: [...scale, { cause: 'rollout-step', at: momentOf(new Date(now.getTime() + decision.retryAfterMs), now), text: `rollguard makes the next partition step (${decision.reason}; at most one every ${formatDuration(timing.rolloutMinStepIntervalMs)})` }], pods };
    case 'set-partition':
      return decision.event === 'Hold'
        ? { next: [...scale, { cause: 'rollout-step', text: `rollguard holds the partition: ${decision.message}` }], pods }
        : { state: 'rolling', summary: `health-gated rollout: ${decision.message}`, next: [...scale, { cause: 'rollout-step', at: momentOf(now, now), text: `rollguard steps now: ${decision.message}` }], pods };
    case 'check-health':
      return { state: 'rolling', summary: 'health-gated rollout: the next step waits for the health URL', next: [...scale, { cause: 'rollout-step', text: `rollguard asks ${decision.url} before the next step (not probed from here; RolloutBlocked Events say when it fails)` }], pods };
    case 'delete-pod':
      return { state: 'rolling', summary: decision.message, next: [...scale, { cause: 'rollout-step', at: momentOf(now, now), text: `rollguard: ${decision.message}` }], pods };
    case 'none':
      return rolling ? { state: 'rolling', summary: `rolling: ${rolling}`, next: [...scale, { cause: 'controller', text: `the StatefulSet controller replaces the pods (${rolling})` }], pods } : { ...(scale.length > 0 ? { state: 'held' as const, summary: scale[0]!.text } : {}), next: scale, pods };
  }
}
