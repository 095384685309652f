import type { AppsV1Api, CoreV1Api, V1StatefulSet } from '@kubernetes/client-node';
import { HANDOVER_HTTP_ANNOTATION, HANDOVER_INTERVAL_ANNOTATION, HANDOVER_TIMEOUT_ANNOTATION, PRIMARY_SELECTOR_ANNOTATION } from '../../src/handover/settings.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { statefulSet } from './cluster.js';
import { waitUntil } from './wait.js';

export const HANDOVER_REASONS = ['HandoverStarted', 'HandoverSucceeded', 'HandoverFailed', 'HandoverFallback', 'HandoverSkipped'];

/** A 3-replica health-gated set with a handover call (`POST [scheme]:port/switchover`) and a ConfigMap of its own name in its environment. */
export function handoverSet(name: string, opts: { port: number; scheme?: 'http' | 'https'; annotations?: Record<string, string> }): V1StatefulSet {
  const body = statefulSet(name, {
    replicas: 3,
    labels: { [ENABLED_LABEL]: 'true' },
    annotations: {
      [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE,
      [PRIMARY_SELECTOR_ANNOTATION]: 'role=primary',
      [HANDOVER_HTTP_ANNOTATION]: `POST ${opts.scheme === 'https' ? 'https' : ''}:${opts.port}/switchover`,
      [HANDOVER_INTERVAL_ANNOTATION]: '1s',
      [HANDOVER_TIMEOUT_ANNOTATION]: '5s',
      ...opts.annotations,
    },
  });
  body.spec!.podManagementPolicy = 'Parallel';
  body.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name } }];
  return body;
}

/** Waits until every pod of the 3-replica set is updated and Ready and the partition is back at replicas. */
export async function setAtRest(apps: AppsV1Api, namespace: string, name: string, timeoutMs = 90_000): Promise<void> {
  await waitUntil(
    `${name} at rest: every pod updated and Ready, partition back at replicas`,
    async () => {
      const set = await apps.readNamespacedStatefulSet({ name, namespace });
      const s = set.status;
      const partition = set.spec?.updateStrategy?.rollingUpdate?.partition;
      const ok =
        s?.observedGeneration === set.metadata?.generation &&
        s?.updateRevision === s?.currentRevision &&
        s?.readyReplicas === 3 &&
        s?.updatedReplicas === 3 &&
        partition === 3;
      return ok || `partition ${partition}, ready ${s?.readyReplicas}, updated ${s?.updatedReplicas}, ${s?.currentRevision} → ${s?.updateRevision}`;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

/** rollguard's Events on the set, in the order they were made (Event names end in the time in hex). */
export async function rollguardEvents(core: CoreV1Api, namespace: string, name: string): Promise<{ reason: string; message: string; type: string; count: number }[]> {
  const list = await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name},involvedObject.kind=StatefulSet` });
  return list.items
    .filter((e) => e.source?.component === 'rollguard')
    .sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : 1))
    .map((e) => ({ reason: e.reason ?? '', message: e.message ?? '', type: e.type ?? '', count: e.count ?? 1 }));
}
