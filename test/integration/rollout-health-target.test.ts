import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventRecorder } from '../../src/kube/events.js';
import { createMetrics } from '../../src/metrics.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { createRolloutController } from '../../src/rollout/controller.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE, HEALTH_URL_ANNOTATION } from '../../src/rollout/decision.js';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor } from '../env/wait.js';

const { kc, core, apps } = testCluster();
const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'silent' });

// No confused deputy: a health URL is a setting anyone who edits the StatefulSet writes, and
// its outcome lands in an Event anyone in the namespace reads. The rollout controller runs
// against the real API server; each set names another target and the Events tell what
// rollguard did with it. The fake kubelet records 127.0.0.1 as every pod's IP.
describe('health URL targets (rollout controller against a real control plane)', () => {
  let namespace: string;
  let foreign: string;
  let kubelet: FakeKubelet;
  let server: http.Server;
  let port: number;
  let requests = 0;
  const stop = new AbortController();
  let stopped: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    namespace = await createNamespace(core, 'health-target');
    foreign = await createNamespace(core, 'health-foreign');
    kubelet = new FakeKubelet(kc, namespace).start();
    server = http.createServer((_req, res) => {
      requests++;
      res.writeHead(200).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
    const service = (name: string) => ({ metadata: { name }, spec: { selector: { app: name }, ports: [{ port: 80, targetPort: port }] } });
    await core.createNamespacedService({ namespace, body: service('own') });
    await core.createNamespacedService({ namespace: foreign, body: service('admin') });
    await core.createNamespacedService({ namespace, body: { metadata: { name: 'away' }, spec: { type: 'ExternalName', externalName: 'example.com' } } });

    const controller = createRolloutController({
      kubeConfig: kc,
      namespaces: [namespace],
      minStepIntervalMs: 0,
      defaultMinReadySeconds: 0,
      blockedReportAfterMs: 0,
      blockedRecheckMs: 300,
      healthCheckTimeoutMs: 500,
      logger,
      metrics: createMetrics(new Registry()),
      events: new EventRecorder({ kubeConfig: kc, component: 'rollguard', instance: 'health-target-test', logger }),
    });
    await controller.start(stop.signal);
    stopped = () => controller.stopped();
  });

  afterAll(async () => {
    stop.abort();
    await stopped?.();
    await kubelet?.stop();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    for (const name of [namespace, foreign]) if (name) await core.deleteNamespace({ name }).catch(() => undefined);
  });

  /** A one-pod gated set with `url`, at rest, then a template change: the step asks the health URL. */
  async function rollWith(name: string, url: string): Promise<void> {
    const body = statefulSet(name, {
      replicas: 1,
      labels: { [ENABLED_LABEL]: 'true' },
      annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE, [HEALTH_URL_ANNOTATION]: url },
    });
    body.spec!.podManagementPolicy = 'Parallel';
    await apps.createNamespacedStatefulSet({ namespace, body });
    await waitFor(`${name} at rest, partition held at 1`, async () => {
      const set = await apps.readNamespacedStatefulSet({ name, namespace });
      return set.spec?.updateStrategy?.rollingUpdate?.partition === 1 && set.status?.readyReplicas === 1 ? true : undefined;
    });
    await apps.patchNamespacedStatefulSet({
      name,
      namespace,
      body: [{ op: 'add', path: '/spec/template/metadata/annotations', value: { 'example.com/config': 'v2' } }],
    });
  }

  async function eventOf(name: string, reason: string): Promise<string> {
    return waitFor(`a ${reason} Event of ${name}`, async () => {
      const list = await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name}` });
      return list.items.find((e) => e.reason === reason)?.message;
    });
  }

  it('refuses the cloud metadata address, saying why, and never connects', async () => {
    printControlPlaneLogsOnFailure();
    await rollWith('meta', 'http://169.254.169.254/latest/meta-data/');
    expect(await eventOf('meta', 'RolloutBlocked')).toBe(
      'Rollout blocked at partition 1: health check http://169.254.169.254/latest/meta-data/ failed ' +
        '(refused: 169.254.169.254 is a link-local or cloud metadata address), pod meta-0 not replaced',
    );
  });

  it("refuses a Service of another namespace and an ExternalName Service of the set's own", async () => {
    printControlPlaneLogsOnFailure();
    const before = requests;
    await rollWith('cross', `http://admin.${foreign}.svc.cluster.local/`);
    await rollWith('external', `http://away.${namespace}.svc/`);
    expect(await eventOf('cross', 'RolloutBlocked')).toContain(
      `(refused: admin.${foreign}.svc.cluster.local is in namespace ${foreign}, not ${namespace}: only the workload's own namespace may be called)`,
    );
    expect(await eventOf('external', 'RolloutBlocked')).toContain('(refused: Service away is of type ExternalName: it leads outside the namespace)');
    expect(requests).toBe(before);
  });

  it("resolves the set's own Service through the API to its ClusterIP and connects there", async () => {
    printControlPlaneLogsOnFailure();
    const own = await core.readNamespacedService({ name: 'own', namespace });
    // no kube-proxy in the test control plane: the ClusterIP answers nothing, and the Event shows it was the one dialled
    await rollWith('svc', `http://own.${namespace}.svc:80/healthz`);
    const message = await eventOf('svc', 'RolloutBlocked');
    expect(message).toContain(`from Service own at ${own.spec!.clusterIP}`);
    expect(message).not.toContain('refused');
  });

  it('steps when a pod of the set, by name, answers at its recorded IP', async () => {
    printControlPlaneLogsOnFailure();
    const before = requests;
    await rollWith('pod', `http://pod-0:${port}/healthz`);
    expect(await eventOf('pod', 'PartitionUpdate')).toContain(`health check passed (HTTP 200 OK from pod pod-0 at 127.0.0.1)`);
    expect(requests).toBeGreaterThan(before);
  });
});
