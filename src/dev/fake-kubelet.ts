import { CoreV1Api, type KubeConfig, type V1ContainerStatus, type V1Node, type V1Pod, type V1PodStatus } from '@kubernetes/client-node';
import { statusCode } from '../kube/api-status.js';

/** What the fake kubelet makes of a pod. */
export type PodBehaviour = 'ready' | 'crashloop' | 'imagepullbackoff' | 'pending' | 'failed' | 'not-ready';

const POLL_INTERVAL_MS = 100;
export const FAKE_NODE = 'fake-node';
const NOT_READY_TAINT = 'node.kubernetes.io/not-ready';
const SHARED_POD_IP = '127.0.0.1';
/** 127.0.0.2, 127.0.0.3, …: loopback addresses (all of 127/8 reaches lo) a test can listen on, one per pod. */
const DISTINCT_IP_COUNT = 65_000;

export interface FakeKubeletOptions {
  /** namespaces left alone when serving every namespace (rollguard's own in `rollguard dev`) */
  skipNamespaces?: string[];
  /** the Node it registers and binds pods to */
  nodeName?: string;
  /** 'distinct': each pod gets a loopback address of its own (127.0.0.N); 'shared' (default): 127.0.0.1 */
  podIps?: 'shared' | 'distinct';
  /**
   * 'all': every pod is bound to a node, so a deletion goes through Terminating as on a real kubelet
   * (`rollguard dev`). 'pinned' (default): only pods pinned to a node (DaemonSet pods); the others stay
   * unbound and the API server deletes them at once, which the tests' timings were written for.
   */
  bind?: 'all' | 'pinned';
}

/**
 * Plays scheduler and kubelet: no scheduler or kubelet runs in the local control plane, so it
 * registers a Node, binds pods (DaemonSet pods to the node their affinity names; all pods with `bind: 'all'`),
 * writes pod status through the API, as Kubernetes' own StatefulSet integration tests do, and
 * completes the deletion of terminating pods (a bound pod otherwise never finishes terminating).
 * Pods of any owner (StatefulSet, ReplicaSet, DaemonSet, none).
 */
export class FakeKubelet {
  private readonly core: CoreV1Api;
  private readonly behaviours = new Map<string, PodBehaviour>();
  private readonly byImage = new Map<string, PodBehaviour>();
  private readonly skip: Set<string>;
  private readonly nodeName: string;
  private readonly distinctIps: boolean;
  private readonly bindAll: boolean;
  private readonly ipByPod = new Map<string, string>();
  private nextIp = 0;
  private nodeRegistered = false;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  lastError: unknown;

  constructor(
    kc: KubeConfig,
    /** undefined: pods of every namespace (kuttl makes a namespace per case) */
    private readonly namespace: string | undefined,
    opts: FakeKubeletOptions = {},
  ) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.skip = new Set(opts.skipNamespaces ?? []);
    this.nodeName = opts.nodeName ?? FAKE_NODE;
    this.distinctIps = opts.podIps === 'distinct';
    this.bindAll = opts.bind === 'all';
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
    if (!this.nodeRegistered) await this.registerNode();
    const pods = this.namespace
      ? await this.core.listNamespacedPod({ namespace: this.namespace })
      : await this.core.listPodForAllNamespaces();
    let failure: unknown;
    for (const pod of pods.items) {
      const name = pod.metadata!.name!;
      const namespace = pod.metadata!.namespace!;
      if (this.skip.has(namespace)) continue;
      try {
        if (pod.metadata?.deletionTimestamp) {
          this.ipByPod.delete(pod.metadata.uid ?? '');
          // the containers "stopped": finish what the API server started (an unbound pod is already gone)
          if (pod.spec?.nodeName) {
            // the API server reads the options from the body alone when there is one
            await this.core.deleteNamespacedPod({ name, namespace, body: { gracePeriodSeconds: 0, preconditions: { uid: pod.metadata.uid } } });
          }
          continue;
        }
        const pinned = affinityNode(pod);
        if (!pod.spec?.nodeName && (pinned !== undefined || this.bindAll)) {
          const node = pinned ?? this.nodeName;
          await this.core.createNamespacedPodBinding({ name, namespace, body: { metadata: { name, namespace }, target: { kind: 'Node', name: node } } });
          // the next pass writes the status of the pod as bound
          continue;
        }
        const status = this.statusFor(pod);
        if (sameStatus(pod.status, status)) continue;
        await this.core.replaceNamespacedPodStatus({ name, namespace, body: { ...pod, status } });
      } catch (err) {
        // a conflict or a pod deleted meanwhile: the next pass sees the new state; one pod's
        // failure does not hold up the others
        if (!isConflictOrGone(err)) failure ??= err;
      }
    }
    if (failure !== undefined) throw failure;
  }

  /** A Ready Node for pods to be bound to and for the DaemonSet controller to place pods on. */
  private async registerNode(): Promise<void> {
    const now = new Date();
    const node: V1Node = {
      metadata: { name: this.nodeName, labels: { 'kubernetes.io/hostname': this.nodeName, 'kubernetes.io/os': 'linux' } },
      spec: {},
    };
    let current: V1Node;
    try {
      current = await this.core.createNode({ body: node });
    } catch (err) {
      // several fake kubelets (one per test file) share the node
      if (statusCode(err) !== 409) throw err;
      current = await this.core.readNode({ name: this.nodeName });
    }
    if (!current.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) {
      await this.core.replaceNodeStatus({
        name: this.nodeName,
        body: {
          ...current,
          status: {
            conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'fake kubelet', lastHeartbeatTime: now, lastTransitionTime: now }],
            addresses: [{ type: 'InternalIP', address: SHARED_POD_IP }],
            capacity: { cpu: '64', memory: '256Gi', pods: '1000' },
            allocatable: { cpu: '64', memory: '256Gi', pods: '1000' },
          },
        },
      });
    }
    // The API server taints every new Node not-ready (TaintNodesByCondition); node-lifecycle, which
    // does not run here, would lift it once the Node is Ready. DaemonSet pods do not tolerate it.
    const registered = await this.core.readNode({ name: this.nodeName });
    const taints = registered.spec?.taints ?? [];
    if (taints.some((t) => t.key === NOT_READY_TAINT)) {
      await this.core.replaceNode({ name: this.nodeName, body: { ...registered, spec: { ...registered.spec, taints: taints.filter((t) => t.key !== NOT_READY_TAINT) } } });
    }
    this.nodeRegistered = true;
  }

  private podIp(pod: V1Pod): string {
    if (!this.distinctIps) return SHARED_POD_IP;
    if (pod.status?.podIP) return pod.status.podIP;
    const uid = pod.metadata?.uid ?? '';
    let ip = this.ipByPod.get(uid);
    if (ip === undefined) {
      const n = 2 + (this.nextIp++ % DISTINCT_IP_COUNT);
      ip = `127.0.${Math.floor(n / 256)}.${n % 256}`;
      this.ipByPod.set(uid, ip);
    }
    return ip;
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
      hostIP: SHARED_POD_IP,
      podIP: this.podIp(pod),
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

/** The node a DaemonSet pod is pinned to (required node affinity on metadata.name), if any. */
export function affinityNode(pod: V1Pod): string | undefined {
  const terms = pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  for (const term of terms) {
    for (const field of term.matchFields ?? []) {
      if (field.key === 'metadata.name' && field.operator === 'In' && field.values?.[0]) return field.values[0];
    }
  }
  return undefined;
}

function isConflictOrGone(err: unknown): boolean {
  const code = statusCode(err);
  return code === 409 || code === 404;
}
