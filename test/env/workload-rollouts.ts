import type { AppsV1Api, V1DaemonSet, V1Deployment, V1StatefulSet } from '@kubernetes/client-node';
import type { AppsWorkloadKind as WorkloadKind } from '../../src/kube/workloads.js';
import { waitFor } from './wait.js';

export type AnyWorkload = V1StatefulSet | V1Deployment | V1DaemonSet;

/** The apps/v1 calls of one kind, so that a test reads the same for each. */
export interface WorkloadApi {
  kind: WorkloadKind;
  create(namespace: string, body: AnyWorkload): Promise<AnyWorkload>;
  read(namespace: string, name: string): Promise<AnyWorkload>;
  replace(namespace: string, name: string, body: AnyWorkload): Promise<AnyWorkload>;
}

export function workloadApi(apps: AppsV1Api, kind: WorkloadKind): WorkloadApi {
  switch (kind) {
    case 'StatefulSet':
      return {
        kind,
        create: (namespace, body) => apps.createNamespacedStatefulSet({ namespace, body: body as V1StatefulSet }),
        read: (namespace, name) => apps.readNamespacedStatefulSet({ namespace, name }),
        replace: (namespace, name, body) => apps.replaceNamespacedStatefulSet({ namespace, name, body: body as V1StatefulSet }),
      };
    case 'Deployment':
      return {
        kind,
        create: (namespace, body) => apps.createNamespacedDeployment({ namespace, body: body as V1Deployment }),
        read: (namespace, name) => apps.readNamespacedDeployment({ namespace, name }),
        replace: (namespace, name, body) => apps.replaceNamespacedDeployment({ namespace, name, body: body as V1Deployment }),
      };
    case 'DaemonSet':
      return {
        kind,
        create: (namespace, body) => apps.createNamespacedDaemonSet({ namespace, body: body as V1DaemonSet }),
        read: (namespace, name) => apps.readNamespacedDaemonSet({ namespace, name }),
        replace: (namespace, name, body) => apps.replaceNamespacedDaemonSet({ namespace, name, body: body as V1DaemonSet }),
      };
  }
}

/** Whether the kind's controller has seen the workload's generation and every pod of it is updated and Ready; else what it shows. */
function rolledOut(kind: WorkloadKind, w: AnyWorkload): true | string {
  const generation = w.metadata?.generation;
  if (kind === 'DaemonSet') {
    const st = (w as V1DaemonSet).status;
    const want = st?.desiredNumberScheduled ?? 0;
    const done = st?.observedGeneration === generation && want > 0 && st?.numberReady === want && st?.updatedNumberScheduled === want && st?.numberUnavailable === undefined;
    return done || `generation ${generation}, status ${JSON.stringify(st)}`;
  }
  if (kind === 'Deployment') {
    const d = w as V1Deployment;
    const want = d.spec?.replicas ?? 1;
    const st = d.status;
    const done = st?.observedGeneration === generation && st?.readyReplicas === want && st?.updatedReplicas === want && st?.replicas === want;
    return done || `generation ${generation}, status ${JSON.stringify(st)}`;
  }
  const s = w as V1StatefulSet;
  const st = s.status;
  const done =
    st?.observedGeneration === generation && st?.readyReplicas === s.spec?.replicas && st?.updatedReplicas === s.spec?.replicas && st?.currentRevision === st?.updateRevision;
  return done || `generation ${generation}, status ${JSON.stringify(st)}`;
}

/** Waits until every pod of the workload is updated and Ready (at `generation`, when given), and returns it. */
export async function rolledOutWorkload(api: WorkloadApi, namespace: string, name: string, generation?: number): Promise<AnyWorkload> {
  return waitFor(`${api.kind} ${namespace}/${name} rolled out and Ready${generation ? ` at generation ${generation}` : ''}`, async () => {
    const w = await api.read(namespace, name);
    const done = rolledOut(api.kind, w);
    if (done === true && (generation === undefined || w.metadata?.generation === generation)) return w;
    throw new Error(done === true ? `generation ${w.metadata?.generation}` : done);
  }, { timeoutMs: 60_000 });
}

/**
 * What a user counts as the rollouts of a workload: its ReplicaSets (Deployment), its
 * ControllerRevisions (DaemonSet, StatefulSet); each template the controller ever ran has one.
 */
export async function rolloutsOf(apps: AppsV1Api, kind: WorkloadKind, namespace: string, uid: string): Promise<number> {
  const owned = (items: { metadata?: { ownerReferences?: { uid: string }[] } }[]): number =>
    items.filter((i) => i.metadata?.ownerReferences?.some((o) => o.uid === uid)).length;
  if (kind === 'Deployment') return owned((await apps.listNamespacedReplicaSet({ namespace })).items);
  return owned((await apps.listNamespacedControllerRevision({ namespace })).items);
}
