import { composeMutators, runChecks, type Check, type Mutator } from '../admission/mutators.js';
import { admissionResponseFor, type AdmissionOperation, type AdmissionRequest, type AdmissionReview } from '../admission/review.js';
import { isJsonObject } from '../kube/json.js';
import { APPS_WORKLOAD_KINDS, WORKLOAD_RESOURCES, type WorkloadKind } from '../kube/workloads.js';
import type { Dialect, VersionLookup } from './annotations.js';
import { restarterMutator } from './mutator.js';
import type { ObjectKind } from './references.js';

export interface AdmissionDeps {
  /** Until the caches have synced every version would look absent: only what needs no cache is patched. */
  cachesSynced: boolean;
  lookup: VersionLookup;
  /** How far the cache of `kind` has seen in `namespace`: a candidate from a lagging cache never replaces a newer stored value. */
  cacheProgress?: (kind: ObjectKind, namespace: string) => string;
  /** The restarter dialect of a workload with these labels (--compat); omitted: rollguard's. */
  dialectOf?: (labels: Record<string, string> | undefined) => Dialect | undefined;
  /** The rollguard.io/timing record a CREATE gets (timing.ts); omitted: none. */
  timing?: string;
  /** rollguard's own ServiceAccount (kube/identity.ts): its UPDATEs are the loop's; omitted: told by the loop's restart time. */
  ownUser?: string;
  /** Mutators after the restarter's, each on the object as the one before it left it. */
  mutators?: Mutator[];
  /** Checks whose warnings go back with the answer; they need no cache, so they run before the sync too. */
  checks?: Check[];
  /** The workload kinds admitted (kube/workloads.ts enabledWorkloadKinds; Rollout with --argo-rollouts); omitted: the apps/v1 three. */
  kinds?: readonly WorkloadKind[];
}

/** The writes the webhook mutates: the pod-template workloads of the kinds turned on, created or updated (not a subresource). */
interface Route {
  group: string;
  version: string;
  kind: string;
  operations: readonly AdmissionOperation[];
}

function routesOf(kinds: readonly WorkloadKind[]): readonly Route[] {
  return kinds.map((kind) => ({ group: WORKLOAD_RESOURCES[kind].group, version: WORKLOAD_RESOURCES[kind].version, kind, operations: ['CREATE', 'UPDATE'] }));
}

const APPS_ROUTES = routesOf(APPS_WORKLOAD_KINDS);

function routed(request: AdmissionRequest, routes: readonly Route[]): boolean {
  const { group, version, kind } = request.kind;
  // a subresource write (status, scale) cannot change the template
  if (request.subResource) return false;
  return routes.some((r) => r.group === group && r.version === version && r.kind === kind && r.operations.includes(request.operation));
}

/**
 * Answers a review: always allowed, patched only for a routed write whose mutators call for it:
 * the restarter's annotations first, then `deps.mutators`; with the warnings of `deps.checks`.
 * No side effects, so a dry run is answered the same way.
 */
export function admit(review: AdmissionReview, deps: AdmissionDeps): AdmissionReview {
  const request = review.request;
  if (!request) throw new TypeError('admit: the AdmissionReview has no request; check it with parseAdmissionReview');
  const object = request.object;
  // an object without a metadata map is no Kubernetes object (only a hostile client sends one): nothing to patch
  const routes = deps.kinds ? routesOf(deps.kinds) : APPS_ROUTES;
  // a Rollout without --argo-rollouts (a webhook rule that names rollouts anyway) is answered "allowed, no patch"
  if (!routed(request, routes) || !isJsonObject(object) || !isJsonObject(object.metadata)) return admissionResponseFor(request.uid, []);
  const restarter = restarterMutator({ cachesSynced: deps.cachesSynced, lookup: deps.lookup, cacheProgress: deps.cacheProgress, dialectOf: deps.dialectOf, timing: deps.timing, ownUser: deps.ownUser });
  const ops = composeMutators(request, object, [restarter, ...(deps.cachesSynced ? (deps.mutators ?? []) : [])]);
  return admissionResponseFor(request.uid, ops, runChecks(request, object, deps.checks ?? []));
}
