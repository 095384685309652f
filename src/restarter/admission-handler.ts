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
  /**
   * How long a review waits for the caches to bring a referenced object they do not know
   * (--reference-wait); omitted or 0: no wait.
   */
  referenceWaitMs?: number;
  /** The restarter dialect of a workload with these labels (--compat); omitted: rollguard's. */
  dialectOf?: (labels: Record<string, string> | undefined) => Dialect | undefined;
  /** The rollguard.io/timing record a CREATE gets (timing.ts); omitted: none. */
  timing?: string;
  /** rollguard's own ServiceAccount username, once known (kube/identity.ts); undefined: none known. */
  ownUser?: () => string | undefined;
  /** The workload kinds admitted (Rollout with --argo-rollouts); omitted: the apps/v1 three. */
  kinds?: readonly WorkloadKind[];
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
  handle(body: unknown): HandlerResult | Promise<HandlerResult>;
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
  const counted = (result: HandlerResult): HandlerResult => {
    if (result.status >= HTTP_BAD_REQUEST) metrics.admissionReviews.inc({ result: 'invalid' });
    return result;
  };
  const settle = (operation: AdmissionOperation | 'invalid', started: number): void => {
    metrics.admissionDuration.observe({ operation }, (performance.now() - started) / 1000);
    metrics.admissionInFlight.dec();
  };
  return {
    handle: (body) => {
      metrics.admissionInFlight.inc();
      // timed by hand: the histogram's startTimer copies the labels into a new object for each review
      const operation = operationLabel(body);
      const started = performance.now();
      let decided: HandlerResult | Promise<HandlerResult>;
      try {
        decided = decide(body);
      } catch (err) {
        settle(operation, started);
        throw err;
      }
      // the common answer stays synchronous; only a review that waits for its caches is a promise
      if (decided instanceof Promise) return decided.then(counted).finally(() => settle(operation, started));
      settle(operation, started);
      return counted(decided);
    },
    rejected: () => metrics.admissionReviews.inc({ result: 'invalid' }),
  };
}

/** How often a review that waits looks at the caches again. */
const REFERENCE_POLL_MS = 20;

interface Miss {
  kind: ObjectKind;
  namespace: string;
  name: string;
}

/** `lookup`, remembering each object it was asked for and did not know (once each: a template may name one many times). */
function recordingLookup(lookup: VersionLookup): { lookup: VersionLookup; misses: Map<string, Miss> } {
  const misses = new Map<string, Miss>();
  return {
    misses,
    lookup: (kind, namespace, name) => {
      const found = lookup(kind, namespace, name);
      if (found === undefined) misses.set(`${kind}/${namespace}/${name}`, { kind, namespace, name });
      return found;
    },
  };
}

function decision(opts: AdmissionHandlerOptions): (body: unknown) => HandlerResult | Promise<HandlerResult> {
  const waitMs = opts.referenceWaitMs ?? 0;
  return (body) => {
    const parsed = parseAdmissionReview(body);
    if (!parsed.ok) return { status: 400, body: { reason: parsed.reason } };
    const request = parsed.review.request;
    const namespace = request?.namespace ?? '';
    const kind = kindLabel(request?.kind.kind);
    if (opts.inScope && !opts.inScope(namespace)) {
      opts.metrics.admissionReviews.inc({ result: 'out_of_scope', kind });
      return { status: 200, body: admissionResponseFor(request?.uid ?? '', []) };
    }
    const synced = opts.cachesSynced();
    type Outcome = { response: ReturnType<typeof admit> } | { err: unknown };
    const compute = (lookup: VersionLookup): Outcome => {
      try {
        return { response: admit(parsed.review, { cachesSynced: synced, lookup, cacheProgress: opts.cacheProgress, mutators: opts.mutators, checks: opts.checks, dialectOf: opts.dialectOf, timing: opts.timing, ownUser: opts.ownUser?.(), kinds: opts.kinds }) };
      } catch (err) {
        return { err };
      }
    };
    const reply = (outcome: Outcome): HandlerResult => {
      if ('err' in outcome) {
        opts.logger?.error({ err: outcome.err, uid: request?.uid, kind: request?.kind.kind, namespace: request?.namespace, name: request?.name }, 'admission failed; allowed without a patch');
        opts.metrics.admissionReviews.inc({ result: 'error', kind });
        return { status: 200, body: admissionResponseFor(request?.uid ?? '', []) };
      }
      const { response } = outcome;
      const result = !synced ? 'not_synced' : response.response?.patch ? 'patched' : 'unchanged';
      opts.metrics.admissionReviews.inc({ result, kind });
      return { status: 200, body: response };
    };
    // An object created just before its workload (one `kubectl apply` of both, a chart) may still be
    // on its way to the caches: written `absent`, its arrival would roll the new set once for nothing.
    const recorded = synced && waitMs > 0 ? recordingLookup(opts.lookup) : undefined;
    const first = compute(recorded?.lookup ?? opts.lookup);
    if (!recorded || recorded.misses.size === 0 || 'err' in first) return reply(first);
    return waitForReferences(opts.lookup, [...recorded.misses.values()], waitMs).then((appeared) => {
      opts.metrics.admissionReferenceWaits.inc({ result: appeared ? 'appeared' : 'absent' });
      return reply(appeared ? compute(opts.lookup) : first);
    });
  };
}

/** Resolves true once the caches know every missed object, false when `waitMs` passed first. */
function waitForReferences(lookup: VersionLookup, misses: readonly Miss[], waitMs: number): Promise<boolean> {
  // monotonic: a step of the wall clock must not end the wait early (the write would go out `absent`)
  const deadline = performance.now() + waitMs;
  const known = (): boolean => misses.every((m) => lookup(m.kind, m.namespace, m.name) !== undefined);
  return new Promise((resolve) => {
    const poll = (): void => {
      if (known()) resolve(true);
      else if (performance.now() >= deadline) resolve(false);
      else setTimeout(poll, Math.min(REFERENCE_POLL_MS, Math.max(1, deadline - performance.now())));
    };
    setTimeout(poll, Math.min(REFERENCE_POLL_MS, waitMs));
  });
}
