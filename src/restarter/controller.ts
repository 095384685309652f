import type { Operation } from 'fast-json-patch';
import type { Logger } from 'pino';
import { appsV1, customObjects, type AppsV1, type CustomObjects } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { EventRecorder, EventSpec, EventSubject } from '../kube/events.js';
import type { CacheStatus, Informer } from '../kube/informer.js';
import {
  PARTIAL_METADATA_LIST_ACCEPT,
  createMetadataCache,
  decodeMetadata,
  unpackVersion,
  type MetadataCache,
  type MetadataEvent,
} from '../kube/metadata-cache.js';
import type { ObjectEvent } from '../kube/object-store.js';
import { RawApi } from '../kube/raw-api.js';
import type { StatefulSetCache } from '../kube/statefulsets.js';
import {
  APPS_WORKLOAD_KINDS,
  WORKLOAD_KINDS,
  WORKLOAD_RESOURCES,
  createWorkloadCache,
  decodeWorkload,
  describeWorkload,
  workloadKey,
  type Workload,
  type WorkloadCache,
  type WorkloadKind,
} from '../kube/workloads.js';
import { Controller } from '../kube/controller.js';
import { TokenBucket } from '../kube/token-bucket.js';
import type { Runnable } from '../manager.js';
import type { Metrics } from '../metrics.js';
import { ENABLED_LABEL, ROLLGUARD_DIALECT, type Dialect, type VersionLookup } from './annotations.js';
import type { StatefulSetOnlyFeature } from './kind-features.js';
import { DigestKeySource } from './digest-key.js';
import { DigestReader } from './digest-reader.js';
import { RestarterReconciler, type FreshRead } from './reconciler.js';
import type { ObjectKind } from './references.js';
import { ReverseIndex } from './reverse-index.js';
import { objectEventWakesReferrers, workloadEventEffect } from './wakes.js';

/**
 * A burst of changes to one object (a `helm upgrade` writing a ConfigMap and then its
 * workload, a flapping Secret) within this window folds into one rollout.
 */
export const DEFAULT_DEBOUNCE_MS = 5_000;
/** At most one restart per set in this window: a Secret that changes every second cannot roll its sets every 5 s. */
export const DEFAULT_MIN_RESTART_INTERVAL_MS = 60_000;
/** The most workers the restarter sizes itself to when the pace needs them (--max-workers). */
export const DEFAULT_MAX_WORKERS = 32;
/** Rollouts started per second across all sets; a change to a widely used Secret rolls its sets in a paced wave. */
export const DEFAULT_MAX_RESTARTS_PER_SECOND = 5;
/** Reconciles run at once; each is a cache read and at most one PATCH. */
export const DEFAULT_WORKERS = 4;
/**
 * Every set is looked at again this often, a guard against a missed event; a set that is up
 * to date costs no API call, so this is cheap.
 */
export const DEFAULT_RESYNC_PERIOD_MS = 10 * 60_000;

export interface RestarterControllerOptions {
  kubeConfig: KubeAccess;
  /** Namespaces to watch; undefined: all. */
  namespaces?: string[];
  /** 0 turns debouncing off. */
  debounceMs?: number;
  /** Infinity turns pacing off. */
  maxRestartsPerSecond?: number;
  /** The per-set restart floor; 0 turns it off. */
  minRestartIntervalMs?: number;
  /** Silence that marks a watch dead once the API server has shown it sends bookmarks. */
  watchIdleTimeoutMs?: number;
  workers?: number;
  /** The most workers kept to hold the pace (--max-workers); at or below `workers`: `workers`, fixed. */
  maxWorkers?: number;
  /** 0 turns the periodic resync off. */
  resyncPeriodMs?: number;
  logger: Logger;
  metrics: Metrics;
  /** Records the Event of every template change (main.ts builds the one recorder); told of each workload that is gone, when it can forget. */
  events: Pick<EventRecorder, 'record'> & Partial<Pick<EventRecorder, 'forget' | 'recordOnce'>>;
  /** rollguard's own namespace, where the digest key Secret lives; omitted: no data check (every version bump rolls). */
  ownNamespace?: string;
  /** The features a Deployment or DaemonSet is warned it asks for in vain (rollout/, handover/). */
  statefulSetOnly?: readonly StatefulSetOnlyFeature[];
  /**
   * The dialects besides rollguard's (--compat stackable: commons-operator's label, keys, values
   * and opt-outs, src/compat/stackable.ts); on a workload with both labels they win.
   */
  compatDialects?: readonly Dialect[];
  /** The rollguard.io/timing record the loop's writes carry (timing.ts); omitted: none. */
  timing?: string;
  /** The workload kinds watched and written (kube/workloads.ts enabledWorkloadKinds: Rollout with --argo-rollouts); omitted: the apps/v1 three. */
  kinds?: readonly WorkloadKind[];
}

export interface RestarterStatus {
  /** Workloads waiting to be reconciled (ready, debounced or backing off). */
  queued: number;
  inFlight: number;
  /** The caches of ConfigMaps, Secrets and each watched workload kind (Rollout only with --argo-rollouts). */
  cache: Partial<Record<'ConfigMap' | 'Secret' | WorkloadKind, CacheStatus>>;
  /** Entries of every per-object map the restarter keeps (/status `memory`, docs/troubleshooting.md). */
  memory: Record<string, number>;
}

export interface RestarterController {
  /** The caches and the reverse index; on every replica, since the webhook reads them. */
  caches: Runnable;
  /** The reconcile workers; only on the leader. Can be started again after it stopped. */
  workers: Controller;
  /** [caches, workers], for a manager that runs both. */
  runnables: Runnable[];
  cachesSynced(): boolean;
  /** Resolves true once every cache has synced, false if `signal` aborts first. */
  whenCachesSynced(signal: AbortSignal): Promise<boolean>;
  /** Versions from the in-memory caches; no API call. */
  lookup: VersionLookup;
  /** How far the cache of `kind` has seen in `namespace`. */
  cacheProgress(kind: ObjectKind, namespace: string): string;
  /** Whether the caches watch `namespace` at all. */
  covers(namespace: string): boolean;
  /** The labelled StatefulSets, shared with the rollout controller (one watch, not two). */
  statefulSets: StatefulSetCache;
  status(): RestarterStatus;
}

const PLURALS: Record<ObjectKind, string> = { ConfigMap: 'configmaps', Secret: 'secrets' };

/**
 * Helm keeps one Secret per release revision (`helm.sh/release.v1`, up to its history limit each):
 * often the most numerous Secrets of a cluster, and never meant for a pod. The caches and fresh
 * reads leave them out on the server's side, so a pod that references one is not tracked.
 */
const CACHE_FIELD_SELECTORS: Record<ObjectKind, string | undefined> = { ConfigMap: undefined, Secret: 'type!=helm.sh/release.v1' };

/**
 * One object's metadata and the store's current revision, in one quorum list narrowed to the
 * name (no resourceVersion: served from etcd, not from the API server's watch cache).
 */
async function readFresh(api: RawApi, kind: ObjectKind, namespace: string, name: string, ignore: readonly string[]): Promise<FreshRead> {
  const unwatched = CACHE_FIELD_SELECTORS[kind];
  const query = new URLSearchParams({ fieldSelector: `metadata.name=${name}${unwatched ? `,${unwatched}` : ''}`, limit: '1' });
  const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/${PLURALS[kind]}?${query}`;
  const list = (await api.getJson({ path, accept: PARTIAL_METADATA_LIST_ACCEPT })) as { metadata?: { resourceVersion?: unknown }; items?: unknown };
  const revision = typeof list.metadata?.resourceVersion === 'string' ? list.metadata.resourceVersion : '';
  const [item] = Array.isArray(list.items) ? list.items : [];
  if (item === undefined) return { version: undefined, revision };
  const version = unpackVersion(decodeMetadata(item, ignore).packed);
  return { version, revision };
}

type WorkloadCaches = { [K in WorkloadKind]?: WorkloadCache<K> };

/** What the restarter reads of each kind's store, whichever the kind. */
interface WorkloadStore {
  get(namespace: string, name: string): Workload | undefined;
  list(): Workload[];
  size(): number;
  onEvent(listener: (event: ObjectEvent<Workload>) => void): void;
}

function storeOf<K extends WorkloadKind>(cache: WorkloadCache<K>): WorkloadStore {
  const { store } = cache;
  return {
    get: (namespace, name) => store.get(namespace, name),
    list: () => store.list(),
    size: () => store.size(),
    onEvent: (listener) => store.onEvent(listener),
  };
}

/** Several stores of one kind read as one (the StatefulSets of two label-filtered watches); a workload in both is one. */
function unionOf(parts: WorkloadStore[]): WorkloadStore {
  if (parts.length === 1) return parts[0]!;
  return {
    get: (namespace, name) => {
      for (const part of parts) {
        const found = part.get(namespace, name);
        if (found) return found;
      }
      return undefined;
    },
    list: () => [...new Map(parts.flatMap((p) => p.list()).map((w) => [`${w.metadata?.namespace}/${w.metadata?.name}`, w])).values()],
    size: () => parts.reduce((n, p) => n + p.size(), 0),
    onEvent: (listener) => {
      for (const part of parts) part.onEvent(listener);
    },
  };
}

/** A store of no workloads: the kinds that are not watched (Rollout without --argo-rollouts). */
const NO_WORKLOADS: WorkloadStore = { get: () => undefined, list: () => [], size: () => 0, onEvent: () => undefined };

/** One JSON Patch of a workload's template or metadata, by kind. */
async function patchWorkload(apis: { apps: AppsV1; custom: CustomObjects }, kind: WorkloadKind, namespace: string, name: string, body: Operation[]): Promise<Workload> {
  switch (kind) {
    case 'StatefulSet':
      return apis.apps.patchNamespacedStatefulSet({ name, namespace, body });
    case 'Deployment':
      return apis.apps.patchNamespacedDeployment({ name, namespace, body });
    case 'DaemonSet':
      return apis.apps.patchNamespacedDaemonSet({ name, namespace, body });
    case 'Rollout': {
      const { group, version, plural } = WORKLOAD_RESOURCES.Rollout;
      const patched: unknown = await apis.custom.patchNamespacedCustomObject({ group, version, namespace, plural, name, body });
      return decodeWorkload('Rollout', patched);
    }
  }
}

/** Assembles the restarter's reconcile side: metadata caches, one cache per workload kind, one reverse index across them, controller. */
export function createRestarterController(opts: RestarterControllerOptions): RestarterController {
  const { logger, metrics } = opts;
  const log = logger.child({ component: 'restarter' });

  const api = new RawApi(opts.kubeConfig);
  const dialects = [...(opts.compatDialects ?? []), ROLLGUARD_DIALECT];
  const ignore = [...new Set(dialects.map((d) => d.ignoreLabel))];
  const metadata: Record<ObjectKind, MetadataCache> = {
    ConfigMap: createMetadataCache({ name: 'ConfigMap cache', api, plural: 'configmaps', namespaces: opts.namespaces, ignoreLabel: ignore, logger: log, watchIdleTimeoutMs: opts.watchIdleTimeoutMs }),
    Secret: createMetadataCache({ name: 'Secret cache', api, plural: 'secrets', namespaces: opts.namespaces, ignoreLabel: ignore, fieldSelector: CACHE_FIELD_SELECTORS.Secret, logger: log, watchIdleTimeoutMs: opts.watchIdleTimeoutMs }),
  };
  const workloadCache = <K extends WorkloadKind>(kind: K, label = ENABLED_LABEL): WorkloadCache<K> =>
    createWorkloadCache(kind, { api, namespaces: opts.namespaces, labelSelector: `${label}=true`, logger: log, watchIdleTimeoutMs: opts.watchIdleTimeoutMs });
  const kinds = opts.kinds ?? APPS_WORKLOAD_KINDS;
  const statefulSets = workloadCache('StatefulSet');
  const workloads: WorkloadCaches = {
    StatefulSet: statefulSets,
    Deployment: workloadCache('Deployment'),
    DaemonSet: workloadCache('DaemonSet'),
    // a Rollout cache only with --argo-rollouts: without the CRD its list would fail, and no Rollout is touched
    ...(kinds.includes('Rollout') ? { Rollout: workloadCache('Rollout') } : {}),
  };
  const watched = WORKLOAD_KINDS.filter((kind) => workloads[kind] !== undefined);
  // One label selector cannot OR two labels: another dialect's opt-in is a label-filtered watch of its own, per kind it speaks.
  const compatCaches = (opts.compatDialects ?? []).flatMap((d) => d.kinds.map((kind) => workloadCache(kind, d.enabledLabel)));
  const storesOf = <K extends WorkloadKind>(kind: K): WorkloadStore => {
    const own = workloads[kind];
    return own ? unionOf([storeOf(own), ...compatCaches.filter((c) => c.kind === kind).map((c) => storeOf(c))]) : NO_WORKLOADS;
  };
  const stores: Record<WorkloadKind, WorkloadStore> = { StatefulSet: storesOf('StatefulSet'), Deployment: storesOf('Deployment'), DaemonSet: storesOf('DaemonSet'), Rollout: storesOf('Rollout') };
  const workloadStore = (kind: WorkloadKind): WorkloadStore => stores[kind];
  metrics.watchCacheAge('ConfigMap', () => metadata.ConfigMap.informer.lastEventAgeSeconds());
  metrics.watchCacheAge('Secret', () => metadata.Secret.informer.lastEventAgeSeconds());
  for (const kind of watched) metrics.watchCacheAge(kind, () => workloads[kind]?.informer.lastEventAgeSeconds());
  const informers: Informer<unknown>[] = [
    metadata.ConfigMap.informer,
    metadata.Secret.informer,
    ...watched.flatMap((kind) => workloads[kind]?.informer ?? []),
    ...compatCaches.map((c) => c.informer),
  ];
  const index = new ReverseIndex();
  const apis = { apps: appsV1(opts.kubeConfig), custom: customObjects(opts.kubeConfig) };
  const maxRestartsPerSecond = opts.maxRestartsPerSecond ?? DEFAULT_MAX_RESTARTS_PER_SECOND;
  // A burst of one second's worth: a handful of sets roll at once, a thousand do not.
  const restartBurst = Number.isFinite(maxRestartsPerSecond) ? Math.max(1, Math.ceil(maxRestartsPerSecond)) : 1;
  const restartLimiter = new TokenBucket(maxRestartsPerSecond, restartBurst);

  const lookup: VersionLookup = (kind, namespace, name) => metadata[kind].store.get(namespace, name);
  const cachesSynced = (): boolean => informers.every((i) => i.synced());

  const digestKeys = opts.ownNamespace !== undefined ? new DigestKeySource(opts.kubeConfig, opts.ownNamespace) : undefined;
  // only a dialect that writes content digests (Stackable's) costs the extra digest of every read
  const contentDigest = dialects.find((d) => d.contentDigest)?.contentDigest;
  const digestReader = digestKeys ? new DigestReader(api, () => digestKeys.keys(), (kind) => metrics.dataReads.inc({ kind }), undefined, contentDigest?.of) : undefined;
  const forget = opts.events.forget?.bind(opts.events);
  const recordOnce = opts.events.recordOnce?.bind(opts.events);
  // An Event whose write was under way while its workload was deleted lands after the deletion
  // told the recorder to forget it: forgotten then, so its aggregation outlives it by nothing.
  const recordAndForgetGone = async (subject: EventSubject, spec: EventSpec): Promise<void> => {
    await opts.events.record(subject, spec);
    const kind = WORKLOAD_KINDS.find((k) => k === subject.kind);
    if (forget && kind && workloadStore(kind).get(subject.namespace, subject.name)?.metadata?.uid !== subject.uid) forget(subject.uid);
  };
  const reconciler = new RestarterReconciler({
    workload: (kind, namespace, name) => workloadStore(kind).get(namespace, name),
    dialects,
    statefulSetOnly: opts.statefulSetOnly,
    lookup,
    cachesSynced,
    cacheProgress: (kind, namespace) => metadata[kind].informer.resourceVersion(namespace),
    readFresh: (kind, namespace, name) => readFresh(api, kind, namespace, name, ignore),
    minRestartIntervalMs: opts.minRestartIntervalMs ?? DEFAULT_MIN_RESTART_INTERVAL_MS,
    patchWorkload: (kind, namespace, name, ops) => patchWorkload(apis, kind, namespace, name, ops),
    events: { record: recordAndForgetGone, ...(recordOnce ? { recordOnce } : {}) },
    restartLimiter,
    logger: log,
    metrics,
    timing: opts.timing,
    ...(digestKeys && digestReader
      ? {
          data: {
            read: (kind, namespace, name, seen) => digestReader.read(kind, namespace, name, seen),
            readAt: (kind, namespace, name, version) => digestReader.readAt(kind, namespace, name, version),
            currentKeyId: async () => (await digestKeys.keys()).currentId,
          },
        }
      : {}),
  });

  const controller = new Controller({
    name: 'restarter',
    workers: opts.workers ?? DEFAULT_WORKERS,
    pace: { ratePerSecond: maxRestartsPerSecond, maxWorkers: opts.maxWorkers ?? DEFAULT_MAX_WORKERS },
    debounceMs: opts.debounceMs ?? DEFAULT_DEBOUNCE_MS,
    resyncPeriodMs: opts.resyncPeriodMs ?? DEFAULT_RESYNC_PERIOD_MS,
    keys: () => [
      ...new Set(watched.flatMap((kind) => workloadStore(kind).list().map((w) => workloadKey(kind, w.metadata?.namespace ?? '', w.metadata?.name ?? '')))),
    ],
    syncs: informers,
    term: () => ({ reconciler }),
    describe: describeWorkload,
    objects: watched.includes('Rollout') ? 'labelled StatefulSet, Deployment, DaemonSet and Rollout' : 'labelled StatefulSet, Deployment and DaemonSet',
    logger: log,
    metrics,
  });

  // The index is kept on every replica, leader or not, so a new leader starts with it whole.
  for (const kind of watched) {
    const store = workloadStore(kind);
    store.onEvent((event: ObjectEvent<Workload>) => {
      metrics.cachedObjects.set({ kind }, store.size());
      const effect = workloadEventEffect(kind, event);
      // a set with both labels that lost one is still in the other watch
      const still = effect.index === 'remove' ? store.get(event.previous?.metadata?.namespace ?? '', event.previous?.metadata?.name ?? '') : undefined;
      if (effect.index === 'remove' && !still) index.removeSet(effect.key);
      if (event.type === 'deleted' && !still) reconciler.forgetWorkload(effect.key);
      if (event.type === 'deleted' && !still && event.previous?.metadata?.uid) opts.events.forget?.(event.previous.metadata.uid);
      else if (effect.index && effect.index !== 'remove') index.setReferences(effect.key, event.current?.metadata?.namespace ?? '', effect.index);
      // A workload created now is reconciled at once, not at the end of the debounce: its digest
      // baseline (what its pods read) is recorded before a change in its first seconds needs it to
      // be told apart, served in place or not. The caches' first list is the first pass's.
      const created = event.type === 'added' && cachesSynced();
      if (effect.wake || still) controller.enqueue({ key: effect.key, debounce: !created });
    });
  }
  for (const kind of ['ConfigMap', 'Secret'] as const) {
    const { store } = metadata[kind];
    store.onEvent((event) => {
      metrics.cachedObjects.set({ kind }, store.size());
      if (event.type === 'deleted') digestReader?.forget(kind, event.namespace, event.name);
    });
    controller.watches(store.onEvent.bind(store), (event: MetadataEvent) =>
      objectEventWakesReferrers(event) ? index.referrersOf(kind, event.namespace, event.name).map((key) => ({ key, debounce: true })) : [],
    );
  }

  const restarterMemory = (): Record<string, number> => {
    const queue = controller.queueMemory();
    const reconcile = reconciler.memory();
    const cached = (kind: WorkloadKind): number => (workloads[kind]?.store.size() ?? 0) + compatCaches.filter((c) => c.kind === kind).reduce((n, c) => n + c.store.size(), 0);
    return {
      'restarter.cache.configmaps': metadata.ConfigMap.store.size(),
      'restarter.cache.secrets': metadata.Secret.store.size(),
      'restarter.cache.statefulsets': cached('StatefulSet'),
      'restarter.cache.deployments': cached('Deployment'),
      'restarter.cache.daemonsets': cached('DaemonSet'),
      ...(workloads.Rollout ? { 'restarter.cache.rollouts': cached('Rollout') } : {}),
      'restarter.reverse_index.sets': index.size().sets,
      'restarter.reverse_index.objects': index.size().objects,
      'restarter.digest_reads': digestReader?.size() ?? 0,
      'restarter.queue.queued': queue.queued,
      'restarter.queue.delayed': queue.delayed,
      'restarter.queue.failures': queue.failures,
      'restarter.reconciler.lag_since': reconcile.lag_since,
      'restarter.reconciler.held_since': reconcile.held_since,
      'restarter.reconciler.in_doubt': reconcile.in_doubt,
      'restarter.reconciler.deferred': reconcile.deferred,
      'restarter.reconciler.told_unsupported': reconcile.told_unsupported,
      'restarter.reconciler.told_missing': reconcile.told_missing,
      'restarter.reconciler.told_due': reconcile.told_due,
      'restarter.reconciler.last_writes': reconcile.last_writes,
      'restarter.reconciler.told_invalid': reconcile.told_invalid,
    };
  };

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

  return {
    caches,
    workers: controller,
    runnables: [caches, controller],
    cachesSynced,
    whenCachesSynced,
    lookup,
    cacheProgress: (kind, namespace) => metadata[kind].informer.resourceVersion(namespace),
    covers: (namespace) => metadata.ConfigMap.informer.covers(namespace),
    statefulSets,
    status: () => ({
      ...controller.status(),
      cache: {
        ConfigMap: metadata.ConfigMap.informer.status(metadata.ConfigMap.store.size()),
        Secret: metadata.Secret.informer.status(metadata.Secret.store.size()),
        ...Object.fromEntries(watched.flatMap((kind) => {
          const cache = workloads[kind];
          return cache ? [[kind, cache.informer.status(cache.store.size())]] : [];
        })),
      },
      memory: restarterMemory(),
    }),
  };
}
