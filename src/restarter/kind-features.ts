import type { ArgoWorkloadRef, Workload, WorkloadKind } from '../kube/workloads.js';
import { ENABLED_LABEL } from './annotations.js';

/** Event reason: a workload asks for a feature its kind does not have. */
export const REASON_UNSUPPORTED_FOR_KIND = 'UnsupportedForKind';
/** Warning Event reason: an opted-in Rollout has no template of its own (spec.workloadRef); the referenced workload is where to opt in. */
export const REASON_TEMPLATE_IN_WORKLOAD_REF = 'TemplateInWorkloadRef';

/**
 * A feature that works on a StatefulSet's partition and ordinals, which a Deployment or DaemonSet
 * has not (its maxUnavailable, maxSurge and minReadySeconds do the pacing natively). Each such
 * feature says which annotations ask for it (rollout/, handover/); main.ts hands them in.
 */
export interface StatefulSetOnlyFeature {
  feature: string;
  /** whether a workload annotation asks for it */
  asks(key: string): boolean;
}

/**
 * Whether a change of the workload's own annotations makes a new generation: a Deployment's do
 * (the API server bumps it, since they are copied to its ReplicaSets); a StatefulSet's, a
 * DaemonSet's and a Rollout's do not (a custom resource with a status subresource: only a spec
 * change does). rollguard then writes its bookkeeping (digest records) on a Deployment only with
 * a template write, so that a Deployment created with the webhook keeps generation 1.
 */
export function annotationWritesBumpGeneration(kind: WorkloadKind): boolean {
  return kind === 'Deployment';
}

export interface UnsupportedRequest {
  feature: string;
  annotations: string[];
}

/** The StatefulSet-only `features` that a workload of `kind` asks for by its annotations, each with the annotations that ask (sorted). */
export function unsupportedFeatures(kind: WorkloadKind, annotations: Record<string, string> | undefined, features: readonly StatefulSetOnlyFeature[]): UnsupportedRequest[] {
  if (kind === 'StatefulSet') return [];
  const keys = Object.keys(annotations ?? {}).sort();
  const out: UnsupportedRequest[] = [];
  for (const { feature, asks } of features) {
    const asking = keys.filter(asks);
    if (asking.length > 0) out.push({ feature, annotations: asking });
  }
  return out;
}

/** The Warning's text: what is ignored and what the kind has instead. */
export function unsupportedMessage(kind: WorkloadKind, requests: readonly UnsupportedRequest[]): string {
  const native =
    kind === 'Deployment'
      ? 'spec.strategy.rollingUpdate (maxUnavailable, maxSurge) and spec.minReadySeconds'
      : kind === 'Rollout'
        ? "spec.strategy (Argo Rollouts' canary or blue-green steps and analysis)"
        : 'spec.updateStrategy.rollingUpdate (maxUnavailable, maxSurge) and spec.minReadySeconds';
  const parts = requests.map((r) => `${r.feature} (${r.annotations.join(', ')})`).join(' and ');
  return `${parts}: StatefulSets only; ignored on a ${kind}, which paces its rollouts with ${native}`;
}

/**
 * The workload a Rollout runs the template of instead of its own (`spec.workloadRef`, no
 * `spec.template`); undefined for every other workload. rollguard writes nothing to such a
 * Rollout: the template it would annotate is the referenced Deployment's, opted in on its own.
 */
export function templateElsewhere(kind: WorkloadKind, workload: Workload): ArgoWorkloadRef | undefined {
  if (kind !== 'Rollout' || workload.spec?.template) return undefined;
  const spec = workload.spec as { workloadRef?: ArgoWorkloadRef } | undefined;
  return spec?.workloadRef;
}

/** The Warning's text for a Rollout with a workloadRef: what rollguard does not do, and where to opt in instead. */
export function templateElsewhereMessage(ref: ArgoWorkloadRef): string {
  const target = `${ref.kind ?? 'Deployment'} ${ref.name ?? '(unnamed)'}`;
  const scaledDown = ref.scaleDown === 'onsuccess' || ref.scaleDown === 'progressively' ? `; Argo scales ${target} to 0 (scaleDown: ${ref.scaleDown}), so its own rollout replaces no pod` : '';
  return (
    `no spec.template: its pods run the template of ${target} (spec.workloadRef), and rollguard writes nothing to this Rollout. ` +
    `Label ${target} ${ENABLED_LABEL}=true instead: rollguard then annotates its template, and Argo Rollouts rolls each change out through this Rollout's steps${scaledDown}`
  );
}
