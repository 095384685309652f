import { annotationChanges, desiredAnnotations, type VersionLookup } from '../restarter/annotations.js';
import { templateAnnotationOps } from '../restarter/patch.js';
import type { Mutator } from './mutators.js';
import { restarterView } from './workload-view.js';

/** Brings the pod template's rollguard annotations to the versions `lookup` knows (in memory, no API call). */
export function restarterMutator(lookup: VersionLookup): Mutator {
  return (request, object) => {
    const workload = restarterView(object);
    const template = workload.spec?.template ?? undefined;
    // On CREATE the object's own namespace is often still empty; the request's is authoritative.
    const namespace = request.namespace || workload.metadata?.namespace || '';
    const desired = desiredAnnotations({ metadata: { namespace, annotations: workload.metadata?.annotations }, spec: { template } }, lookup);
    const changes = annotationChanges(template?.metadata?.annotations ?? undefined, desired);
    return templateAnnotationOps(template?.metadata, desired, changes);
  };
}
