import type { Logger } from 'pino';
import type { Check, Mutator } from '../admission/mutators.js';
import { admissionResponseFor, isAdmissionOperation, parseAdmissionReview, type AdmissionOperation, type HandlerResult } from '../admission/review.js';
import { isJsonObject } from '../kube/json.js';
import { isWorkloadKind, type WorkloadKind } from '../kube/workloads.js';
import type { Metrics } from '../metrics.js';
import { admit } from './admit.js';
import type { Dialect, VersionLookup } from './annotations.js';
import type { ObjectKind } from './references.js';

const HTTP_BAD_REQUEST = 400;

export interface AdmissionHandlerOptions {
  cachesSynced: () => boolean;
  lookup: VersionLookup;
  /** How far the cache of `kind` has seen in `namespace`. */
  cacheProgress?: (kind: ObjectKind, namespace: string) => string;
  /**
   * Whether the caches watch `namespace` (--watch-namespaces). Outside it every object would look
   * absent and a hold would never be stepped, so the answer there is "allowed, no patch".
   */
  inScope?: (namespace: string) => boolean;
  mutators?: Mutator[];
  /** Checks whose warnings the client shows; never a denial. */
  checks?: Check[];
  /** The restarter dialect of a workload with these labels (--compat); omitted: rollguard's. */
  dialectOf?: (labels: Record<string, string> | undefined) => Dialect | undefined;
  /** The rollguard.io/timing record a CREATE gets (timing.ts); omitted: none. */
  timing?: string;
  /** rollguard's own ServiceAccount username, once known (kube/identity.ts); undefined: none known. */
  ownUser?: () => string | undefined;
  metrics: Metrics;
  logger?: Logger;
}

/** The `kind` label of a review: a workload kind, or `other` (the body's kind is anyone's text; labels come from closed sets). */
function kindLabel(kind: string | undefined): WorkloadKind | 'other' {
  return isWorkloadKind(kind) ? kind : 'other';
}

/**
 * The `operation` label of a review: one of the four operations, or "invalid". Nothing but the
 * envelope is checked yet, and a label taken from the body as it is would make one series per
 * string a client sends.
 */
export function operationLabel(body: unknown): AdmissionOperation | 'invalid' {
  const operation = isJsonObject(body) && isJsonObject(body.request) ? body.request.operation : undefined;
  return isAdmissionOperation(operation) ? operation : 'invalid';
}

/** `/mutate` as a route of the webhook server: its answer, timed and counted, and the count of what the server refused. */
export interface AdmissionRoute {
  handle(body: unknown): HandlerResult;
  rejected(): void;
}

/**
 * `/mutate`'s decision: a 400 with the reason for a review it cannot answer, else always allowed.
 * A mutator that fails is a bug of ours: the write goes through unpatched (the loop catches up),
 * it never fails with a 500.
 */
export function createAdmissionHandler(opts: AdmissionHandlerOptions): AdmissionRoute {
  const { metrics } = opts;
  const decide = decision(opts);
  return {
    handle: (body) => {
      metrics.admissionInFlight.inc();
      // timed by hand: the histogram's startTimer copies the labels into a new object for each review
      const operation = operationLabel(body);
      const started = performance.now();
      try {
        const result = decide(body);
        if (result.status >= HTTP_BAD_REQUEST) metrics.admissionReviews.inc({ result: 'invalid' });
        return result;
      } finally {
        metrics.admissionDuration.observe({ operation }, (performance.now() - started) / 1000);
        metrics.admissionInFlight.dec();
      }
    },
    rejected: () => metrics.admissionReviews.inc({ result: 'invalid' }),
  };
}

function decision(opts: AdmissionHandlerOptions): (body: unknown) => HandlerResult {
  return (body) => {
    const parsed = parseAdmissionReview(body);
    if (!parsed.ok) return { status: 400, body: { reason: parsed.reason } };
    const namespace = parsed.review.request?.namespace ?? '';
    const kind = kindLabel(parsed.review.request?.kind.kind);
    if (opts.inScope && !opts.inScope(namespace)) {
      opts.metrics.admissionReviews.inc({ result: 'out_of_scope', kind });
      return { status: 200, body: admissionResponseFor(parsed.review.request?.uid ?? '', []) };
    }
    const synced = opts.cachesSynced();
    let response;
    try {
      response = admit(parsed.review, { cachesSynced: synced, lookup: opts.lookup, cacheProgress: opts.cacheProgress, mutators: opts.mutators, checks: opts.checks, dialectOf: opts.dialectOf, timing: opts.timing, ownUser: opts.ownUser?.() });
    } catch (err) {
      const request = parsed.review.request;
      opts.logger?.error({ err, uid: request?.uid, kind: request?.kind.kind, namespace: request?.namespace, name: request?.name }, 'admission failed; allowed without a patch');
      opts.metrics.admissionReviews.inc({ result: 'error', kind });
      return { status: 200, body: admissionResponseFor(request?.uid ?? '', []) };
    }
    const result = !synced ? 'not_synced' : response.response?.patch ? 'patched' : 'unchanged';
    opts.metrics.admissionReviews.inc({ result, kind });
    return { status: 200, body: response };
  };
}
