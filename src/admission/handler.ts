import type { Logger } from 'pino';
import type { AdmissionHandler } from '../server/webhook-server.js';
import type { Metrics } from '../metrics.js';
import type { Dialect, VersionLookup } from '../restarter/annotations.js';
import type { ObjectKind } from '../restarter/references.js';
import { isWorkloadKind, type WorkloadKind } from '../kube/workloads.js';
import { admit } from './admit.js';
import type { Check, Mutator } from './mutators.js';
import { admissionResponseFor, parseAdmissionReview } from './review.js';

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
  metrics: Metrics;
  logger?: Logger;
}

/** The `kind` label of a review: a workload kind, or `other` (the body's kind is anyone's text; labels come from closed sets). */
function kindLabel(kind: string | undefined): WorkloadKind | 'other' {
  return isWorkloadKind(kind) ? kind : 'other';
}

/**
 * `/mutate`'s decision: a 400 with the reason for a review it cannot answer, else always allowed.
 * A mutator that fails is a bug of ours: the write goes through unpatched (the loop catches up),
 * it never fails with a 500.
 */
export function createAdmissionHandler(opts: AdmissionHandlerOptions): AdmissionHandler {
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
      response = admit(parsed.review, { cachesSynced: synced, lookup: opts.lookup, cacheProgress: opts.cacheProgress, mutators: opts.mutators, checks: opts.checks, dialectOf: opts.dialectOf });
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
