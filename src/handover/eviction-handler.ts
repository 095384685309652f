import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { coreV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { Operation } from 'fast-json-patch';
import type { Logger } from 'pino';
import { admissionResponseFor, parseAdmissionReview, type HandlerResult } from '../admission/review.js';
import { errorText, statusCode } from '../kube/api-status.js';
import type { EventRecorder, EventSpec } from '../kube/events.js';
import type { Metrics } from '../metrics.js';
import { decideEviction } from './eviction.js';
import { EVICTION_ALLOWED_ANNOTATION, HANDOVER_REQUEST_ANNOTATION, HANDOVER_REQUEST_VALUE, setPodAnnotation } from './state.js';

export const REASON_EVICTION_DEFERRED = 'EvictionDeferred';
const TOO_MANY_REQUESTS = 429;
const NOT_FOUND = 404;
/** Deferrals remembered, oldest forgotten first: a drain touches a few pods at a time. */
const DEFERRALS_REMEMBERED = 1000;

export interface EvictionHandlerOptions {
  /** One GET of the pod: evictions are rare, and the slim pod cache lives on the leader only. */
  readPod(namespace: string, name: string): Promise<V1Pod | undefined>;
  /** An opted-in StatefulSet from the shared cache. */
  statefulSet(namespace: string, name: string): V1StatefulSet | undefined;
  /** A JSON Patch of the pod's annotations (setPodAnnotation); gives the pod as that write left it. */
  annotatePod(namespace: string, name: string, ops: Operation[]): Promise<V1Pod>;
  /** Records an Event on the set (EvictionDeferred); failures are the recorder's to log. */
  recordOnSet?(set: V1StatefulSet, spec: EventSpec): Promise<void>;
  maxDeferMs: number;
  metrics: Pick<Metrics, 'evictionReviews'>;
  logger: Logger;
  now?: () => Date;
}

/**
 * `allowed`: not the primary of a guarded set; `deferred`: answered 429; `allowed_unguarded`: a
 * primary allowed with a warning (no other Ready pod, deferred too long, or on-failure proceed);
 * `error`: could not decide, allowed; `invalid`: not an AdmissionReview (400).
 */
type EvictionResult = 'allowed' | 'deferred' | 'allowed_unguarded' | 'error' | 'invalid';

function allowed(uid: string, warning?: string): HandlerResult {
  return { status: 200, body: admissionResponseFor(uid, [], warning ? [warning] : []) };
}

/** HTTP 429 in the review's status: `kubectl drain` retries it. */
function deferred(uid: string, message: string): HandlerResult {
  return { status: 200, body: { ...admissionResponseFor(uid, []), response: { uid, allowed: false, status: { code: TOO_MANY_REQUESTS, reason: 'TooManyRequests', message } } } };
}

/**
 * `/validate-eviction`: the eviction guard (CREATE pods/eviction). Anything it cannot read or
 * decide is allowed: failurePolicy Ignore and a PodDisruptionBudget stay the backstop, and a
 * drain must never hang on rollguard.
 */
export function createEvictionHandler(opts: EvictionHandlerOptions): (body: unknown) => Promise<HandlerResult> {
  const now = opts.now ?? (() => new Date());
  const firstDeferred = new Map<string, Date>();
  const counted = (result: EvictionResult, answer: HandlerResult): HandlerResult => {
    opts.metrics.evictionReviews.inc({ result });
    return answer;
  };
  return async (body) => {
    const parsed = parseAdmissionReview(body);
    if (!parsed.ok) return counted('invalid', { status: 400, body: { reason: parsed.reason } });
    const request = parsed.review.request!;
    const namespace = request.namespace ?? '';
    const name = request.name ?? '';
    if (request.resource?.resource !== 'pods' || request.subResource !== 'eviction' || request.operation !== 'CREATE' || !name) {
      return counted('allowed', allowed(request.uid));
    }
    try {
      const annotate = (current: V1Pod | undefined, key: string, value: string): Promise<V1Pod> =>
        setPodAnnotation((ops) => opts.annotatePod(namespace, name, ops), key, value, current?.metadata?.annotations !== undefined);
      let pod = await opts.readPod(namespace, name);
      const owner = pod?.metadata?.ownerReferences?.find((r) => r.controller === true && r.kind === 'StatefulSet');
      const set = owner ? opts.statefulSet(namespace, owner.name) : undefined;
      const uid = pod?.metadata?.uid ?? '';
      const decide = (p: V1Pod | undefined) =>
        decideEviction({ pod: p, set, dryRun: request.dryRun === true, now: now(), firstDeferredAt: firstDeferred.get(uid), maxDeferMs: opts.maxDeferMs });
      let verdict = decide(pod);
      if (verdict.allow && verdict.guarded && request.dryRun !== true) {
        // a handover the leader starts from now on passes this pod over; one that claimed the
        // pod before this write, or made it the primary, shows in what the write returned
        pod = await annotate(pod, EVICTION_ALLOWED_ANNOTATION, now().toISOString());
        verdict = decide(pod);
      }
      if (verdict.allow) {
        firstDeferred.delete(uid);
        if (verdict.warning) opts.logger.warn({ pod: `${namespace}/${name}` }, verdict.warning);
        return counted(verdict.warning ? 'allowed_unguarded' : 'allowed', allowed(request.uid, verdict.warning));
      }
      // a dry run defers nothing: it neither starts the clock of --eviction-defer-max nor is told
      if (verdict.about === 'primary' && !firstDeferred.has(uid) && request.dryRun !== true) {
        if (firstDeferred.size >= DEFERRALS_REMEMBERED) firstDeferred.delete(firstDeferred.keys().next().value ?? '');
        firstDeferred.set(uid, now());
        // once per pod and replica, not per retry of the drain
        if (set && opts.recordOnSet) {
          void opts.recordOnSet(set, { type: 'Normal', reason: REASON_EVICTION_DEFERRED, message: `Eviction of pod ${name} deferred (HTTP 429): it is the primary; handing the role over first`, action: 'DeferEviction' });
        }
      }
      if (verdict.mark) {
        await annotate(pod, HANDOVER_REQUEST_ANNOTATION, HANDOVER_REQUEST_VALUE);
        opts.logger.info({ pod: `${namespace}/${name}`, set: set?.metadata?.name }, 'eviction of a primary deferred: handover requested');
      }
      return counted('deferred', deferred(request.uid, verdict.message));
    } catch (err) {
      if (statusCode(err) === NOT_FOUND) return counted('allowed', allowed(request.uid));
      opts.logger.warn({ pod: `${namespace}/${name}`, err: errorText(err) }, 'eviction guard could not decide; allowed');
      return counted('error', allowed(request.uid, `rollguard could not check for a primary handover (${errorText(err)}); allowed`));
    }
  };
}

export interface EvictionGuardOptions {
  kubeConfig: KubeAccess;
  /** The opted-in StatefulSets, from the cache every replica keeps. */
  statefulSets: { get(namespace: string, name: string): V1StatefulSet | undefined };
  maxDeferMs: number;
  metrics: Pick<Metrics, 'evictionReviews'>;
  events: Pick<EventRecorder, 'record'>;
  logger: Logger;
}

/** The eviction guard on a cluster: one GET of the evicted pod, the set from the shared cache, Events on the set. */
export function evictionGuard(opts: EvictionGuardOptions): (body: unknown) => Promise<HandlerResult> {
  const core = coreV1(opts.kubeConfig);
  return createEvictionHandler({
    readPod: async (namespace, name) => {
      try {
        return await core.readNamespacedPod({ name, namespace });
      } catch (err) {
        if (statusCode(err) === NOT_FOUND) return undefined;
        throw err;
      }
    },
    statefulSet: (namespace, name) => opts.statefulSets.get(namespace, name),
    annotatePod: (namespace, name, ops) => core.patchNamespacedPod({ name, namespace, body: ops }),
    recordOnSet: (set, spec) =>
      opts.events.record(
        { apiVersion: 'apps/v1', kind: 'StatefulSet', namespace: set.metadata?.namespace ?? '', name: set.metadata?.name ?? '', uid: set.metadata?.uid ?? '' },
        spec,
      ),
    maxDeferMs: opts.maxDeferMs,
    metrics: opts.metrics,
    logger: opts.logger.child({ component: 'eviction-guard' }),
  });
}
