import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { coreV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { Logger } from 'pino';
import { apiTargetLookups } from '../egress/lookups.js';
import { statusCode } from '../kube/api-status.js';
import type { EventSpec } from '../kube/events.js';
import type { Metrics } from '../metrics.js';
import type { DisruptionGate, DisruptionGates, GateProgress, GateRequest, GateVerdict } from '../rollout/disruption-gate.js';
import { WANTED_REPLICAS_ANNOTATION, type HeldScaleDownOf } from '../rollout/scale-down-hold.js';
import { HandoverRunner } from './runner.js';
import { wantsHandover } from './settings.js';
import { HANDOVER_POD_ANNOTATIONS, readHandoverState } from './state.js';

/** Event reason: a scale-down held until the primary role has left the pods it removes. */
export const REASON_SCALE_DOWN_HELD = 'ScaleDownHeld';
const NOT_FOUND = 404;

/** /status: the handover in flight on a set, read from its state annotation. */
export function handoverProgress(set: V1StatefulSet): GateProgress | undefined {
  const read = readHandoverState(set);
  if (read.kind !== 'state' || read.state.outcome === 'proceed') return undefined;
  const s = read.state;
  const gaveUp = s.outcome === 'gave-up';
  return { from: s.from, to: s.to, attempt: s.attempt, fallback: s.fallback, startedAt: s.startedAt, paused: s.outcome === 'paused' || gaveUp, ...(gaveUp ? { gaveUp } : {}) };
}

/**
 * The primary handover as the rollout's disruption gate: a pod that matches a set's primary
 * selector goes only once the role has moved (HandoverRunner); a set without one is not guarded.
 */
class HandoverGate implements DisruptionGate {
  /** The held count whose ScaleDownHeld Event this term recorded, by set; dropped once the record is gone. */
  private readonly heldNoted = new Map<string, string>();

  constructor(
    private readonly runner: HandoverRunner,
    private readonly logger: Logger,
  ) {}

  async mayStop(request: GateRequest): Promise<GateVerdict> {
    const { scaleDown, set } = request;
    if (!wantsHandover(set)) return scaleDown ? { open: true, why: 'the set no longer asks for handovers (no primary selector), nothing to wait for' } : { open: true };
    if (scaleDown?.wanted === 0) return { open: true, why: 'no pod stays to take the primary role, so it stops with the set', warning: true };
    if (scaleDown) await this.noteHeld(request, scaleDown);
    const verdict = await this.runner.gate(
      request.key,
      set,
      request.pods,
      request.stopping,
      request,
      scaleDown ? { replicas: scaleDown.wanted, ordinalStart: set.spec?.ordinals?.start ?? 0 } : undefined,
    );
    if (!verdict.open || !scaleDown) return verdict;
    return { open: true, why: `no pod it removes (${scaleDown.removing.join(', ')}) is the primary` };
  }

  noteSetChange(previous: V1StatefulSet | undefined, current: V1StatefulSet, pods: () => readonly V1Pod[], record: (spec: EventSpec) => Promise<void>): void {
    if (current.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION] === undefined) this.heldNoted.delete(`${current.metadata?.namespace ?? ''}/${current.metadata?.name ?? ''}`);
    if (wantsHandover(current)) this.runner.noteSetChange(previous, current, pods(), record);
  }

  removing(set: V1StatefulSet, pods: readonly V1Pod[]): void {
    if (wantsHandover(set)) this.runner.acknowledgeRemoval(`${set.metadata?.namespace ?? ''}/${set.metadata?.name ?? ''}`, pods);
  }

  forget(key: string): void {
    this.heldNoted.delete(key);
    this.runner.forget(key);
  }

  settled(): Promise<void> {
    return this.runner.settled();
  }

  /** One Event per held count: the scale-down waits for the primary role to move. */
  private async noteHeld(request: GateRequest, held: HeldScaleDownOf<'held'>): Promise<void> {
    if (this.heldNoted.get(request.key) === held.raw) return;
    this.heldNoted.set(request.key, held.raw);
    const message = `Scale-down from ${held.replicas} to ${held.wanted} replicas held at ${held.replicas} until no pod it removes (${held.removing.join(', ')}) is the primary: a scale-down deletes pods without an eviction`;
    this.logger.info({ statefulSet: request.key, from: held.replicas, to: held.wanted }, message);
    await request.record({ type: 'Normal', reason: REASON_SCALE_DOWN_HELD, message, action: 'Scale' });
  }
}

/** The handover gate on a cluster, for main.ts to hand to the rollout controller: pods patched and Secrets read through the API. */
export function handoverGates(opts: { kubeConfig: KubeAccess; metrics: Pick<Metrics, 'handovers' | 'handoverDuration'>; logger: Logger }): DisruptionGates {
  const core = coreV1(opts.kubeConfig);
  const lookups = apiTargetLookups(core);
  const logger = opts.logger.child({ component: 'handover' });
  return {
    podAnnotations: HANDOVER_POD_ANNOTATIONS,
    progress: handoverProgress,
    forTerm: ({ enqueue, signal }) =>
      new HandoverGate(
        new HandoverRunner({
          patchPod: (namespace, name, ops) => core.patchNamespacedPod({ name, namespace, body: ops }),
          readSecret: async (namespace, name) => {
            try {
              return (await core.readNamespacedSecret({ name, namespace })).data ?? {};
            } catch (err) {
              if (statusCode(err) === NOT_FOUND) return undefined;
              throw err;
            }
          },
          lookups,
          enqueue,
          metrics: opts.metrics,
          logger,
          signal,
        }),
        logger,
      ),
  };
}
