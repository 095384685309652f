import type { V1ContainerStatus, V1Pod, V1PodCondition, V1PodStatus } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Informer, objectKey } from '../kube/informer.js';
import type { RawApi } from '../kube/raw-api.js';
import type { ReflectorStore } from '../kube/reflector.js';

/**
 * The StatefulSet controller puts this label on every pod it makes; selecting on its existence
 * keeps the pods of Deployments, Jobs and the rest off the wire altogether.
 */
export const STATEFULSET_POD_LABEL = 'statefulset.kubernetes.io/pod-name';
const JSON_ACCEPT = 'application/json';
const STATEFULSET_KIND = 'StatefulSet';
const READY_CONDITION = 'Ready';

type Json = Record<string, unknown>;

function asRecord(value: unknown): Json | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
}

function asString(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function asDate(value: unknown): Date | undefined {
  if (typeof value !== 'string') return undefined;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** A pod as the cache keeps it, with the StatefulSet that controls it (undefined: none does). */
export interface CachedPod {
  setName: string | undefined;
  pod: V1Pod;
}

/**
 * A wire pod cut down to what decideRollout, the disruption gate and a precondition-guarded
 * delete read: name, uid, resourceVersion, labels, the annotations in `keep` (the gate's),
 * deletionTimestamp, phase, the Ready condition and each container's ready flag and waiting
 * reason; and the name of the controlling StatefulSet, from ownerReferences. The spec, every
 * other annotation, and managedFields are dropped: that is most of a pod's size.
 */
export function decodePod(raw: unknown, keep: readonly string[] = []): CachedPod {
  const meta = asRecord(asRecord(raw)?.metadata);
  const namespace = asString(meta?.namespace);
  const name = asString(meta?.name);
  const uid = asString(meta?.uid);
  const resourceVersion = asString(meta?.resourceVersion);
  if (!namespace || !name || !uid || !resourceVersion) {
    throw new Error(`pod ${namespace ?? ''}/${name ?? '?'} lacks metadata.namespace, name, uid or resourceVersion`);
  }
  // every label: a gate's selector (a primary's, src/handover) may name any of them; they are small
  const labels = stringValues(meta?.labels);
  const wireAnnotations = asRecord(meta?.annotations);
  const kept: Record<string, string> = {};
  for (const key of keep) {
    const value = asString(wireAnnotations?.[key]);
    if (value !== undefined) kept[key] = value;
  }
  const owner = asArray(meta?.ownerReferences)
    .map(asRecord)
    .find((ref) => ref?.controller === true && ref.kind === STATEFULSET_KIND);
  const deletionTimestamp = asDate(meta?.deletionTimestamp);

  const status = asRecord(asRecord(raw)?.status);
  const ready = asArray(status?.conditions)
    .map(asRecord)
    .find((condition) => condition?.type === READY_CONDITION);
  const conditions: V1PodCondition[] | undefined = ready
    ? [
        {
          type: READY_CONDITION,
          status: asString(ready.status) ?? 'Unknown',
          reason: asString(ready.reason),
          lastTransitionTime: asDate(ready.lastTransitionTime),
        },
      ]
    : undefined;

  const containers = containerStatuses(status?.containerStatuses);
  const initContainers = containerStatuses(status?.initContainerStatuses);
  const pod: V1Pod = {
    metadata: {
      namespace,
      name,
      uid,
      resourceVersion,
      ...(labels !== undefined ? { labels } : {}),
      ...(Object.keys(kept).length > 0 ? { annotations: kept } : {}),
      ...(deletionTimestamp ? { deletionTimestamp } : {}),
    },
    status: {
      phase: asString(status?.phase),
      // where a health URL naming this pod may connect (src/egress)
      ...podIPs(status),
      ...(conditions ? { conditions } : {}),
      ...(containers ? { containerStatuses: containers } : {}),
      ...(initContainers ? { initContainerStatuses: initContainers } : {}),
    },
  };
  return { setName: asString(owner?.name), pod };
}

function stringValues(value: unknown): Record<string, string> | undefined {
  const record = asRecord(value);
  if (!record) return undefined;
  const out = Object.fromEntries(Object.entries(record).filter((entry): entry is [string, string] => typeof entry[1] === 'string'));
  return Object.keys(out).length > 0 ? out : undefined;
}

function podIPs(status: Json | undefined): Pick<V1PodStatus, 'podIP' | 'podIPs'> {
  const podIP = asString(status?.podIP);
  const ips = asArray(status?.podIPs)
    .map((entry) => asString(asRecord(entry)?.ip))
    .filter((ip): ip is string => ip !== undefined && ip !== podIP);
  return { ...(podIP ? { podIP } : {}), ...(ips.length > 0 ? { podIPs: ips.map((ip) => ({ ip })) } : {}) };
}

function containerStatuses(value: unknown): V1ContainerStatus[] | undefined {
  const statuses = asArray(value).map(asRecord).filter((status) => status !== undefined);
  if (statuses.length === 0) return undefined;
  return statuses.map((status) => {
    const waitingReason = asString(asRecord(asRecord(status.state)?.waiting)?.reason);
    return {
      name: asString(status.name) ?? '',
      ready: status.ready === true,
      // required by the model, read by nothing here: not kept
      image: '',
      imageID: '',
      restartCount: 0,
      ...(waitingReason !== undefined ? { state: { waiting: { reason: waitingReason } } } : {}),
    };
  });
}

/** Everything but the resourceVersion: a write that changed nothing decideRollout reads wakes nobody. */
function fingerprint(pod: V1Pod): string {
  return JSON.stringify({ ...pod, metadata: { ...pod.metadata, resourceVersion: undefined } });
}

/**
 * Slim pods of StatefulSets, grouped by the set that controls them (namespace/name). Tells its
 * listener the key of every set whose pods changed in a way that matters for a rollout.
 */
export class PodCache implements ReflectorStore<CachedPod> {
  /** set key → pod name → pod */
  private readonly bySet = new Map<string, Map<string, V1Pod>>();
  /** pod key → set key */
  private readonly ownerOf = new Map<string, string>();
  private readonly listeners: ((setKey: string) => void)[] = [];

  onChange(listener: (setKey: string) => void): void {
    this.listeners.push(listener);
  }

  /** The pods controlled by the StatefulSet namespace/setName. */
  podsOf(namespace: string, setName: string): V1Pod[] {
    return [...(this.bySet.get(objectKey(namespace, setName))?.values() ?? [])];
  }

  get(namespace: string, podName: string): V1Pod | undefined {
    const setKey = this.ownerOf.get(objectKey(namespace, podName));
    return setKey === undefined ? undefined : this.bySet.get(setKey)?.get(podName);
  }

  size(): number {
    return this.ownerOf.size;
  }

  replace(items: CachedPod[], namespace: string | undefined): void {
    const fresh = new Set(items.map(({ pod }) => objectKey(pod.metadata?.namespace ?? '', pod.metadata?.name ?? '')));
    for (const [podKey, setKey] of [...this.ownerOf]) {
      const podNamespace = podKey.slice(0, podKey.indexOf('/'));
      if (namespace !== undefined && podNamespace !== namespace) continue;
      if (fresh.has(podKey)) continue;
      this.drop(podKey, setKey, podKey.slice(podNamespace.length + 1));
    }
    for (const item of items) this.upsert(item);
  }

  upsert({ setName, pod }: CachedPod): void {
    const namespace = pod.metadata?.namespace ?? '';
    const name = pod.metadata?.name ?? '';
    const podKey = objectKey(namespace, name);
    const setKey = setName === undefined ? undefined : objectKey(namespace, setName);
    const previousSetKey = this.ownerOf.get(podKey);
    const previous = previousSetKey === undefined ? undefined : this.bySet.get(previousSetKey)?.get(name);
    if (previous && previous.metadata?.resourceVersion === pod.metadata?.resourceVersion && previousSetKey === setKey) return;

    if (previousSetKey !== undefined && previousSetKey !== setKey) this.drop(podKey, previousSetKey, name);
    if (setKey === undefined) return;
    let pods = this.bySet.get(setKey);
    if (!pods) this.bySet.set(setKey, (pods = new Map()));
    pods.set(name, pod);
    this.ownerOf.set(podKey, setKey);
    // the new resourceVersion is kept either way: a delete's precondition needs it
    if (!previous || previousSetKey !== setKey || fingerprint(previous) !== fingerprint(pod)) this.emit(setKey);
  }

  remove({ pod }: CachedPod): void {
    const name = pod.metadata?.name ?? '';
    const podKey = objectKey(pod.metadata?.namespace ?? '', name);
    const setKey = this.ownerOf.get(podKey);
    if (setKey !== undefined) this.drop(podKey, setKey, name);
  }

  private drop(podKey: string, setKey: string, name: string): void {
    this.ownerOf.delete(podKey);
    const pods = this.bySet.get(setKey);
    pods?.delete(name);
    if (pods?.size === 0) this.bySet.delete(setKey);
    this.emit(setKey);
  }

  private emit(setKey: string): void {
    for (const listener of this.listeners) listener(setKey);
  }
}

export interface PodInformer {
  informer: Informer<CachedPod>;
  cache: PodCache;
}

/** List/watch of StatefulSet pods in `namespaces` (undefined: all), kept slim in a PodCache with the annotations in `keepAnnotations`. */
export function createPodInformer(opts: { api: RawApi; namespaces: string[] | undefined; keepAnnotations: readonly string[]; logger: Logger }): PodInformer {
  const cache = new PodCache();
  const informer = new Informer<CachedPod>({
    name: 'Pod cache',
    api: opts.api,
    resource: { group: '', version: 'v1', plural: 'pods' },
    namespaces: opts.namespaces,
    labelSelector: STATEFULSET_POD_LABEL,
    accept: { list: JSON_ACCEPT, watch: JSON_ACCEPT },
    decode: (raw) => decodePod(raw, opts.keepAnnotations),
    store: cache,
    logger: opts.logger,
  });
  return { informer, cache };
}
