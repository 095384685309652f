import { Watch, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor } from '../env/wait.js';

// The foundation every other test stands on: a real API server and a real StatefulSet
// controller, with the fake kubelet making pods Ready.
describe('test control plane', () => {
  const { kc, core, apps } = testCluster();
  let namespace: string;
  let kubelet: FakeKubelet;

  beforeAll(async () => {
    namespace = await createNamespace(core, 'foundation');
    kubelet = new FakeKubelet(kc, namespace).start();
  });
  afterAll(async () => {
    await kubelet?.stop();
    await core.deleteNamespace({ name: namespace });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('serves a real kube-apiserver', async () => {
    const version = await fetchVersion(kc.getCurrentCluster()!.server, kc);
    expect(version).toMatch(/^v1\.\d+\.\d+$/);
  });

  it('runs a 3-replica StatefulSet to three Ready pods on the update revision', async () => {
    await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('web', { replicas: 3 }) });
    const set = await waitFor('web to have 3 ready replicas', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace });
      if (s.status?.readyReplicas === 3 && s.status.updateRevision) return s;
      throw new Error(`status ${JSON.stringify(s.status)}; kubelet error: ${String(kubelet.lastError)}`);
    });
    const pods = (await core.listNamespacedPod({ namespace, labelSelector: 'app=web' })).items;
    expect(pods.map((p) => p.metadata!.name).sort()).toEqual(['web-0', 'web-1', 'web-2']);
    for (const pod of pods) {
      expect(pod.metadata!.labels!['controller-revision-hash']).toBe(set.status!.updateRevision);
    }
  });

  it('rolls a template change from ordinal 2 down to 0', async () => {
    const before = await apps.readNamespacedStatefulSet({ name: 'web', namespace });
    const oldRevision = before.status!.updateRevision!;
    // the order the API server stored the new pods in, from a watch: polling the list saw two
    // pods replaced between polls on a loaded machine and read them in name order
    const order: string[] = [];
    const watching = await new Watch(kc).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      { labelSelector: 'app=web' },
      (_phase, pod: V1Pod) => {
        const name = pod.metadata?.name ?? '';
        const revision = pod.metadata?.labels?.['controller-revision-hash'];
        if (revision !== undefined && revision !== oldRevision && !order.includes(name)) order.push(name);
      },
      () => undefined,
    );
    try {
      await apps.patchNamespacedStatefulSet({
        name: 'web',
        namespace,
        body: [{ op: 'add', path: '/spec/template/metadata/annotations', value: { change: '1' } }],
      });
      await waitFor('every pod on the new revision', async () => {
        const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace });
        const rev = s.status?.updateRevision;
        if (!rev || rev === oldRevision) return undefined;
        return order.length === 3 && s.status?.readyReplicas === 3 && s.status.currentRevision === rev ? true : undefined;
      }, { timeoutMs: 60_000, intervalMs: 50 });
    } finally {
      watching.abort();
    }
    expect(order).toEqual(['web-2', 'web-1', 'web-0']);
  });
});

async function fetchVersion(server: string, kc: ReturnType<typeof testCluster>['kc']): Promise<string> {
  const { VersionApi } = await import('@kubernetes/client-node');
  const info = await kc.makeApiClient(VersionApi).getCode();
  expect(server).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
  return info.gitVersion;
}
