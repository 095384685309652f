import type { WorkloadKind } from '../kube/workloads.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_URL_ANNOTATION } from '../rollout/decision.js';

/** Event reason: a workload asks for a feature its kind does not have. */
export const REASON_UNSUPPORTED_FOR_KIND = 'UnsupportedForKind';

interface StatefulSetFeature {
  feature: string;
  /** whether a workload annotation asks for it */
  asks(key: string): boolean;
}

/**
 * Health-gated partition stepping and primary handover work on a StatefulSet's partition and
 * ordinals; a Deployment or DaemonSet has neither (its maxUnavailable, maxSurge and
 * minReadySeconds do the pacing natively).
 */
const STATEFULSET_ONLY: readonly StatefulSetFeature[] = [
  { feature: 'health-gated rollouts', asks: (key) => key === HEALTH_GATED_ANNOTATION || key === HEALTH_URL_ANNOTATION },
  { feature: 'primary handover', asks: (key) => key === 'rollguard.io/primary-selector' || key.startsWith('rollguard.io/handover') },
];

/**
 * Whether a change of the workload's own annotations makes a new generation: a Deployment's do
 * (the API server bumps it, since they are copied to its ReplicaSets); a StatefulSet's and a
 * DaemonSet's do not. rollguard then writes its bookkeeping (digest records) only with a
 * template write, so that a Deployment created with the webhook keeps generation 1.
 */
export function annotationWritesBumpGeneration(kind: WorkloadKind): boolean {
  return kind === 'Deployment';
}

export interface UnsupportedRequest {
  feature: string;
  annotations: string[];
}

/** The StatefulSet-only features that a workload of `kind` asks for by its annotations, each with the annotations that ask (sorted). */
export function unsupportedFeatures(kind: WorkloadKind, annotations: Record<string, string> | undefined): UnsupportedRequest[] {
  if (kind === 'StatefulSet') return [];
  const keys = Object.keys(annotations ?? {}).sort();
  const out: UnsupportedRequest[] = [];
  for (const { feature, asks } of STATEFULSET_ONLY) {
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
      : 'spec.updateStrategy.rollingUpdate (maxUnavailable, maxSurge) and spec.minReadySeconds';
  const parts = requests.map((r) => `${r.feature} (${r.annotations.join(', ')})`).join(' and ');
  return `${parts}: StatefulSets only; ignored on a ${kind}, which paces its rollouts with ${native}`;
}
