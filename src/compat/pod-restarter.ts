import { coreV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { Logger } from 'pino';
import { errorText, statusCode } from '../kube/api-status.js';
import { Controller, type ReconcileResult, type Reconciler } from '../kube/controller.js';
import type { EventRecorder, EventSpec, EventSubject } from '../kube/events.js';
import { objectKey, splitObjectKey } from '../kube/informer.js';
import { RawApi } from '../kube/raw-api.js';
import type { Metrics } from '../metrics.js';
import type { Runnable } from '../manager.js';
import { evictionRetryMs, expiryDecision } from './expiry.js';
import { createExpiringPodInformer, type ExpiringPod } from './expiring-pods.js';

export const REASON_EXPIRED = 'Expired';
export const REASON_EVICTION_BLOCKED = 'EvictionBlocked';
export const REASON_INVALID_EXPIRY = 'InvalidExpiry';
const EVICT_ACTION = 'Evict';

export interface PodRestarterDeps {
  pod(namespace: string, name: string): ExpiringPod | undefined;
  /** The Eviction API; a refusal by a PodDisruptionBudget is an error with status 429. */
  evict(namespace: string, name: string, uid: string): Promise<void>;
  /** Told of each pod gone that had an Event, when it can forget its aggregation. */
  events: Pick<EventRecorder, 'record'> & Partial<Pick<EventRecorder, 'forget'>>;
  logger: Logger;
  now?: () => number;
}

function subject(pod: ExpiringPod): EventSubject {
  return { apiVersion: 'v1', kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid };
}

/**
 * Evicts a pod at the earliest of its expires-at times, not before. A 429 (a PodDisruptionBudget
 * allows no disruption now) is no error: retried with a doubling wait, told once per pod.
 */
export class PodRestarter implements Reconciler {
  /** Refused evictions in a row, by pod key (namespace/name), of the pod with that uid. */
  private readonly refusals = new Map<string, { uid: string; count: number }>();
  /** The pod version (uid + resourceVersion) whose unreadable expiry has had its Warning, by pod key. */
  private readonly warned = new Map<string, string>();
  /** The uid of each pod with an Event of ours, by pod key: its aggregation is forgotten once the pod is gone. */
  private readonly told = new Map<string, string>();
  private readonly now: () => number;

  constructor(private readonly deps: PodRestarterDeps) {
    this.now = deps.now ?? Date.now;
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const { namespace, name } = splitObjectKey(key);
    const pod = this.deps.pod(namespace, name);
    if (!pod) {
      // gone (or no longer expiring): nothing about it is kept
      this.refusals.delete(key);
      this.warned.delete(key);
      const uid = this.told.get(key);
      if (uid !== undefined) this.deps.events.forget?.(uid);
      this.told.delete(key);
      return {};
    }
    await this.warnInvalid(key, pod);
    const decision = expiryDecision(pod.expiry, this.now(), pod.terminating);
    if (decision.kind === 'none') {
      this.refusals.delete(key);
      return {};
    }
    if (decision.kind === 'wait') return { requeueAfterMs: decision.ms };
    const at = new Date(decision.at).toISOString();
    try {
      await this.deps.evict(namespace, name, pod.uid);
    } catch (err) {
      const code = statusCode(err);
      if (code === 404 || code === 409) return {}; // gone, or another pod of that name now: its own watch event looks at it
      if (code !== 429) throw new Error(`evicting Pod ${key} (expired at ${at} by ${decision.key}): ${errorText(err)}`, { cause: err });
      const before = this.refusals.get(key);
      const attempt = (before?.uid === pod.uid ? before.count : 0) + 1;
      this.refusals.set(key, { uid: pod.uid, count: attempt });
      const retryMs = evictionRetryMs(attempt);
      if (attempt === 1) {
        const message = `Pod expired at ${at} (${decision.key}); the Eviction API refused it (${errorText(err)}): retrying with backoff`;
        this.deps.logger.info({ pod: key, expiredAt: at, retryMs }, `Pod ${key}: ${message}`);
        await this.record(key, pod, { type: 'Normal', reason: REASON_EVICTION_BLOCKED, message, action: EVICT_ACTION });
      } else {
        this.deps.logger.debug({ pod: key, attempt, retryMs }, `Pod ${key}: eviction refused again (429)`);
      }
      return { requeueAfterMs: retryMs };
    }
    this.refusals.delete(key);
    const message = `Evicted: expired at ${at} (${decision.key})`;
    this.deps.logger.info({ pod: key, expiredAt: at }, `Pod ${key}: ${message}`);
    await this.record(key, pod, { type: 'Normal', reason: REASON_EXPIRED, message, action: EVICT_ACTION });
    return {};
  }

  /** How many pods each per-pod map holds; for /status (`memory`). */
  memory(): { refusals: number; warned: number; told: number } {
    return { refusals: this.refusals.size, warned: this.warned.size, told: this.told.size };
  }

  private async record(key: string, pod: ExpiringPod, spec: EventSpec): Promise<void> {
    this.told.set(key, pod.uid);
    await this.deps.events.record(subject(pod), spec);
  }

  private async warnInvalid(key: string, pod: ExpiringPod): Promise<void> {
    const id = `${pod.uid}/${pod.resourceVersion}`;
    if (pod.expiry.invalid.length === 0) {
      this.warned.delete(key);
      return;
    }
    if (this.warned.get(key) === id) return;
    this.warned.set(key, id);
    const what = pod.expiry.invalid.map(({ key, value }) => `${key}=${JSON.stringify(value)}`).join(', ');
    const message = `not an RFC 3339 time, ignored: ${what}`;
    this.deps.logger.warn({ pod: objectKey(pod.namespace, pod.name) }, `Pod ${pod.namespace}/${pod.name}: ${message}`);
    await this.record(key, pod, { type: 'Warning', reason: REASON_INVALID_EXPIRY, message, action: EVICT_ACTION });
  }
}

export interface PodRestarterOptions {
  kubeConfig: KubeAccess;
  namespaces?: string[];
  events: Pick<EventRecorder, 'record'> & Partial<Pick<EventRecorder, 'forget'>>;
  logger: Logger;
  metrics: Metrics;
  watchIdleTimeoutMs?: number;
}

/** The leader-only Pod restarter of --compat stackable: its pod cache lives as long as a term. */
export function createPodRestarter(opts: PodRestarterOptions): Runnable & { controller: Controller; memory(): Record<string, number> } {
  const log = opts.logger.child({ component: 'pod-restarter' });
  const api = new RawApi(opts.kubeConfig);
  const core = coreV1(opts.kubeConfig);
  let keys: () => string[] = () => [];
  let termMemory = (): Record<string, number> => ({ 'compat.expiring_pods': 0, 'compat.pod_restarter.refusals': 0, 'compat.pod_restarter.warned': 0, 'compat.pod_restarter.told': 0 });
  const controller = new Controller({
    name: 'pod-restarter',
    workers: 2,
    debounceMs: 0,
    resyncPeriodMs: 10 * 60_000,
    keys: () => keys(),
    syncs: [],
    describe: (key) => `Pod ${key}`,
    objects: 'Pod with an expires-at annotation',
    logger: log,
    metrics: opts.metrics,
    term: (term) => {
      const pods = createExpiringPodInformer({ api, namespaces: opts.namespaces, logger: log, watchIdleTimeoutMs: opts.watchIdleTimeoutMs });
      keys = () => pods.store.keys();
      pods.store.onChange((namespace, name) => {
        opts.metrics.cachedObjects.set({ kind: 'ExpiringPod' }, pods.store.size());
        term.enqueue({ key: objectKey(namespace, name) });
      });
      const reconciler = new PodRestarter({
        pod: (namespace, name) => pods.store.get(namespace, name),
        evict: async (namespace, name, uid) => {
          await core.createNamespacedPodEviction({
            name,
            namespace,
            body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name, namespace }, deleteOptions: { preconditions: { uid } } },
          });
        },
        events: opts.events,
        logger: log,
      });
      termMemory = () => {
        const { refusals, warned, told } = reconciler.memory();
        return { 'compat.expiring_pods': pods.store.size(), 'compat.pod_restarter.refusals': refusals, 'compat.pod_restarter.warned': warned, 'compat.pod_restarter.told': told };
      };
      return { reconciler, runnables: [pods.informer], syncs: [pods.informer] };
    },
  });
  return {
    name: 'pod-restarter',
    start: (signal) => controller.start(signal),
    stopped: () => controller.stopped(),
    controller,
    memory: () => ({ ...termMemory(), 'compat.queue.failures': controller.queueMemory().failures }),
  };
}
