import { CoreV1Api, type KubeConfig, type V1ContainerStatus, type V1Pod, type V1PodStatus } from '@kubernetes/client-node';

/** What the fake kubelet makes of a pod. */
export type PodBehaviour = 'ready' | 'crashloop' | 'imagepullbackoff' | 'pending' | 'failed' | 'not-ready';

const POLL_INTERVAL_MS = 100;

/**
 * Plays kubelet for the pods of one namespace: no kubelet runs in the test control plane,
 * so it writes pod status through the API, as Kubernetes' own StatefulSet integration tests do.
 * Pods have no nodeName, so the API server deletes them at once when asked.
 */
export class FakeKubelet {
  private readonly core: CoreV1Api;
  private readonly behaviours = new Map<string, PodBehaviour>();
  private readonly byImage = new Map<string, PodBehaviour>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  lastError: unknown;

  constructor(
    kc: KubeConfig,
    /** undefined: pods of every namespace (kuttl makes a namespace per case) */
    private readonly namespace: string | undefined,
  ) {
    this.core = kc.makeApiClient(CoreV1Api);
  }

  /** How a pod by that name behaves from now on (also after it is recreated). */
  setBehaviour(podName: string, behaviour: PodBehaviour): void {
    this.behaviours.set(podName, behaviour);
  }

  /** How pods whose first container runs this image behave (a "bad image"). */
  setImageBehaviour(image: string, behaviour: PodBehaviour): void {
    this.byImage.set(image, behaviour);
  }

  start(): this {
    const loop = (): void => {
      if (this.stopped) return;
      this.running = this.syncOnce()
        .catch((err: unknown) => {
          this.lastError = err;
        })
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(loop, POLL_INTERVAL_MS);
        });
    };
    loop();
    return this;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  async syncOnce(): Promise<void> {
    const pods = this.namespace
      ? await this.core.listNamespacedPod({ namespace: this.namespace })
      : await this.core.listPodForAllNamespaces();
    for (const pod of pods.items) {
      if (pod.metadata?.deletionTimestamp) continue;
      const status = this.statusFor(pod);
      if (sameStatus(pod.status, status)) continue;
      try {
        await this.core.replaceNamespacedPodStatus({
          name: pod.metadata!.name!,
          namespace: pod.metadata!.namespace!,
          body: { ...pod, status },
        });
      } catch (err) {
        // a conflict or a pod deleted meanwhile: the next pass sees the new state
        if (!isConflictOrGone(err)) throw err;
      }
    }
  }

  private behaviourOf(pod: V1Pod): PodBehaviour {
    const byName = this.behaviours.get(pod.metadata?.name ?? '');
    if (byName) return byName;
    const image = pod.spec?.containers[0]?.image ?? '';
    return this.byImage.get(image) ?? 'ready';
  }

  private statusFor(pod: V1Pod): V1PodStatus {
    const behaviour = this.behaviourOf(pod);
    const prev = pod.status;
    const now = new Date();
    const containers = pod.spec?.containers ?? [];
    const keepTime = (type: string, status: string): Date => {
      const c = prev?.conditions?.find((x) => x.type === type);
      return c && c.status === status && c.lastTransitionTime ? new Date(c.lastTransitionTime) : now;
    };
    const readyFlag = behaviour === 'ready' ? 'True' : 'False';
    const conditions = [
      { type: 'PodScheduled', status: 'True', lastTransitionTime: keepTime('PodScheduled', 'True') },
      { type: 'Initialized', status: 'True', lastTransitionTime: keepTime('Initialized', 'True') },
      { type: 'ContainersReady', status: readyFlag, lastTransitionTime: keepTime('ContainersReady', readyFlag) },
      { type: 'Ready', status: readyFlag, lastTransitionTime: keepTime('Ready', readyFlag) },
    ];
    const restarts = (name: string): number =>
      prev?.containerStatuses?.find((c) => c.name === name)?.restartCount ?? 0;
    const containerStatus = (name: string, image: string): V1ContainerStatus => {
      const base = { name, image, imageID: `fake://${image}`, restartCount: restarts(name) };
      switch (behaviour) {
        case 'ready':
          return { ...base, ready: true, started: true, state: { running: { startedAt: keepTime('Ready', 'True') } } };
        case 'not-ready':
          return { ...base, ready: false, started: true, state: { running: { startedAt: now } } };
        case 'crashloop':
          return {
            ...base,
            restartCount: Math.max(1, base.restartCount),
            ready: false,
            started: false,
            state: { waiting: { reason: 'CrashLoopBackOff', message: 'back-off restarting failed container' } },
          };
        case 'imagepullbackoff':
          return { ...base, ready: false, started: false, state: { waiting: { reason: 'ImagePullBackOff', message: `pull ${image}` } } };
        case 'pending':
          return { ...base, ready: false, started: false, state: { waiting: { reason: 'ContainerCreating' } } };
        case 'failed':
          return { ...base, ready: false, started: false, state: { terminated: { exitCode: 1, reason: 'Error' } } };
      }
    };
    const phase = { ready: 'Running', 'not-ready': 'Running', crashloop: 'Running', imagepullbackoff: 'Pending', pending: 'Pending', failed: 'Failed' }[behaviour];
    return {
      phase,
      conditions: behaviour === 'pending' ? conditions.slice(0, 1) : conditions,
      hostIP: '127.0.0.1',
      podIP: '127.0.0.1',
      startTime: prev?.startTime ?? now,
      containerStatuses: containers.map((c) => containerStatus(c.name, c.image ?? '')),
    };
  }
}

/** Compares what matters, so an unchanged pod is not written again on every pass. */
function sameStatus(a: V1PodStatus | undefined, b: V1PodStatus): boolean {
  if (!a || a.phase !== b.phase) return false;
  const cond = (s: V1PodStatus | undefined): string =>
    JSON.stringify((s?.conditions ?? []).map((c) => [c.type, c.status]).sort());
  const cs = (s: V1PodStatus | undefined): string =>
    JSON.stringify((s?.containerStatuses ?? []).map((c) => [c.name, c.ready, Object.keys(c.state ?? {})[0], c.state?.waiting?.reason]));
  return cond(a) === cond(b) && cs(a) === cs(b);
}

function isConflictOrGone(err: unknown): boolean {
  const code = (err as { code?: number } | undefined)?.code;
  return code === 409 || code === 404;
}
