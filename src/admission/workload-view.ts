import type { V1ObjectMeta, V1PodSpec, V1PodTemplateSpec, V1StatefulSet, V1StatefulSetSpec, V1StatefulSetStatus } from '@kubernetes/client-node';
import { jsonObjectOrUndefined, stringEntries } from '../kube/json.js';

/**
 * An admitted object is wire JSON that nothing has validated yet (a review can come from any
 * client that reaches the port). The mutators read it through these views, in which every field
 * they read has its type or is absent, so a wrong type never throws and never yields a patch
 * that does not apply: an absent map is added whole, which replaces the wrong-typed value.
 */

const integerOrUndefined = (value: unknown): number | undefined => (Number.isSafeInteger(value) ? (value as number) : undefined);
const stringOrUndefined = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

/** What the restarter mutator reads: namespace, resourceVersion, the set's annotations, the pod template. */
export interface RestarterView {
  metadata: Pick<V1ObjectMeta, 'namespace' | 'resourceVersion' | 'annotations' | 'labels'>;
  spec: { template?: V1PodTemplateSpec };
}

export function restarterView(object: unknown): RestarterView {
  const metadata = jsonObjectOrUndefined(jsonObjectOrUndefined(object)?.metadata);
  const template = jsonObjectOrUndefined(jsonObjectOrUndefined(jsonObjectOrUndefined(object)?.spec)?.template);
  const templateMetadata = jsonObjectOrUndefined(template?.metadata);
  return {
    metadata: {
      namespace: stringOrUndefined(metadata?.namespace),
      resourceVersion: stringOrUndefined(metadata?.resourceVersion),
      annotations: stringEntries(metadata?.annotations),
      labels: stringEntries(metadata?.labels),
    },
    spec: {
      template: template && {
        ...template,
        // the rest of the template as it is: the UPDATE rule compares old and new templates whole
        metadata: templateMetadata && { ...templateMetadata, annotations: stringEntries(templateMetadata.annotations) },
        // references.ts reads the pod spec field by field and treats a wrong type as absent
        spec: template.spec as V1PodSpec | undefined,
      },
    },
  };
}


/**
 * What the partition hold reads: labels, annotations, replicas, the update strategy, the
 * revisions; the rest of the spec as it is, since the hold compares old and new specs whole.
 */
export function holdView(object: unknown): V1StatefulSet {
  const set = jsonObjectOrUndefined(object);
  const metadata = jsonObjectOrUndefined(set?.metadata);
  const spec = jsonObjectOrUndefined(set?.spec);
  const strategy = jsonObjectOrUndefined(spec?.updateStrategy);
  const rollingUpdate = jsonObjectOrUndefined(strategy?.rollingUpdate);
  const status = jsonObjectOrUndefined(set?.status);
  return {
    metadata: { labels: stringEntries(metadata?.labels), annotations: stringEntries(metadata?.annotations) },
    spec: spec && {
      ...(spec as unknown as V1StatefulSetSpec),
      replicas: integerOrUndefined(spec.replicas),
      updateStrategy: strategy && {
        ...strategy,
        type: stringOrUndefined(strategy.type),
        rollingUpdate: rollingUpdate && { ...rollingUpdate, partition: integerOrUndefined(rollingUpdate.partition) },
      },
    },
    // the hold reads no other status field
    status: status && ({ currentRevision: stringOrUndefined(status.currentRevision), updateRevision: stringOrUndefined(status.updateRevision) } as V1StatefulSetStatus),
  };
}
