import type { CoreV1Event, V1ControllerRevision, V1ObjectMeta, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { isJsonObject, jsonObjectOrUndefined } from '../kube/json.js';
import type { Workload, WorkloadKind } from '../kube/workloads.js';
import type { ObjectKind } from '../restarter/references.js';
import { REVISION_LABEL } from '../rollout/pods.js';

/** What a reader found of one referenced object: metadata only, never data. */
export type ObjectFact =
  | {
      kind: ObjectKind;
      name: string;
      status: 'found';
      uid: string;
      resourceVersion: string;
      labels: Record<string, string>;
      /** The object's last write: the latest time of its managedFields, else its creation. */
      changedAt?: Date;
    }
  | { kind: ObjectKind; name: string; status: 'absent' }
  /** The reader could not tell (forbidden, an error): what it was told. */
  | { kind: ObjectKind; name: string; status: 'unreadable'; error: string };

/** One Event about the workload, as the API server stores it. */
export interface EventFact {
  type: string;
  reason: string;
  message: string;
  count: number;
  firstAt: Date;
  lastAt: Date;
  /** Who wrote it: "rollguard" for rollguard's own. */
  component: string;
}

/** One revision of the workload's pod template: a ControllerRevision, or a Deployment's ReplicaSet. */
export interface RevisionFact {
  name: string;
  /** Counts up with every new template (the Deployment's `deployment.kubernetes.io/revision`). */
  revision: number;
  createdAt?: Date;
  /** The label value its pods carry (controller-revision-hash, or pod-template-hash). */
  podLabel: string;
  /** The pod template of the revision (wire form). */
  template: unknown;
}

/** Everything `rollguard why` reads about one workload, at one moment. */
export interface WorkloadFacts {
  kind: WorkloadKind;
  namespace: string;
  name: string;
  /** undefined: no such workload. */
  workload?: Workload;
  /** The workload's last write but its status's (managedFields): a write of its spec or metadata opens its debounce window too. */
  workloadWrittenAt?: Date;
  objects: ObjectFact[];
  events: EventFact[];
  /** The workload's pods (the reader keeps only those it controls). */
  pods: V1Pod[];
  revisions: RevisionFact[];
  /** What the reader could not read (pods, Events, revisions), each in words. */
  problems: string[];
  now: Date;
}

export const DEPLOYMENT_REVISION_ANNOTATION = 'deployment.kubernetes.io/revision';
export const POD_TEMPLATE_HASH_LABEL = 'pod-template-hash';

/** The label whose value ties a pod to its revision, by the kind of its workload. */
export function podRevisionLabel(kind: WorkloadKind): string {
  return kind === 'Deployment' ? POD_TEMPLATE_HASH_LABEL : REVISION_LABEL;
}

function dateOf(value: Date | string | undefined | null): Date | undefined {
  if (value === undefined || value === null) return undefined;
  const at = value instanceof Date ? value : new Date(value);
  return Number.isNaN(at.getTime()) ? undefined : at;
}

/**
 * The latest write time a metadata block shows: its managedFields' newest entry, else its creation.
 * `subresources: false` leaves out the writes of a subresource (status, scale).
 */
export function lastWriteOf(metadata: V1ObjectMeta | Record<string, unknown> | undefined, options: { subresources?: boolean } = {}): Date | undefined {
  const meta = metadata as { managedFields?: unknown; creationTimestamp?: unknown } | undefined;
  let latest: Date | undefined;
  for (const entry of Array.isArray(meta?.managedFields) ? meta.managedFields : []) {
    const fields = jsonObjectOrUndefined(entry);
    if (options.subresources === false && typeof fields?.subresource === 'string' && fields.subresource !== '') continue;
    const at = dateOf(fields?.time as Date | string | undefined);
    if (at && (!latest || at > latest)) latest = at;
  }
  return latest ?? dateOf(meta?.creationTimestamp as Date | string | undefined);
}

/** An object's fact from its (PartialObjectMetadata) wire JSON; undefined `raw`: it does not exist. */
export function objectFactOf(kind: ObjectKind, name: string, raw: unknown): ObjectFact {
  const meta = jsonObjectOrUndefined(jsonObjectOrUndefined(raw)?.metadata);
  if (!meta) return { kind, name, status: 'absent' };
  const labels = Object.fromEntries(Object.entries(jsonObjectOrUndefined(meta.labels) ?? {}).filter((e): e is [string, string] => typeof e[1] === 'string'));
  return {
    kind,
    name,
    status: 'found',
    uid: typeof meta.uid === 'string' ? meta.uid : '',
    resourceVersion: typeof meta.resourceVersion === 'string' ? meta.resourceVersion : '',
    labels,
    changedAt: lastWriteOf(meta),
  };
}

export function eventFactOf(event: CoreV1Event): EventFact {
  const first = dateOf(event.firstTimestamp) ?? dateOf(event.eventTime) ?? dateOf(event.metadata?.creationTimestamp) ?? new Date(0);
  return {
    type: event.type ?? 'Normal',
    reason: event.reason ?? '',
    message: event.message ?? '',
    count: event.count ?? 1,
    firstAt: first,
    lastAt: dateOf(event.lastTimestamp) ?? first,
    component: event.reportingComponent || event.source?.component || '',
  };
}

/** Whether `owner` (uid) is the controller of the object with this metadata. */
export function controlledBy(metadata: V1ObjectMeta | undefined, uid: string | undefined): boolean {
  return uid !== undefined && (metadata?.ownerReferences ?? []).some((r) => r.controller === true && r.uid === uid);
}

/**
 * A ControllerRevision of a StatefulSet or DaemonSet as a revision: its data holds the template
 * as a strategic merge patch (`{"spec":{"template":{"$patch":"replace", ...}}}`). A StatefulSet's
 * pods carry the revision's name, a DaemonSet's its hash label.
 */
export function controllerRevisionFact(kind: 'StatefulSet' | 'DaemonSet', revision: V1ControllerRevision): RevisionFact {
  const data = jsonObjectOrUndefined(revision.data);
  const template = jsonObjectOrUndefined(jsonObjectOrUndefined(data?.spec)?.template);
  const { $patch: _patch, ...plain } = template ?? {};
  const name = revision.metadata?.name ?? '';
  return {
    name,
    revision: revision.revision,
    createdAt: dateOf(revision.metadata?.creationTimestamp),
    podLabel: kind === 'StatefulSet' ? name : (revision.metadata?.labels?.[REVISION_LABEL] ?? name),
    template: isJsonObject(template) ? plain : undefined,
  };
}

/** A Deployment's ReplicaSet as a revision; the template without the hash label the controller adds. */
export function replicaSetFact(replicaSet: V1ReplicaSet): RevisionFact {
  const hash = replicaSet.metadata?.labels?.[POD_TEMPLATE_HASH_LABEL] ?? '';
  const template = replicaSet.spec?.template;
  const labels = Object.fromEntries(Object.entries(template?.metadata?.labels ?? {}).filter(([key]) => key !== POD_TEMPLATE_HASH_LABEL));
  const number = Number(replicaSet.metadata?.annotations?.[DEPLOYMENT_REVISION_ANNOTATION] ?? '0');
  return {
    name: replicaSet.metadata?.name ?? '',
    revision: Number.isSafeInteger(number) ? number : 0,
    createdAt: dateOf(replicaSet.metadata?.creationTimestamp),
    podLabel: hash,
    template: template ? { ...template, metadata: { ...template.metadata, labels } } : undefined,
  };
}
