import type { V1DaemonSet, V1Deployment, V1ObjectMeta, V1PodTemplateSpec, V1StatefulSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Informer } from './informer.js';
import { ObjectStore } from './object-store.js';
import type { RawApi } from './raw-api.js';

/**
 * The kinds with a pod template that rollguard keeps in step with their references; a closed set
 * (metric labels). The apps/v1 three always; Argo Rollouts' Rollout only with --argo-rollouts
 * (`enabledWorkloadKinds`), since its CRD may not exist.
 */
export const WORKLOAD_KINDS = ['StatefulSet', 'Deployment', 'DaemonSet', 'Rollout'] as const;
export type WorkloadKind = (typeof WORKLOAD_KINDS)[number];
/** The apps/v1 kinds: watched whatever the flags say. */
export const APPS_WORKLOAD_KINDS = ['StatefulSet', 'Deployment', 'DaemonSet'] as const satisfies readonly WorkloadKind[];
export type AppsWorkloadKind = (typeof APPS_WORKLOAD_KINDS)[number];

/** The kinds rollguard watches, admits and writes: the apps/v1 three, and Rollout when Argo Rollouts support is on. */
export function enabledWorkloadKinds(opts: { argoRollouts?: boolean } = {}): readonly WorkloadKind[] {
  return opts.argoRollouts ? WORKLOAD_KINDS : APPS_WORKLOAD_KINDS;
}

/** `spec.workloadRef` of a Rollout: the Deployment (or ReplicaSet, PodTemplate) whose template it runs instead of its own. */
export interface ArgoWorkloadRef {
  apiVersion?: string;
  kind?: string;
  name?: string;
  /** never (Argo's default), onsuccess, progressively: whether Argo scales the referenced Deployment down */
  scaleDown?: string;
}

/**
 * What rollguard reads of an `argoproj.io/v1alpha1` Rollout: its metadata, its pod template (as a
 * Deployment's), or the workload it references instead; the rest of its spec (strategy, steps,
 * analysis) is Argo's and is neither read nor written.
 */
export interface ArgoRollout {
  apiVersion?: string;
  kind?: string;
  metadata?: V1ObjectMeta;
  spec?: {
    replicas?: number;
    template?: V1PodTemplateSpec;
    workloadRef?: ArgoWorkloadRef;
    /** Argo's own restart (pods older than it are evicted, the template stays); rollguard never writes it */
    restartAt?: string;
  };
  status?: { currentPodHash?: string; observedGeneration?: string; replicas?: number; updatedReplicas?: number; readyReplicas?: number };
}

interface WorkloadTypes {
  StatefulSet: V1StatefulSet;
  Deployment: V1Deployment;
  DaemonSet: V1DaemonSet;
  Rollout: ArgoRollout;
}
export type WorkloadOf<K extends WorkloadKind> = WorkloadTypes[K];
/** Any of them: metadata and `spec.template` are where they are in all four (a Rollout with a workloadRef has no template). */
export type Workload = WorkloadTypes[WorkloadKind];

/** A StatefulSet, Deployment or DaemonSet. */
export type AppsWorkload = WorkloadTypes[AppsWorkloadKind];

/** Where each kind is served: its API group, version and plural. */
export const WORKLOAD_RESOURCES: Record<WorkloadKind, { group: string; version: string; plural: string }> = {
  StatefulSet: { group: 'apps', version: 'v1', plural: 'statefulsets' },
  Deployment: { group: 'apps', version: 'v1', plural: 'deployments' },
  DaemonSet: { group: 'apps', version: 'v1', plural: 'daemonsets' },
  Rollout: { group: 'argoproj.io', version: 'v1alpha1', plural: 'rollouts' },
};

export const WORKLOAD_PLURALS: Record<WorkloadKind, string> = {
  StatefulSet: WORKLOAD_RESOURCES.StatefulSet.plural,
  Deployment: WORKLOAD_RESOURCES.Deployment.plural,
  DaemonSet: WORKLOAD_RESOURCES.DaemonSet.plural,
  Rollout: WORKLOAD_RESOURCES.Rollout.plural,
};

/** `apps/v1`, `argoproj.io/v1alpha1`: the apiVersion of a kind's objects (Events' involvedObject). */
export function workloadApiVersion(kind: WorkloadKind): string {
  const { group, version } = WORKLOAD_RESOURCES[kind];
  return `${group}/${version}`;
}

export function isWorkloadKind(value: unknown): value is WorkloadKind {
  return typeof value === 'string' && (WORKLOAD_KINDS as readonly string[]).includes(value);
}

/** `Kind/namespace/name`: the key a workload goes by in the reverse index and the restarter's queue (names never hold a slash). */
export function workloadKey(kind: WorkloadKind, namespace: string, name: string): string {
  return `${kind}/${namespace}/${name}`;
}

export function splitWorkloadKey(key: string): { kind: WorkloadKind; namespace: string; name: string } {
  const [kind, namespace, name, ...rest] = key.split('/');
  if (!isWorkloadKind(kind) || namespace === undefined || !name || rest.length > 0) {
    throw new Error(`workload key "${key}" is not Kind/namespace/name with Kind one of ${WORKLOAD_KINDS.join(', ')}`);
  }
  return { kind, namespace, name };
}

/** A workload's identity, parsed once from its key at the edge of the queue and carried from there. */
export interface WorkloadRef {
  readonly kind: WorkloadKind;
  readonly namespace: string;
  readonly name: string;
  /** `Kind/namespace/name` (workloadKey): what the queue and the per-workload memories go by. */
  readonly key: string;
}

export function workloadRef(key: string): WorkloadRef {
  return { ...splitWorkloadKey(key), key };
}

/** "Deployment ns/web": how logs, errors and status name a workload, from its key or its parsed ref. */
export function describeWorkload(workload: string | Omit<WorkloadRef, 'key'>): string {
  const { kind, namespace, name } = typeof workload === 'string' ? splitWorkloadKey(workload) : workload;
  return `${kind} ${namespace}/${name}`;
}

export function decodeWorkload<K extends WorkloadKind>(kind: K, raw: unknown): WorkloadOf<K> {
  const meta = (raw as { metadata?: { name?: unknown; resourceVersion?: unknown } } | null)?.metadata;
  if (typeof meta?.name !== 'string' || typeof meta.resourceVersion !== 'string') {
    throw new Error(`${kind} without metadata.name or metadata.resourceVersion`);
  }
  // The wire JSON with its date fields made Dates, as the model types them: client-node's
  // ObjectSerializer did this (and dropped unknown fields), but it loads every model of every
  // API group (about 30 MB of RSS) for the four date fields a workload carries.
  const workload = (kind === 'Rollout' ? decodeRollout(raw) : withDates(raw)) as WorkloadOf<K>;
  // who wrote which field: nothing here reads it, and it is about a third of a cached workload
  if (workload.metadata) delete workload.metadata.managedFields;
  return workload;
}

type Wire = Record<string, unknown>;
const wire = (v: unknown): Wire | undefined => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Wire) : undefined);

function toDate(holder: Wire | undefined, key: string): void {
  const value = holder?.[key];
  if (typeof value === 'string') holder![key] = new Date(value);
}

/** `meta` with its dates made Dates, in place. */
function metadataDates(meta: Wire | undefined): Wire | undefined {
  toDate(meta, 'creationTimestamp');
  toDate(meta, 'deletionTimestamp');
  return meta;
}

/** A pod template with its metadata's dates made Dates, in place. */
function templateDates(template: Wire | undefined): Wire | undefined {
  metadataDates(wire(template?.metadata));
  return template;
}

/** The date-time fields of an apps/v1 workload, turned into Dates in place: its metadata, its templates' and its status conditions'. */
function withDates(raw: unknown): unknown {
  const object = wire(raw);
  metadataDates(wire(object?.metadata));
  const spec = wire(object?.spec);
  templateDates(wire(spec?.template));
  if (Array.isArray(spec?.volumeClaimTemplates)) for (const claim of spec.volumeClaimTemplates) metadataDates(wire(wire(claim)?.metadata));
  const conditions = wire(object?.status)?.conditions;
  if (Array.isArray(conditions)) {
    for (const c of conditions) {
      toDate(wire(c), 'lastTransitionTime');
      toDate(wire(c), 'lastUpdateTime');
    }
  }
  return raw;
}

function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/**
 * A Rollout from wire JSON: its metadata and template as a Deployment's (dates made Dates, as
 * withDates does), its workloadRef and the few status fields read; nothing else of its spec kept.
 */
function decodeRollout(raw: unknown): ArgoRollout {
  const object = raw as { apiVersion?: unknown; kind?: unknown; metadata?: unknown; spec?: unknown; status?: unknown };
  const spec = (typeof object.spec === 'object' && object.spec !== null ? object.spec : {}) as Record<string, unknown>;
  const status = (typeof object.status === 'object' && object.status !== null ? object.status : undefined) as Record<string, unknown> | undefined;
  const ref = (typeof spec.workloadRef === 'object' && spec.workloadRef !== null ? spec.workloadRef : undefined) as Record<string, unknown> | undefined;
  const number = (value: unknown): number | undefined => (typeof value === 'number' ? value : undefined);
  return {
    apiVersion: stringOrUndefined(object.apiVersion),
    kind: stringOrUndefined(object.kind),
    metadata: metadataDates(wire(object.metadata)) as V1ObjectMeta | undefined,
    spec: {
      replicas: number(spec.replicas),
      template: templateDates(wire(spec.template)) as V1PodTemplateSpec | undefined,
      workloadRef: ref && { apiVersion: stringOrUndefined(ref.apiVersion), kind: stringOrUndefined(ref.kind), name: stringOrUndefined(ref.name), scaleDown: stringOrUndefined(ref.scaleDown) },
      restartAt: stringOrUndefined(spec.restartAt),
    },
    status: status && {
      currentPodHash: stringOrUndefined(status.currentPodHash),
      observedGeneration: stringOrUndefined(status.observedGeneration),
      replicas: number(status.replicas),
      updatedReplicas: number(status.updatedReplicas),
      readyReplicas: number(status.readyReplicas),
    },
  };
}

export interface WorkloadCache<K extends WorkloadKind> {
  kind: K;
  informer: Informer<WorkloadOf<K>>;
  store: ObjectStore<WorkloadOf<K>>;
}

const JSON_ACCEPT = 'application/json';

/** Whole workloads of one kind matching `labelSelector`, listed and watched in `namespaces` (undefined: all). */
export function createWorkloadCache<K extends WorkloadKind>(
  kind: K,
  opts: { api: RawApi; namespaces: string[] | undefined; labelSelector: string; logger: Logger; watchIdleTimeoutMs?: number },
): WorkloadCache<K> {
  const store = new ObjectStore<WorkloadOf<K>>();
  const informer = new Informer<WorkloadOf<K>>({
    name: `${kind} cache`,
    api: opts.api,
    resource: WORKLOAD_RESOURCES[kind],
    namespaces: opts.namespaces,
    labelSelector: opts.labelSelector,
    accept: { list: JSON_ACCEPT, watch: JSON_ACCEPT },
    decode: (raw) => decodeWorkload(kind, raw),
    store,
    logger: opts.logger,
    watchIdleTimeoutMs: opts.watchIdleTimeoutMs,
  });
  return { kind, informer, store };
}
