import { AppsV1Api, type KubeConfig, type V1StatefulSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { EventRecorder } from '../kube/events.js';
import { objectKey } from '../kube/informer.js';
import { createMetadataCache, type MetadataCache, type MetadataEvent } from '../kube/metadata-cache.js';
import type { ObjectEvent } from '../kube/object-store.js';
import { RawApi } from '../kube/raw-api.js';
import { createStatefulSetCache, type StatefulSetCache } from '../kube/statefulsets.js';
import { TokenBucket } from '../kube/token-bucket.js';
import { WorkQueue } from '../kube/workqueue.js';
import type { Runnable } from '../manager.js';
import type { Metrics } from '../metrics.js';
import { ENABLED_LABEL, IGNORE_LABEL, type VersionLookup } from './annotations.js';
import { ConflictError, Reconciler } from './reconciler.js';
import { referencedObjects, type ObjectKind } from './references.js';
import { ReverseIndex } from './reverse-index.js';

/**
 * A burst of changes to one object (a `helm upgrade` writing a ConfigMap and then its
 * workload, a flapping Secret) within this window folds into one rollout.
 */
export const DEFAULT_DEBOUNCE_MS = 5_000;
/** Rollouts started per second across all sets; a change to a widely used Secret rolls its sets in a paced wave. */
export const DEFAULT_MAX_RESTARTS_PER_SECOND = 5;
/** Reconciles run at once; each is a cache read and at most one PATCH. */
export const DEFAULT_WORKERS = 4;
/**
 * Every set is looked at again this often, a guard against a missed event; a set that is up
 * to date costs no API call, so this is cheap.
 */
export const DEFAULT_RESYNC_PERIOD_MS = 10 * 60_000;
/** Whoever patches is named in Events and logs with this. */
export const COMPONENT = 'rollguard';
const QUEUE_NAME = 'restarter';

export interface RestarterControllerOptions {
  kubeConfig: KubeConfig;
  /** Namespaces to watch; undefined: all. */
  namespaces?: string[];
  /** 0 turns debouncing off. */
  debounceMs?: number;
  /** Infinity turns pacing off. */
  maxRestartsPerSecond?: number;
  workers?: number;
  /** 0 turns the periodic resync off. */
  resyncPeriodMs?: number;
  logger: Logger;
  metrics: Metrics;
  /** This replica's name in Events; the host name by default. */
  instance?: string;
}

export interface CacheStatus {
  synced: boolean;
  objects: number;
}

export interface RestarterStatus {
  /** Sets waiting to be reconciled (ready, debounced or backing off). */
  queued: number;
  inFlight: number;
  cache: Record<'ConfigMap' | 'Secret' | 'StatefulSet', CacheStatus>;
}

export interface RestarterController {
  /** The caches and the reverse index; on every replica, since the webhook reads them. */
  caches: Runnable;
  /** The reconcile workers; only on the leader. Can be started again after it stopped. */
  workers: Runnable;
  /** [caches, workers], for a manager that runs both. */
  runnables: Runnable[];
  cachesSynced(): boolean;
  /** Resolves true once every cache has synced, false if `signal` aborts first. */
  whenCachesSynced(signal: AbortSignal): Promise<boolean>;
  /** Versions from the in-memory caches; no API call. */
  lookup: VersionLookup;
  /** The labelled StatefulSets, shared with the rollout controller (one watch, not two). */
  statefulSets: StatefulSetCache;
  status(): RestarterStatus;
}

/** One run of the workers, from start to the abort of its signal. */
interface WorkerRun {
  queue: WorkQueue;
  /** False until the caches synced and every set was queued once. */
  accepting: boolean;
  done: Promise<void>;
}

/** Assembles the restarter's reconcile side: metadata caches, StatefulSet cache, reverse index, work queue, reconciler. */
export function createRestarterController(opts: RestarterControllerOptions): RestarterController {
  const debounceMs = opts.debounceMs ?? DEFAULT_DEBOUNCE_MS;
  const workerCount = opts.workers ?? DEFAULT_WORKERS;
  const resyncPeriodMs = opts.resyncPeriodMs ?? DEFAULT_RESYNC_PERIOD_MS;
  const maxRestartsPerSecond = opts.maxRestartsPerSecond ?? DEFAULT_MAX_RESTARTS_PER_SECOND;
  if (!Number.isInteger(workerCount) || workerCount < 1) throw new Error(`workers must be a positive integer, got ${workerCount}`);
  if (!(debounceMs >= 0)) throw new Error(`debounceMs must be 0 or more, got ${debounceMs}`);
  if (!(resyncPeriodMs >= 0)) throw new Error(`resyncPeriodMs must be 0 or more, got ${resyncPeriodMs}`);
  const { logger, metrics } = opts;
  const log = logger.child({ component: 'restarter' });

  const api = new RawApi(opts.kubeConfig);
  const metadata: Record<ObjectKind, MetadataCache> = {
    ConfigMap: createMetadataCache({ name: 'ConfigMap cache', api, plural: 'configmaps', namespaces: opts.namespaces, ignoreLabel: IGNORE_LABEL, logger: log }),
    Secret: createMetadataCache({ name: 'Secret cache', api, plural: 'secrets', namespaces: opts.namespaces, ignoreLabel: IGNORE_LABEL, logger: log }),
  };
  const sets = createStatefulSetCache({ api, namespaces: opts.namespaces, labelSelector: `${ENABLED_LABEL}=true`, logger: log });
  const informers = [metadata.ConfigMap.informer, metadata.Secret.informer, sets.informer];
  const index = new ReverseIndex();
  const apps = opts.kubeConfig.makeApiClient(AppsV1Api);
  const events = new EventRecorder({ kubeConfig: opts.kubeConfig, component: COMPONENT, instance: opts.instance, logger: log });
  // A burst of one second's worth: a handful of sets roll at once, a thousand do not.
  const restartBurst = Number.isFinite(maxRestartsPerSecond) ? Math.max(1, Math.ceil(maxRestartsPerSecond)) : 1;
  const restartLimiter = new TokenBucket(maxRestartsPerSecond, restartBurst);

  const lookup: VersionLookup = (kind, namespace, name) => metadata[kind].store.get(namespace, name);
  const cachesSynced = (): boolean => informers.every((i) => i.synced());

  let run: WorkerRun | undefined;
  let inFlight = 0;
  const enqueue = (key: string): void => {
    if (run?.accepting) run.queue.addDebounced(key);
  };

  sets.store.onEvent((event: ObjectEvent<V1StatefulSet>) => {
    metrics.cachedObjects.set({ kind: 'StatefulSet' }, sets.store.size());
    const set = event.current ?? event.previous;
    const key = objectKey(set?.metadata?.namespace ?? '', set?.metadata?.name ?? '');
    if (!event.current) {
      index.removeSet(key);
      return;
    }
    const { previous, current } = event;
    // Status writes (every pod that turns Ready) change neither the template nor the opt-outs.
    const templateChanged = previous?.metadata?.generation !== current.metadata?.generation || !previous;
    const annotationsChanged = JSON.stringify(previous?.metadata?.annotations ?? {}) !== JSON.stringify(current.metadata?.annotations ?? {});
    if (templateChanged) index.setReferences(key, current.metadata?.namespace ?? '', referencedObjects(current.spec?.template));
    if (templateChanged || annotationsChanged) enqueue(key);
  });
  for (const kind of ['ConfigMap', 'Secret'] as const) {
    const { store } = metadata[kind];
    store.onEvent((event: MetadataEvent) => {
      metrics.cachedObjects.set({ kind }, store.size());
      // An ignored object stays untracked whatever its version; only a change of the label matters.
      if (event.previous?.ignored && event.current?.ignored) return;
      for (const key of index.referrersOf(kind, event.namespace, event.name)) enqueue(key);
    });
  }

  const reconciler = new Reconciler({
    statefulSet: (namespace, name) => sets.store.get(namespace, name),
    lookup,
    cachesSynced,
    cacheProgress: (kind, namespace) => metadata[kind].informer.resourceVersion(namespace),
    patchStatefulSet: (namespace, name, ops) => apps.patchNamespacedStatefulSet({ name, namespace, body: ops }),
    events,
    restartLimiter,
    logger: log,
    metrics,
  });

  const whenCachesSynced = async (signal: AbortSignal): Promise<boolean> => {
    for (const informer of informers) if (!(await informer.whenSynced(signal))) return false;
    return true;
  };

  let cachesStopped: Promise<void> = Promise.resolve();
  const caches: Runnable = {
    name: 'restarter-caches',
    async start(signal) {
      for (const informer of informers) await informer.start(signal);
      const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      cachesStopped = aborted.then(async () => {
        await Promise.all(informers.map((informer) => informer.stopped()));
      });
    },
    stopped: () => cachesStopped,
  };

  const work = async (queue: WorkQueue, signal: AbortSignal): Promise<void> => {
    for (;;) {
      const key = await queue.get();
      if (key === undefined) return;
      inFlight++;
      const endTimer = metrics.reconcileDuration.startTimer();
      try {
        const result = await reconciler.reconcile(key, signal);
        queue.forget(key);
        if (result.requeueAfterMs !== undefined) queue.addAfter(key, result.requeueAfterMs);
      } catch (err) {
        if (signal.aborted && err instanceof Error && err.name === 'AbortError') {
          // Stopped while waiting for a turn; the next run starts with every set queued.
        } else {
          metrics.reconcileErrors.inc();
          const delayMs = queue.addRateLimited(key);
          if (err instanceof ConflictError) log.debug({ statefulSet: key, delayMs, err: err.message }, 'conflict; requeued');
          else log.warn({ statefulSet: key, delayMs, err }, `reconcile of StatefulSet ${key} failed; retrying in ${delayMs} ms`);
        }
      } finally {
        endTimer();
        queue.done(key);
        inFlight--;
      }
    }
  };

  const runWorkers = async (current: WorkerRun, signal: AbortSignal): Promise<void> => {
    if (!(await whenCachesSynced(signal))) return;
    // Everything once: whatever changed while no worker ran (rollguard down, another leader) is caught here.
    for (const set of sets.store.list()) current.queue.add(objectKey(set.metadata?.namespace ?? '', set.metadata?.name ?? ''));
    current.accepting = true;
    log.info({ statefulSets: sets.store.size(), workers: workerCount }, 'caches synced; reconciling every StatefulSet');
    const resync =
      resyncPeriodMs > 0
        ? setInterval(() => {
            for (const set of sets.store.list()) current.queue.add(objectKey(set.metadata?.namespace ?? '', set.metadata?.name ?? ''));
          }, resyncPeriodMs)
        : undefined;
    try {
      await Promise.all(Array.from({ length: workerCount }, () => work(current.queue, signal)));
    } finally {
      clearInterval(resync);
    }
  };

  const workers: Runnable = {
    name: 'restarter-workers',
    async start(signal) {
      if (run && !run.queue.isShutDown()) throw new Error('restarter workers are already running');
      const queue = new WorkQueue({ debounceMs, onDepthChange: (depth) => metrics.queueDepth.set({ queue: QUEUE_NAME }, depth) });
      const current: WorkerRun = { queue, accepting: false, done: Promise.resolve() };
      signal.addEventListener('abort', () => queue.shutDown(), { once: true });
      current.done = runWorkers(current, signal).catch((err: unknown) => log.error({ err }, 'restarter workers failed'));
      run = current;
    },
    async stopped() {
      await run?.done;
    },
  };

  return {
    caches,
    workers,
    runnables: [caches, workers],
    cachesSynced,
    whenCachesSynced,
    lookup,
    statefulSets: sets,
    status: () => ({
      queued: run && !run.queue.isShutDown() ? run.queue.depth() : 0,
      inFlight,
      cache: {
        ConfigMap: { synced: metadata.ConfigMap.informer.synced(), objects: metadata.ConfigMap.store.size() },
        Secret: { synced: metadata.Secret.informer.synced(), objects: metadata.Secret.store.size() },
        StatefulSet: { synced: sets.informer.synced(), objects: sets.store.size() },
      },
    }),
  };
}
