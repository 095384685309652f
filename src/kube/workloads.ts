import type { V1DaemonSet, V1Deployment, V1StatefulSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Informer } from './informer.js';
import { ObjectStore } from './object-store.js';
import type { RawApi } from './raw-api.js';

/** The apps/v1 kinds with a pod template that rollguard keeps in step with their references; a closed set (metric labels). */
export const WORKLOAD_KINDS = ['StatefulSet', 'Deployment', 'DaemonSet'] as const;
export type WorkloadKind = (typeof WORKLOAD_KINDS)[number];

interface WorkloadTypes {
  StatefulSet: V1StatefulSet;
  Deployment: V1Deployment;
  DaemonSet: V1DaemonSet;
}
export type WorkloadOf<K extends WorkloadKind> = WorkloadTypes[K];
/** Any of them: metadata and `spec.template` are where they are in all three. */
export type Workload = WorkloadTypes[WorkloadKind];

export const WORKLOAD_PLURALS: Record<WorkloadKind, string> = { StatefulSet: 'statefulsets', Deployment: 'deployments', DaemonSet: 'daemonsets' };

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
  const workload = withDates(raw) as WorkloadOf<K>;
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

function metadataDates(meta: Wire | undefined): void {
  toDate(meta, 'creationTimestamp');
  toDate(meta, 'deletionTimestamp');
}

/** The date-time fields of an apps/v1 workload, turned into Dates in place: its metadata, its templates' and its status conditions'. */
function withDates(raw: unknown): unknown {
  const object = wire(raw);
  metadataDates(wire(object?.metadata));
  const spec = wire(object?.spec);
  metadataDates(wire(wire(spec?.template)?.metadata));
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
    resource: { group: 'apps', version: 'v1', plural: WORKLOAD_PLURALS[kind] },
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
