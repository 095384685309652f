import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import type { RolloutDecision } from './decision.js';
import { podRevision } from './pods.js';

/**
 * The pods the decision's write would have stopped: a step down of the partition replaces
 * each pod it passes that is not on the update revision yet, a forced rollback deletes its
 * pod. Other decisions stop no pod. The handover gate asks this before every write.
 */
export function podsReplacedBy(decision: RolloutDecision, set: V1StatefulSet, pods: readonly V1Pod[]): string[] {
  if (decision.action === 'delete-pod') return [decision.pod];
  if (decision.action !== 'set-partition' || decision.to >= decision.from) return [];
  const name = set.metadata?.name ?? '';
  const start = set.spec?.ordinals?.start ?? 0;
  const updateRevision = set.status?.updateRevision;
  const out: string[] = [];
  for (let index = decision.from - 1; index >= decision.to; index--) {
    const podName = `${name}-${start + index}`;
    const pod = pods.find((p) => p.metadata?.name === podName);
    if (!pod || podRevision(pod) !== updateRevision) out.push(podName);
  }
  return out;
}
