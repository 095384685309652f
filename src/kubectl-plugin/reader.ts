import { AppsV1Api, CoreV1Api, type CoreV1Event, type KubeConfig, type V1ControllerRevision, type V1LabelSelector, type V1Pod, type V1ReplicaSet } from '@kubernetes/client-node';
import { errorText, statusCode } from '../kube/api-status.js';
import { PARTIAL_METADATA_ACCEPT, PARTIAL_METADATA_LIST_ACCEPT } from '../kube/metadata-cache.js';
import { ApiStatusError, RawApi, isNotFound } from '../kube/raw-api.js';
import { APPS_WORKLOAD_KINDS, WORKLOAD_PLURALS, decodeWorkload, type AppsWorkload, type AppsWorkloadKind } from '../kube/workloads.js';
import { jsonObjectOrUndefined } from '../kube/json.js';
import { STACKABLE_ENABLED_LABEL } from '../compat/stackable.js';
import { ENABLED_LABEL } from '../restarter/annotations.js';
import { referencedObjects, type ObjectKind } from '../restarter/references.js';
import { controlledBy, controllerRevisionFact, eventFactOf, lastWriteOf, objectFactOf, replicaSetFact, type ObjectFact, type RevisionFact, type WorkloadFacts } from '../explain/facts.js';

/** A short GET: the API server answers within this, or the command says it did not. */
const GET_TIMEOUT_MS = 15_000;
const PLURALS: Record<ObjectKind, string> = { ConfigMap: 'configmaps', Secret: 'secrets' };

/** `kubectl get -l`'s form of a label selector. */
export function selectorText(selector: V1LabelSelector | undefined): string {
  const parts = Object.entries(selector?.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  for (const e of selector?.matchExpressions ?? []) {
    const values = (e.values ?? []).join(',');
    if (e.operator === 'In') parts.push(`${e.key} in (${values})`);
    else if (e.operator === 'NotIn') parts.push(`${e.key} notin (${values})`);
    else if (e.operator === 'Exists') parts.push(e.key);
    else if (e.operator === 'DoesNotExist') parts.push(`!${e.key}`);
  }
  return parts.join(',');
}

function problem(what: string, err: unknown): string {
  const code = err instanceof ApiStatusError ? err.statusCode : statusCode(err);
  return `${what}: ${code === 403 ? 'forbidden to you' : errorText(err)}`;
}

/** A workload as the plugin reads it: decoded (managedFields dropped), and when its spec or metadata was last written. */
interface DecodedWorkload {
  workload: AppsWorkload;
  writtenAt?: Date;
}

function decoded(kind: AppsWorkloadKind, raw: unknown): DecodedWorkload {
  const writtenAt = lastWriteOf(jsonObjectOrUndefined(jsonObjectOrUndefined(raw)?.metadata), { subresources: false });
  return { workload: decodeWorkload(kind, raw), ...(writtenAt ? { writtenAt } : {}) };
}

/** What one namespace holds that explanations read, listed once for every workload of it. */
interface NamespaceLists {
  events: CoreV1Event[];
  pods: V1Pod[];
  controllerRevisions: V1ControllerRevision[];
  replicaSets: V1ReplicaSet[];
  problems: string[];
}

/**
 * The reads of `rollguard why` and `rollguard list`, with the user's own credentials and only
 * get and list: workloads, the metadata of the ConfigMaps and Secrets they reference (never
 * their data), Events, pods, ControllerRevisions and ReplicaSets.
 */
export class PluginReader {
  private readonly raw: RawApi;
  private readonly core: CoreV1Api;
  private readonly apps: AppsV1Api;

  constructor(kubeConfig: KubeConfig) {
    this.raw = new RawApi(kubeConfig);
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.apps = kubeConfig.makeApiClient(AppsV1Api);
  }

  /** The workload and its last write but its status's; undefined when there is none. Other failures throw: nothing can be explained without it. */
  async workload(kind: AppsWorkloadKind, namespace: string, name: string): Promise<DecodedWorkload | undefined> {
    const path = `/apis/apps/v1/namespaces/${encodeURIComponent(namespace)}/${WORKLOAD_PLURALS[kind]}/${encodeURIComponent(name)}`;
    try {
      return decoded(kind, await this.raw.getJson({ path, accept: 'application/json', timeoutMs: GET_TIMEOUT_MS }));
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Opted-in workloads (rollguard's label, and Stackable's on StatefulSets), in `namespace` or every namespace. */
  async managedWorkloads(namespace: string | undefined): Promise<({ kind: AppsWorkloadKind } & DecodedWorkload)[]> {
    const found = new Map<string, { kind: AppsWorkloadKind } & DecodedWorkload>();
    // Argo Rollouts' Rollouts are not explained yet (docs/argo-rollouts.md)
    for (const kind of APPS_WORKLOAD_KINDS) {
      const labels = kind === 'StatefulSet' ? [ENABLED_LABEL, STACKABLE_ENABLED_LABEL] : [ENABLED_LABEL];
      for (const label of labels) {
        const where = namespace === undefined ? '' : `/namespaces/${encodeURIComponent(namespace)}`;
        const path = `/apis/apps/v1${where}/${WORKLOAD_PLURALS[kind]}?${new URLSearchParams({ labelSelector: `${label}=true` })}`;
        const list = jsonObjectOrUndefined(await this.raw.getJson({ path, accept: 'application/json', timeoutMs: GET_TIMEOUT_MS }));
        for (const item of Array.isArray(list?.items) ? list.items : []) {
          const { workload, writtenAt } = decoded(kind, item);
          found.set(`${kind}/${workload.metadata?.namespace}/${workload.metadata?.name}`, { kind, workload, writtenAt });
        }
      }
    }
    return [...found.values()].sort((a, b) => `${a.workload.metadata?.namespace}/${a.kind}/${a.workload.metadata?.name}`.localeCompare(`${b.workload.metadata?.namespace}/${b.kind}/${b.workload.metadata?.name}`));
  }

  /** One object's metadata (PartialObjectMetadata: the API server sends no data). */
  async object(kind: ObjectKind, namespace: string, name: string): Promise<ObjectFact> {
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/${PLURALS[kind]}/${encodeURIComponent(name)}`;
    try {
      return objectFactOf(kind, name, await this.raw.getJson({ path, accept: PARTIAL_METADATA_ACCEPT, timeoutMs: GET_TIMEOUT_MS }));
    } catch (err) {
      if (isNotFound(err)) return { kind, name, status: 'absent' };
      return { kind, name, status: 'unreadable', error: problem(`get ${PLURALS[kind]} ${name}`, err) };
    }
  }

  /** Every object of both kinds in the namespace, metadata only; a kind whose list fails is unreadable, with why. */
  async objectsOf(namespace: string): Promise<{ found: Map<string, ObjectFact>; failed: Map<ObjectKind, string> }> {
    const found = new Map<string, ObjectFact>();
    const failed = new Map<ObjectKind, string>();
    for (const kind of ['ConfigMap', 'Secret'] as const) {
      const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/${PLURALS[kind]}`;
      try {
        const list = jsonObjectOrUndefined(await this.raw.getJson({ path, accept: PARTIAL_METADATA_LIST_ACCEPT, timeoutMs: GET_TIMEOUT_MS }));
        for (const item of Array.isArray(list?.items) ? list.items : []) {
          const name = jsonObjectOrUndefined(jsonObjectOrUndefined(item)?.metadata)?.name;
          if (typeof name === 'string') found.set(`${kind}/${name}`, objectFactOf(kind, name, item));
        }
      } catch (err) {
        failed.set(kind, problem(`list ${PLURALS[kind]}`, err));
      }
    }
    return { found, failed };
  }

  /** `selector`: the workload's pods' and revisions'; `uid`: its Events'; both omitted: all of the namespace. */
  private async namespaceLists(namespace: string, selector?: string, uid?: string): Promise<NamespaceLists> {
    const problems: string[] = [];
    const attempt = async <T>(what: string, read: () => Promise<{ items: T[] }>): Promise<T[]> => {
      try {
        return (await read()).items;
      } catch (err) {
        problems.push(problem(`list ${what}`, err));
        return [];
      }
    };
    const labelSelector = selector || undefined;
    const [events, pods, controllerRevisions, replicaSets] = await Promise.all([
      attempt('events', () => this.core.listNamespacedEvent({ namespace, fieldSelector: uid ? `involvedObject.uid=${uid}` : undefined })),
      attempt('pods', () => this.core.listNamespacedPod({ namespace, labelSelector })),
      attempt('controllerrevisions', () => this.apps.listNamespacedControllerRevision({ namespace, labelSelector })),
      attempt('replicasets', () => this.apps.listNamespacedReplicaSet({ namespace, labelSelector })),
    ]);
    return { events, pods, controllerRevisions, replicaSets, problems };
  }

  /** The facts of one workload from lists of its namespace (listed once, whatever the number of workloads). */
  static factsFrom(kind: AppsWorkloadKind, { workload, writtenAt }: DecodedWorkload, lists: NamespaceLists, objects: (kind: ObjectKind, name: string) => ObjectFact, now: Date): WorkloadFacts {
    const uid = workload.metadata?.uid;
    const namespace = workload.metadata?.namespace ?? '';
    const name = workload.metadata?.name ?? '';
    const replicaSets = kind === 'Deployment' ? lists.replicaSets.filter((rs) => controlledBy(rs.metadata, uid)) : [];
    const owners = kind === 'Deployment' ? new Set(replicaSets.map((rs) => rs.metadata?.uid)) : new Set([uid]);
    const pods = lists.pods.filter((p) => (p.metadata?.ownerReferences ?? []).some((r) => r.controller === true && owners.has(r.uid)));
    const revisions: RevisionFact[] =
      kind === 'Deployment' ? replicaSets.map(replicaSetFact) : lists.controllerRevisions.filter((cr) => controlledBy(cr.metadata, uid)).map((cr) => controllerRevisionFact(kind, cr));
    const events = lists.events.filter((e) => e.involvedObject.uid === uid || (e.involvedObject.kind === kind && e.involvedObject.name === name && !e.involvedObject.uid)).map(eventFactOf);
    const references = referencedObjects(workload.spec?.template);
    return { kind, namespace, name, workload, ...(writtenAt ? { workloadWrittenAt: writtenAt } : {}), objects: references.map((r) => objects(r.kind, r.name)), events, pods, revisions, problems: lists.problems, now };
  }

  /** Everything `rollguard why` reads about one workload. */
  async facts(kind: AppsWorkloadKind, namespace: string, name: string): Promise<WorkloadFacts> {
    const found = await this.workload(kind, namespace, name);
    if (!found) {
      return { kind, namespace, name, objects: [], events: [], pods: [], revisions: [], problems: [], now: new Date() };
    }
    const { workload } = found;
    const references = referencedObjects(workload.spec?.template);
    const [objects, lists] = await Promise.all([
      Promise.all(references.map((r) => this.object(r.kind, namespace, r.name))),
      this.namespaceLists(namespace, selectorText(workload.spec?.selector), workload.metadata?.uid),
    ]);
    const byName = new Map(objects.map((o) => [`${o.kind}/${o.name}`, o]));
    return PluginReader.factsFrom(kind, found, lists, (k, n) => byName.get(`${k}/${n}`) ?? { kind: k, name: n, status: 'absent' }, new Date());
  }

  /** The facts of every opted-in workload of `namespace` (undefined: every namespace), one set of lists per namespace. */
  async allFacts(namespace: string | undefined): Promise<WorkloadFacts[]> {
    const workloads = await this.managedWorkloads(namespace);
    const namespaces = [...new Set(workloads.map((w) => w.workload.metadata?.namespace ?? ''))];
    const out: WorkloadFacts[] = [];
    for (const ns of namespaces) {
      const [objects, lists] = await Promise.all([this.objectsOf(ns), this.namespaceLists(ns)]);
      const lookup = (kind: ObjectKind, name: string): ObjectFact => {
        const failed = objects.failed.get(kind);
        if (failed !== undefined) return { kind, name, status: 'unreadable', error: failed };
        return objects.found.get(`${kind}/${name}`) ?? { kind, name, status: 'absent' };
      };
      const now = new Date();
      for (const w of workloads.filter((x) => x.workload.metadata?.namespace === ns)) out.push(PluginReader.factsFrom(w.kind, w, lists, lookup, now));
    }
    return out;
  }
}
