import jsonpatch from 'fast-json-patch';
import type { Operation } from 'fast-json-patch';
import type { V1ObjectMeta, V1PodTemplateSpec } from '@kubernetes/client-node';
import {
  annotationChanges,
  desiredAnnotations,
  withDesiredAnnotations,
  type VersionLookup,
} from './annotations.js';
import {
  ADMISSION_API_VERSION,
  ADMISSION_REVIEW_KIND,
  type AdmissionRequest,
  type AdmissionReview,
} from './admission-review.js';

/**
 * Extra patch operations for an admitted StatefulSet, appended after the
 * annotation operations. `object` is the set as submitted; do not change it.
 */
export type TemplateMutator = (req: AdmissionRequest, object: Record<string, unknown>) => Operation[];

export interface AdmissionDeps {
  /** Until the caches have synced every version would look absent, so nothing is patched. */
  cachesSynced: boolean;
  lookup: VersionLookup;
  mutators?: TemplateMutator[];
}

interface StatefulSetShape {
  metadata?: V1ObjectMeta;
  spec?: { template?: V1PodTemplateSpec | null } | null;
}

const ANNOTATIONS_PATH = '/spec/template/metadata/annotations';

/** An allowing review response for `uid`, carrying `ops` as a JSON Patch when there are any. */
export function admissionResponseFor(uid: string, ops: Operation[]): AdmissionReview {
  const response: NonNullable<AdmissionReview['response']> = { uid, allowed: true };
  if (ops.length > 0) {
    response.patchType = 'JSONPatch';
    response.patch = Buffer.from(JSON.stringify(ops)).toString('base64');
  }
  return { apiVersion: ADMISSION_API_VERSION, kind: ADMISSION_REVIEW_KIND, response };
}

function isStatefulSetWrite(request: AdmissionRequest): boolean {
  const { group, version, kind } = request.kind;
  return (
    group === 'apps' &&
    version === 'v1' &&
    kind === 'StatefulSet' &&
    (request.operation === 'CREATE' || request.operation === 'UPDATE') &&
    // A subresource write (status, scale) cannot change the template.
    !request.subResource
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The operations that bring the template's rollguard annotations to what they should be. */
export function templateAnnotationOps(
  request: AdmissionRequest,
  object: Record<string, unknown>,
  lookup: VersionLookup,
): Operation[] {
  const set = object as StatefulSetShape;
  const template = set.spec?.template ?? undefined;
  // On CREATE the object's own namespace is often still empty; the request's is authoritative.
  const namespace = request.namespace || set.metadata?.namespace || '';
  const desired = desiredAnnotations(
    { metadata: { namespace, annotations: set.metadata?.annotations }, spec: { template } },
    lookup,
  );
  const current = template?.metadata?.annotations ?? undefined;
  const changes = annotationChanges(current, desired);
  if (changes.length === 0) return [];

  // Removals need existing annotations, so a missing map only ever means "add these".
  if (!template?.metadata) {
    return [{ op: 'add', path: '/spec/template/metadata', value: { annotations: withDesiredAnnotations(undefined, desired) } }];
  }
  if (!current) {
    return [{ op: 'add', path: ANNOTATIONS_PATH, value: withDesiredAnnotations(undefined, desired) }];
  }
  return changes.map(({ key, from, to }): Operation => {
    const path = `${ANNOTATIONS_PATH}/${jsonpatch.escapePathComponent(key)}`;
    if (to === undefined) return { op: 'remove', path };
    return from === undefined ? { op: 'add', path, value: to } : { op: 'replace', path, value: to };
  });
}

/**
 * Answers a review: always allowed, patched only for a CREATE or UPDATE of an
 * apps/v1 StatefulSet whose template annotations (or a mutator) call for it.
 * No side effects, so a dry run is answered the same way.
 */
export function admit(review: AdmissionReview, deps: AdmissionDeps): AdmissionReview {
  const request = review.request;
  if (!request) throw new TypeError('admit: the AdmissionReview has no request; check it with parseAdmissionReview');
  const object = request.object;
  if (!deps.cachesSynced || !isStatefulSetWrite(request) || !isRecord(object)) {
    return admissionResponseFor(request.uid, []);
  }
  const ops = templateAnnotationOps(request, object, deps.lookup);
  for (const mutate of deps.mutators ?? []) ops.push(...mutate(request, object));
  return admissionResponseFor(request.uid, ops);
}
