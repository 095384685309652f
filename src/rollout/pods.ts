import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';

/** Label the StatefulSet controller puts on each pod: the ControllerRevision it was made from. */
export const REVISION_LABEL = 'controller-revision-hash';

/**
 * Waiting reasons after which a container does not start until something changes
 * (image, config, code). ContainerCreating and PodInitializing are progress, not listed.
 */
const BROKEN_WAITING_REASONS: ReadonlySet<string> = new Set([
  'CrashLoopBackOff',
  'ImagePullBackOff',
  'ErrImagePull',
  'ErrImageNeverPull',
  'InvalidImageName',
  'RegistryUnavailable',
  'CreateContainerConfigError',
  'CreateContainerError',
  'RunContainerError',
  'PreStartHookError',
  'PostStartHookError',
]);

// Decimal without leading zeros: the StatefulSet controller names pods `<set>-<ordinal>` with strconv.Itoa.
const ORDINAL_PATTERN = /^(?:0|[1-9][0-9]*)$/;

const MS_PER_SECOND = 1000;

/**
 * The ordinal of a pod of the StatefulSet `setName`, as a number so that
 * web-10 sorts after web-2; undefined when the name is not `<setName>-<ordinal>`.
 */
export function podOrdinal(podName: string, setName: string): number | undefined {
  const prefix = `${setName}-`;
  if (!podName.startsWith(prefix)) return undefined;
  const suffix = podName.slice(prefix.length);
  if (!ORDINAL_PATTERN.test(suffix)) return undefined;
  const ordinal = Number(suffix);
  return Number.isSafeInteger(ordinal) ? ordinal : undefined;
}

/** The revision the pod was made from (its `controller-revision-hash` label). */
export function podRevision(pod: V1Pod): string | undefined {
  return pod.metadata?.labels?.[REVISION_LABEL];
}

export function isTerminating(pod: V1Pod): boolean {
  return pod.metadata?.deletionTimestamp != null;
}

/**
 * Whether a pod counts as healthy for a rollout step. `availableInMs` is set only
 * when the pod is Ready and all that is missing is time (minReadySeconds): the
 * caller may wait for it rather than report the pod as blocking.
 */
export type PodHealth = { ready: true } | { ready: false; reason: string; availableInMs?: number };

/**
 * Ready = not terminating, condition Ready "True" for at least minReadySeconds and
 * every container ready. The reason names the most useful cause first: a broken
 * container (CrashLoopBackOff, ImagePullBackOff, ...) before the pod phase.
 */
export function podHealth(pod: V1Pod, now: Date, minReadySeconds: number): PodHealth {
  if (isTerminating(pod)) return { ready: false, reason: 'Terminating' };
  const phase = pod.status?.phase;
  if (phase === 'Failed' || phase === 'Succeeded') return { ready: false, reason: phase };

  const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  const broken = statuses.map(waitingReason).find((reason) => reason !== undefined && BROKEN_WAITING_REASONS.has(reason));
  if (broken !== undefined) return { ready: false, reason: broken };

  if (phase === undefined || phase === 'Pending') return { ready: false, reason: 'Pending' };
  if (phase !== 'Running') return { ready: false, reason: phase };

  const readyCondition = pod.status?.conditions?.find((condition) => condition.type === 'Ready');
  if (readyCondition?.status !== 'True') {
    const detail = readyCondition?.reason ? ` (${readyCondition.reason})` : '';
    return { ready: false, reason: `not Ready${detail}` };
  }
  const unready = (pod.status?.containerStatuses ?? []).find((status) => !status.ready);
  if (unready !== undefined) return { ready: false, reason: `container ${unready.name} not ready` };

  if (minReadySeconds <= 0) return { ready: true };
  const since = timeMs(readyCondition.lastTransitionTime);
  // as the StatefulSet controller does: without a transition time, minReadySeconds cannot have passed
  if (since === undefined) return { ready: false, reason: 'Ready condition has no lastTransitionTime' };
  const readyForMs = Math.max(0, now.getTime() - since);
  const requiredMs = minReadySeconds * MS_PER_SECOND;
  if (readyForMs >= requiredMs) return { ready: true };
  return {
    ready: false,
    reason: `ready for ${Math.floor(readyForMs / MS_PER_SECOND)}s of minReadySeconds ${minReadySeconds}`,
    availableInMs: requiredMs - readyForMs,
  };
}

function waitingReason(status: V1ContainerStatus): string | undefined {
  return status.state?.waiting?.reason;
}

// Typed as Date, but objects decoded from an AdmissionReview or raw JSON carry RFC 3339 strings.
function timeMs(value: Date | string | undefined): number | undefined {
  if (value == null) return undefined;
  const ms = new Date(value).getTime();
  return Number.isNaN(ms) ? undefined : ms;
}
