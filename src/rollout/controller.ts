import { AppsV1Api, CoreV1Api, type KubeConfig, type V1StatefulSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { EventRecorder } from '../kube/events.js';
import { objectKey } from '../kube/informer.js';
import type { ObjectEvent } from '../kube/object-store.js';
import { RawApi } from '../kube/raw-api.js';
import { createStatefulSetCache, type StatefulSetCache } from '../kube/statefulsets.js';
import { WorkQueue } from '../kube/workqueue.js';
import type { Runnable } from '../manager.js';
import type { Metrics } from '../metrics.js';
import { ENABLED_LABEL } from '../restarter/annotations.js';
import { DEFAULT_REPLICAS, isHealthGated } from './decision.js';
import { HEALTH_CHECK_TIMEOUT_MS, probeSetHealth } from './health-probe.js';
import { apiTargetLookups } from '../egress/lookups.js';
import { annotatedLastStep } from './last-step.js';
import { createPodInformer, type PodInformer } from './pod-cache.js';
import { RolloutConflictError, RolloutReconciler } from './reconciler.js';

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
const QUEUE_NAME = 'rollout';
const POD_KIND_LABEL = 'Pod';

export interface RolloutControllerOptions {
  kubeConfig: KubeConfig;
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
  metrics: Pick<Metrics, 'rolloutSteps' | 'rolloutBlockedSeconds' | 'rolloutLastStep' | 'reconcileErrors' | 'queueDepth' | 'cachedObjects'>;
  events: Pick<EventRecorder, 'record'>;
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
  /** RFC 3339. */
  lastStepAt?: string;
}

export interface RolloutControllerStatus {
  rollouts: RolloutSummary[];
}

export interface RolloutController extends Runnable {
  /** Rollouts in progress: health-gated sets not at rest. Empty while not running without a shared cache. */
  status(): RolloutControllerStatus;
}

/** One run, from start to the abort of its signal (one leadership term). */
interface Run {
  signal: AbortSignal;
  queue: WorkQueue;
  sets: StatefulSetCache;
  pods: PodInformer;
  reconciler: RolloutReconciler;
  /** False until the caches synced and every gated set was queued once. */
  accepting: boolean;
  done: Promise<void>;
}

function keyOf(set: V1StatefulSet): string {
  return objectKey(set.metadata?.namespace ?? '', set.metadata?.name ?? '');
}

function inProgress(set: V1StatefulSet): boolean {
  const replicas = set.spec?.replicas ?? DEFAULT_REPLICAS;
  const partition = set.spec?.updateStrategy?.rollingUpdate?.partition ?? 0;
  return set.status?.updateRevision !== set.status?.currentRevision || partition !== replicas;
}

/**
 * Health-gated rollouts: watches the labelled StatefulSets and their pods, and steps each
 * gated set's partition with RolloutReconciler. Only the leader runs it; it can be started
 * again after it stopped (a new term starts from what the cluster holds).
 */
export function createRolloutController(opts: RolloutControllerOptions): RolloutController {
  const workerCount = opts.workers ?? DEFAULT_ROLLOUT_WORKERS;
  const resyncPeriodMs = opts.resyncPeriodMs ?? DEFAULT_ROLLOUT_RESYNC_PERIOD_MS;
  if (!Number.isInteger(workerCount) || workerCount < 1) throw new Error(`rollout workers must be a positive integer, got ${workerCount}`);
  if (!(opts.minStepIntervalMs >= 0)) throw new Error(`minStepIntervalMs must be 0 or more, got ${opts.minStepIntervalMs}`);
  if (!(opts.defaultMinReadySeconds >= 0)) throw new Error(`defaultMinReadySeconds must be 0 or more, got ${opts.defaultMinReadySeconds}`);
  if (!(resyncPeriodMs >= 0)) throw new Error(`resyncPeriodMs must be 0 or more, got ${resyncPeriodMs}`);
  const { metrics } = opts;
  const log = opts.logger.child({ component: 'rollout' });
  const api = new RawApi(opts.kubeConfig);
  const apps = opts.kubeConfig.makeApiClient(AppsV1Api);
  const core = opts.kubeConfig.makeApiClient(CoreV1Api);
  const healthCheckTimeoutMs = opts.healthCheckTimeoutMs ?? HEALTH_CHECK_TIMEOUT_MS;
  const targets = apiTargetLookups(core);

  let run: Run | undefined;

  const onSetEvent = (current: Run, event: ObjectEvent<V1StatefulSet>): void => {
    if (current.signal.aborted) return;
    const { previous } = event;
    if (!event.current) {
      if (previous) current.reconciler.forget(keyOf(previous));
      return;
    }
    // noted before the caches synced too: a spec change then still gets its hold
    current.reconciler.noteSetChange(previous, event.current);
    const gated = isHealthGated(event.current) || (previous !== undefined && isHealthGated(previous));
    if (current.accepting && gated) current.queue.add(keyOf(event.current));
  };
  // a shared store lives longer than any run: one listener, routed to the run of the moment
  opts.statefulSets?.store.onEvent((event) => {
    if (run) onSetEvent(run, event);
  });

  const work = async (current: Run): Promise<void> => {
    for (;;) {
      const key = await current.queue.get();
      if (key === undefined) return;
      try {
        const result = await current.reconciler.reconcile(key);
        current.queue.forget(key);
        if (result.requeueAfterMs !== undefined) current.queue.addAfter(key, result.requeueAfterMs);
      } catch (err) {
        const delayMs = current.queue.addRateLimited(key);
        if (err instanceof RolloutConflictError) {
          log.debug({ statefulSet: key, delayMs, err: err.message }, 'conflict; requeued');
        } else {
          metrics.reconcileErrors.inc();
          log.warn({ statefulSet: key, delayMs, err }, `rollout reconcile of StatefulSet ${key} failed; retrying in ${delayMs} ms`);
        }
      } finally {
        current.queue.done(key);
      }
    }
  };

  const runWorkers = async (current: Run, ownSets: boolean): Promise<void> => {
    const informers = [current.sets.informer, current.pods.informer];
    for (const informer of informers) if (!(await informer.whenSynced(current.signal))) return;
    // whatever happened while no run watched: sets at rest are held, sets mid-rollout resume where they are
    const gated = current.sets.store.list().filter(isHealthGated);
    for (const set of gated) {
      current.reconciler.noteSetChange(undefined, set);
      current.queue.add(keyOf(set));
    }
    current.accepting = true;
    log.info({ statefulSets: gated.length, pods: current.pods.cache.size(), workers: workerCount, ownStatefulSetCache: ownSets }, 'caches synced; reconciling health-gated StatefulSets');
    const resync =
      resyncPeriodMs > 0
        ? setInterval(() => {
            for (const set of current.sets.store.list()) if (isHealthGated(set)) current.queue.add(keyOf(set));
          }, resyncPeriodMs)
        : undefined;
    try {
      await Promise.all(Array.from({ length: workerCount }, () => work(current)));
    } finally {
      clearInterval(resync);
    }
  };

  return {
    name: 'rollout-controller',

    async start(signal: AbortSignal): Promise<void> {
      if (run && !run.signal.aborted) throw new Error('the rollout controller is already running');
      // the previous run's caches must be gone before new ones watch (and before its listeners could fire)
      await run?.done;
      const ownSets = opts.statefulSets === undefined;
      const sets =
        opts.statefulSets ?? createStatefulSetCache({ api, namespaces: opts.namespaces, labelSelector: `${ENABLED_LABEL}=true`, logger: log });
      const pods = createPodInformer({ api, namespaces: opts.namespaces, logger: log });
      const queue = new WorkQueue({ debounceMs: 0, onDepthChange: (depth) => metrics.queueDepth.set({ queue: QUEUE_NAME }, depth) });
      const reconciler = new RolloutReconciler({
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
        enqueue: (key) => queue.add(key),
        events: opts.events,
        metrics,
        logger: log,
        minStepIntervalMs: opts.minStepIntervalMs,
        defaultMinReadySeconds: opts.defaultMinReadySeconds,
        blockedReportAfterMs: opts.blockedReportAfterMs ?? DEFAULT_BLOCKED_REPORT_AFTER_MS,
        blockedRecheckMs: opts.blockedRecheckMs ?? DEFAULT_BLOCKED_RECHECK_MS,
        signal,
      });
      const current: Run = { signal, queue, sets, pods, reconciler, accepting: false, done: Promise.resolve() };
      if (ownSets) sets.store.onEvent((event) => onSetEvent(current, event));
      pods.cache.onChange((setKey) => {
        metrics.cachedObjects.set({ kind: POD_KIND_LABEL }, pods.cache.size());
        if (!current.accepting || current.signal.aborted) return;
        const slash = setKey.indexOf('/');
        const set = sets.store.get(setKey.slice(0, slash), setKey.slice(slash + 1));
        if (set && isHealthGated(set)) queue.add(setKey);
      });
      signal.addEventListener('abort', () => queue.shutDown(), { once: true });

      const informers = ownSets ? [sets.informer, pods.informer] : [pods.informer];
      for (const informer of informers) await informer.start(signal);
      current.done = (async () => {
        try {
          await runWorkers(current, ownSets);
        } catch (err) {
          log.error({ err }, 'rollout workers failed');
        } finally {
          await reconciler.settled();
          await Promise.all(informers.map((informer) => informer.stopped()));
        }
      })();
      run = current;
    },

    async stopped(): Promise<void> {
      await run?.done;
    },

    status(): RolloutControllerStatus {
      const current = run && !run.signal.aborted ? run : undefined;
      const sets = current?.sets ?? opts.statefulSets;
      if (!sets) return { rollouts: [] };
      const rollouts: RolloutSummary[] = sets.store
        .list()
        .filter((set) => isHealthGated(set) && inProgress(set))
        .map((set) => {
          const key = keyOf(set);
          const state = current?.reconciler.state(key);
          const lastStep = state?.lastStepAt ?? annotatedLastStep(set);
          return {
            namespace: set.metadata?.namespace ?? '',
            name: set.metadata?.name ?? '',
            partition: set.spec?.updateStrategy?.rollingUpdate?.partition ?? 0,
            replicas: set.spec?.replicas ?? DEFAULT_REPLICAS,
            updateRevision: set.status?.updateRevision ?? '',
            ...(state?.blockedOn !== undefined ? { blockedOn: state.blockedOn } : {}),
            ...(lastStep !== undefined ? { lastStepAt: lastStep.toISOString() } : {}),
          };
        })
        .sort((a, b) => objectKey(a.namespace, a.name).localeCompare(objectKey(b.namespace, b.name)));
      return { rollouts };
    },
  };
}
