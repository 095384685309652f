import type { V1StatefulSet } from '@kubernetes/client-node';
import { appsV1, coreV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { Logger } from 'pino';
import type { EventRecorder } from '../kube/events.js';
import { Controller, type ControllerStatus, type Wake } from '../kube/controller.js';
import { objectKey, splitObjectKey } from '../kube/informer.js';
import type { ObjectEvent } from '../kube/object-store.js';
import { RawApi } from '../kube/raw-api.js';
import { createStatefulSetCache, type StatefulSetCache } from '../kube/statefulsets.js';
import type { Runnable } from '../manager.js';
import type { Hold, Metrics } from '../metrics.js';
import { ENABLED_LABEL } from '../restarter/annotations.js';
import { DEFAULT_REPLICAS, isHealthGated } from './decision.js';
import { HEALTH_CHECK_TIMEOUT_MS, probeSetHealth } from './health-probe.js';
import { apiTargetLookups } from '../egress/lookups.js';
import { annotatedLastStep } from './last-step.js';
import { createPodInformer } from './pod-cache.js';
import type { DisruptionGates, GateProgress } from './disruption-gate.js';
import { RolloutReconciler } from './reconciler.js';
import { heldScaleDown } from './scale-down-hold.js';

/** Reconciles at once; each is a cache read and at most one write, and a set is never worked on twice at once. */
export const DEFAULT_ROLLOUT_WORKERS = 2;
/**
 * A block is reported (Event, metric) once it has lasted this long: every step makes the pod
 * being replaced missing, then Pending, then not Ready for a while, and that is progress.
 * A crash loop or a failed image pull takes longer than this to show anyway.
 */
export const DEFAULT_BLOCKED_REPORT_AFTER_MS = 30_000;
/** A reported block is looked at again this often: a health URL recovers without any watch event. */
export const DEFAULT_BLOCKED_RECHECK_MS = 10_000;
/** Every gated set is queued again this often, a guard against a missed event; a set at rest costs no API call. */
export const DEFAULT_ROLLOUT_RESYNC_PERIOD_MS = 5 * 60_000;
const POD_KIND_LABEL = 'Pod';

export interface RolloutControllerOptions {
  kubeConfig: KubeAccess;
  /** Namespaces to watch; undefined: all. */
  namespaces: string[] | undefined;
  /**
   * The StatefulSet cache shared with the restarter; its owner starts it and keeps it running.
   * Without it the controller lists and watches the labelled sets itself while it runs.
   */
  statefulSets?: StatefulSetCache;
  /** The least time between two steps of one set. */
  minStepIntervalMs: number;
  /** How long a pod must be Ready before the next step, for a set whose minReadySeconds is 0. */
  defaultMinReadySeconds: number;
  logger: Logger;
  metrics: Pick<
    Metrics,
    'rolloutSteps' | 'rolloutBlockedSeconds' | 'rolloutLastStep' | 'reconcileDuration' | 'reconcileErrors' | 'queueDepth' | 'workers' | 'cachedObjects'
  >;
  events: Pick<EventRecorder, 'record'>;
  /** Asked before every write that stops pods (src/handover's primary handover); omitted: nothing guards them. */
  gate?: DisruptionGates;
  workers?: number;
  blockedReportAfterMs?: number;
  blockedRecheckMs?: number;
  /** 0 turns the periodic resync off. */
  resyncPeriodMs?: number;
  healthCheckTimeoutMs?: number;
  /** hosts a health URL may name besides the set's own Services and pods (--allowed-probe-hosts) */
  allowedProbeHosts?: readonly string[];
}

/** One rollout in progress, for /status. */
export interface RolloutSummary {
  namespace: string;
  name: string;
  partition: number;
  replicas: number;
  updateRevision: string;
  /** What keeps the rollout from stepping, e.g. "Rollout blocked at partition 3: pod web-0 is not ready (CrashLoopBackOff)". */
  blockedOn?: string;
  blockedBy?: { pod: string; healthCheck: boolean };
  /** RFC 3339: when the block in force was first seen. */
  blockedSince?: string;
  /** RFC 3339. */
  lastStepAt?: string;
  /** The move of a role in flight that the gate reports (the primary handover). */
  handover?: GateProgress;
  /** A scale-down held at `replicas` until the primary has left the pods it removes (rollguard.io/wanted-replicas). */
  wantedReplicas?: number;
}

export interface RolloutControllerStatus {
  rollouts: RolloutSummary[];
}

export interface RolloutController extends Runnable {
  /** The work queue and workers of the running term. */
  controllerStatus(): ControllerStatus;
  /** Rollouts in progress: health-gated sets not at rest. Empty while not running without a shared cache. */
  status(): RolloutControllerStatus;
}

/** What holds each rollout in progress, for rollguard_rollouts_held and its longest hold. */
export function rolloutHolds(rollouts: readonly RolloutSummary[]): Hold[] {
  return rollouts.flatMap((r): Hold[] => [
    ...(r.blockedBy ? [{ reason: r.blockedBy.healthCheck ? ('health_check' as const) : ('unhealthy_pod' as const), ...sinceOf(r.blockedSince) }] : []),
    ...(r.handover?.paused ? [{ reason: r.handover.gaveUp ? ('handover_gave_up' as const) : ('handover_paused' as const), ...sinceOf(r.handover.startedAt) }] : []),
    ...(r.wantedReplicas !== undefined ? [{ reason: 'scale_down' as const }] : []),
  ]);
}

function sinceOf(iso: string | undefined): { sinceMs?: number } {
  const ms = iso === undefined ? NaN : Date.parse(iso);
  return Number.isNaN(ms) ? {} : { sinceMs: ms };
}

function keyOf(set: V1StatefulSet): string {
  return objectKey(set.metadata?.namespace ?? '', set.metadata?.name ?? '');
}

function inProgress(set: V1StatefulSet): boolean {
  const replicas = set.spec?.replicas ?? DEFAULT_REPLICAS;
  const partition = set.spec?.updateStrategy?.rollingUpdate?.partition ?? 0;
  return set.status?.updateRevision !== set.status?.currentRevision || partition !== replicas;
}

/** A set event wakes the set while it is health-gated, or just stopped being so (its state is dropped then). */
export function rolloutWakes(event: ObjectEvent<V1StatefulSet>): Wake[] {
  const { previous, current } = event;
  if (!current) return [];
  return isHealthGated(current) || (previous !== undefined && isHealthGated(previous)) ? [{ key: keyOf(current) }] : [];
}

/**
 * Health-gated rollouts: watches the labelled StatefulSets and their pods, and steps each
 * gated set's partition with RolloutReconciler. Only the leader runs it; each term starts
 * from what the cluster holds, with a reconciler and a pod cache of its own.
 */
export function createRolloutController(opts: RolloutControllerOptions): RolloutController {
  if (!(opts.minStepIntervalMs >= 0)) throw new Error(`minStepIntervalMs must be 0 or more, got ${opts.minStepIntervalMs}`);
  if (!(opts.defaultMinReadySeconds >= 0)) throw new Error(`defaultMinReadySeconds must be 0 or more, got ${opts.defaultMinReadySeconds}`);
  const { metrics } = opts;
  const log = opts.logger.child({ component: 'rollout' });
  const api = new RawApi(opts.kubeConfig);
  const apps = appsV1(opts.kubeConfig);
  const core = coreV1(opts.kubeConfig);
  const healthCheckTimeoutMs = opts.healthCheckTimeoutMs ?? HEALTH_CHECK_TIMEOUT_MS;
  const targets = apiTargetLookups(core);
  // without a shared cache the controller lists and watches the labelled sets itself, during its terms
  const ownSets = opts.statefulSets === undefined;
  const sets = opts.statefulSets ?? createStatefulSetCache({ api, namespaces: opts.namespaces, labelSelector: `${ENABLED_LABEL}=true`, logger: log });
  let reconciler: RolloutReconciler | undefined;

  const controller = new Controller({
    name: 'rollout',
    workers: opts.workers ?? DEFAULT_ROLLOUT_WORKERS,
    debounceMs: 0,
    resyncPeriodMs: opts.resyncPeriodMs ?? DEFAULT_ROLLOUT_RESYNC_PERIOD_MS,
    keys: () => sets.store.list().filter(isHealthGated).map(keyOf),
    syncs: ownSets ? [] : [sets.informer],
    describe: (key) => `StatefulSet ${key}`,
    objects: 'health-gated StatefulSet',
    logger: log,
    metrics,
    term: (term) => {
      const pods = createPodInformer({ api, namespaces: opts.namespaces, keepAnnotations: opts.gate?.podAnnotations ?? [], logger: log });
      const current = new RolloutReconciler({
        statefulSet: (namespace, name) => sets.store.get(namespace, name),
        podsOf: (namespace, setName) => pods.cache.podsOf(namespace, setName),
        pod: (namespace, name) => pods.cache.get(namespace, name),
        patchStatefulSet: (namespace, name, ops) => apps.patchNamespacedStatefulSet({ name, namespace, body: ops }),
        deletePod: async (namespace, name, preconditions) => {
          await core.deleteNamespacedPod({ name, namespace, body: { preconditions } });
        },
        probeHealth: (set, url, probeSignal) =>
          probeSetHealth(set, url, pods.cache.podsOf(set.metadata?.namespace ?? '', set.metadata?.name ?? ''), {
            lookups: targets,
            allowedHosts: opts.allowedProbeHosts ?? [],
            timeoutMs: healthCheckTimeoutMs,
            signal: probeSignal,
          }),
        enqueue: (key) => term.enqueue({ key }),
        ...(opts.gate ? { gate: opts.gate.forTerm({ enqueue: (key) => term.enqueue({ key }), signal: term.signal }) } : {}),
        events: opts.events,
        metrics,
        logger: log,
        minStepIntervalMs: opts.minStepIntervalMs,
        defaultMinReadySeconds: opts.defaultMinReadySeconds,
        blockedReportAfterMs: opts.blockedReportAfterMs ?? DEFAULT_BLOCKED_REPORT_AFTER_MS,
        blockedRecheckMs: opts.blockedRecheckMs ?? DEFAULT_BLOCKED_RECHECK_MS,
        signal: term.signal,
      });
      reconciler = current;
      term.signal.addEventListener('abort', () => {
        if (reconciler === current) reconciler = undefined;
      }, { once: true });
      pods.cache.onChange((setKey) => {
        metrics.cachedObjects.set({ kind: POD_KIND_LABEL }, pods.cache.size());
        const { namespace, name } = splitObjectKey(setKey);
        const set = sets.store.get(namespace, name);
        if (set && isHealthGated(set)) term.enqueue({ key: setKey });
      });
      const informers = ownSets ? [sets.informer, pods.informer] : [pods.informer];
      return {
        reconciler: { reconcile: (key) => current.reconcile(key) },
        runnables: informers,
        syncs: informers,
        // whatever happened while no term watched: sets at rest are held, sets mid-rollout resume where they are
        onSynced: () => {
          for (const set of sets.store.list()) if (isHealthGated(set)) current.noteSetChange(undefined, set);
        },
        settled: () => current.settled(),
      };
    },
  });

  // noted before the caches synced too: a spec change then still gets its hold
  sets.store.onEvent((event) => {
    const { previous } = event;
    if (!event.current) {
      if (previous) reconciler?.forget(keyOf(previous));
      return;
    }
    reconciler?.noteSetChange(previous, event.current);
  });
  controller.watches(sets.store.onEvent.bind(sets.store), rolloutWakes);

  return {
    name: controller.name,
    start: (signal) => controller.start(signal),
    stopped: () => controller.stopped(),
    controllerStatus: () => controller.status(),

    status(): RolloutControllerStatus {
      const current = reconciler;
      if (ownSets && !current) return { rollouts: [] };
      const rollouts: RolloutSummary[] = sets.store
        .list()
        .filter((set) => isHealthGated(set) && (inProgress(set) || opts.gate?.progress(set) !== undefined || heldScaleDown(set).kind === 'held'))
        .map((set) => {
          const key = keyOf(set);
          const handover = opts.gate?.progress(set);
          const scaleDown = heldScaleDown(set);
          const state = current?.state(key);
          const lastStep = state?.lastStepAt ?? annotatedLastStep(set);
          return {
            namespace: set.metadata?.namespace ?? '',
            name: set.metadata?.name ?? '',
            partition: set.spec?.updateStrategy?.rollingUpdate?.partition ?? 0,
            replicas: set.spec?.replicas ?? DEFAULT_REPLICAS,
            updateRevision: set.status?.updateRevision ?? '',
            ...(state?.blockedOn !== undefined ? { blockedOn: state.blockedOn } : {}),
            ...(state?.blockedBy !== undefined ? { blockedBy: state.blockedBy } : {}),
            ...(state?.blockedSince !== undefined ? { blockedSince: state.blockedSince.toISOString() } : {}),
            ...(lastStep !== undefined ? { lastStepAt: lastStep.toISOString() } : {}),
            ...(handover !== undefined ? { handover } : {}),
            ...(scaleDown.kind === 'held' ? { wantedReplicas: scaleDown.wanted } : {}),
          };
        })
        .sort((a, b) => objectKey(a.namespace, a.name).localeCompare(objectKey(b.namespace, b.name)));
      return { rollouts };
    },
  };
}
