import https from 'node:https';
import { Watch, type KubeConfig, type V1ObjectMeta, type V1PodTemplateSpec } from '@kubernetes/client-node';
import type { WorkloadKind } from '../../src/kube/workloads.js';
import { WORKLOAD_PLURALS } from '../../src/kube/workloads.js';
import { isRollguardAnnotation } from '../../src/restarter/annotations.js';
import type { ObjectKind } from './universe.js';

// Every state of every ConfigMap, Secret and workload of the model's namespaces, from watches:
// the checker's record of what happened, read back from the API server.

/** One version of a ConfigMap or Secret; `data` undefined: deleted at this resourceVersion. */
export interface ObjectVersionRecord {
  namespace: string;
  kind: ObjectKind;
  name: string;
  uid: string;
  resourceVersion: string;
  data: Record<string, string> | undefined;
}

/** One state of a workload as a watch delivered it. */
export interface WorkloadState {
  resourceVersion: string;
  generation: number;
  template: V1PodTemplateSpec | undefined;
  /** JSON of the template, to tell a template change from a metadata write */
  templateText: string;
  /** rollguard's template annotations */
  values: Record<string, string>;
  annotations: Record<string, string>;
  deleted: boolean;
  /** the watch restarted from a list before this state: states between may be missing */
  afterGap: boolean;
}

export interface WorkloadHistory {
  kind: WorkloadKind;
  namespace: string;
  name: string;
  uid: string;
  states: WorkloadState[];
}

interface RawObject {
  metadata?: V1ObjectMeta;
  data?: Record<string, string>;
  spec?: { template?: V1PodTemplateSpec };
}

type Resource = { group: 'core'; kind: ObjectKind } | { group: 'apps'; kind: WorkloadKind };

const RESOURCES: Resource[] = [
  { group: 'core', kind: 'ConfigMap' },
  { group: 'core', kind: 'Secret' },
  { group: 'apps', kind: 'StatefulSet' },
  { group: 'apps', kind: 'Deployment' },
  { group: 'apps', kind: 'DaemonSet' },
];

function pathOf(r: Resource, namespace: string): string {
  if (r.group === 'core') return `/api/v1/namespaces/${namespace}/${r.kind === 'ConfigMap' ? 'configmaps' : 'secrets'}`;
  return `/apis/apps/v1/namespaces/${namespace}/${WORKLOAD_PLURALS[r.kind]}`;
}

function decodedData(kind: ObjectKind, data: Record<string, string> | undefined): Record<string, string> {
  if (kind === 'ConfigMap') return { ...(data ?? {}) };
  return Object.fromEntries(Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
}

export class Recorder {
  /** `uid/resourceVersion` → the version */
  readonly versions = new Map<string, ObjectVersionRecord>();
  /** `namespace/Kind/name` → its versions in order */
  readonly objectHistory = new Map<string, ObjectVersionRecord[]>();
  /** uid → history */
  readonly workloads = new Map<string, WorkloadHistory>();
  private readonly controllers: AbortController[] = [];
  private stopped = false;
  gaps = 0;

  constructor(
    private readonly kc: KubeConfig,
    private readonly namespaces: readonly string[],
  ) {}

  async start(): Promise<void> {
    for (const ns of this.namespaces) for (const r of RESOURCES) await this.watch(r, ns, undefined);
  }

  stop(): void {
    this.stopped = true;
    for (const c of this.controllers) c.abort();
  }

  /** The object's latest version seen (deleted: data undefined), or undefined if never seen. */
  current(namespace: string, kind: ObjectKind, name: string): ObjectVersionRecord | undefined {
    return this.objectHistory.get(`${namespace}/${kind}/${name}`)?.at(-1);
  }

  private recordObject(kind: ObjectKind, obj: RawObject, deleted: boolean): void {
    const m = obj.metadata ?? {};
    const rec: ObjectVersionRecord = {
      namespace: m.namespace ?? '',
      kind,
      name: m.name ?? '',
      uid: m.uid ?? '',
      resourceVersion: m.resourceVersion ?? '',
      data: deleted ? undefined : decodedData(kind, obj.data),
    };
    if (!deleted) this.versions.set(`${rec.uid}/${rec.resourceVersion}`, rec);
    const key = `${rec.namespace}/${kind}/${rec.name}`;
    const list = this.objectHistory.get(key) ?? [];
    const last = list.at(-1);
    if (last && last.uid === rec.uid && last.resourceVersion === rec.resourceVersion && (last.data === undefined) === deleted) return;
    list.push(rec);
    this.objectHistory.set(key, list);
  }

  private recordWorkload(kind: WorkloadKind, obj: RawObject, deleted: boolean, afterGap: boolean): void {
    const m = obj.metadata ?? {};
    const uid = m.uid ?? '';
    const history = this.workloads.get(uid) ?? { kind, namespace: m.namespace ?? '', name: m.name ?? '', uid, states: [] };
    this.workloads.set(uid, history);
    const template = obj.spec?.template;
    const last = history.states.at(-1);
    if (last && last.resourceVersion === m.resourceVersion && last.deleted === deleted) return;
    history.states.push({
      resourceVersion: m.resourceVersion ?? '',
      generation: m.generation ?? 0,
      template,
      templateText: JSON.stringify(template ?? null),
      values: Object.fromEntries(Object.entries(template?.metadata?.annotations ?? {}).filter(([k]) => isRollguardAnnotation(k))),
      annotations: { ...(m.annotations ?? {}) },
      deleted,
      afterGap,
    });
  }

  private record(r: Resource, obj: RawObject, deleted: boolean, afterGap: boolean): void {
    if (r.group === 'core') this.recordObject(r.kind, obj, deleted);
    else this.recordWorkload(r.kind, obj, deleted, afterGap);
  }

  /** A list (first, or after a 410), then a watch from its resourceVersion, restarted whenever it ends. */
  private async watch(r: Resource, namespace: string, from: string | undefined): Promise<void> {
    if (this.stopped) return;
    let resourceVersion = from;
    let afterGap = false;
    if (resourceVersion === undefined) {
      const listed = await this.list(r, namespace);
      for (const item of listed.items) this.record(r, item, false, from !== undefined);
      resourceVersion = listed.resourceVersion;
    }
    const controller = new AbortController();
    this.controllers.push(controller);
    let last = resourceVersion;
    let expired = false;
    const restart = (): void => {
      if (this.stopped) return;
      setTimeout(() => {
        if (expired) {
          this.gaps++;
          afterGap = true;
          void this.relist(r, namespace).catch(() => restart());
        } else void this.watch(r, namespace, last).catch(() => setTimeout(() => void this.watch(r, namespace, last).catch(() => undefined), 500));
      }, 200);
    };
    try {
      const c = await new Watch(this.kc).watch(
        pathOf(r, namespace),
        { resourceVersion: last, allowWatchBookmarks: true },
        (phase: string, obj: RawObject & { code?: number }) => {
          if (phase === 'ERROR') {
            if (obj.code === 410) expired = true;
            return;
          }
          last = obj.metadata?.resourceVersion ?? last;
          if (phase === 'BOOKMARK') return;
          this.record(r, obj, phase === 'DELETED', afterGap);
          afterGap = false;
        },
        () => restart(),
      );
      controller.signal.addEventListener('abort', () => c.abort());
    } catch {
      restart();
    }
  }

  private async relist(r: Resource, namespace: string): Promise<void> {
    const listed = await this.list(r, namespace);
    for (const item of listed.items) this.record(r, item, false, true);
    await this.watch(r, namespace, listed.resourceVersion);
  }

  private async list(r: Resource, namespace: string): Promise<{ items: RawObject[]; resourceVersion: string }> {
    const cluster = this.kc.getCurrentCluster();
    if (!cluster) throw new Error('no current cluster');
    const reqOpts: https.RequestOptions = {};
    await this.kc.applyToHTTPSOptions(reqOpts);
    const body = await new Promise<string>((resolve, reject) => {
      https
        .get(`${cluster.server}${pathOf(r, namespace)}`, reqOpts, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(chunks).toString('utf8')) : reject(new Error(`list ${pathOf(r, namespace)}: HTTP ${res.statusCode}`))));
        })
        .on('error', reject);
    });
    const parsed = JSON.parse(body) as { items?: RawObject[]; metadata?: { resourceVersion?: string } };
    return { items: parsed.items ?? [], resourceVersion: parsed.metadata?.resourceVersion ?? '' };
  }
}
