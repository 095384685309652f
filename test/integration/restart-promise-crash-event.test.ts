import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CoreV1Event } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { WORKLOAD_PLURALS, type AppsWorkloadKind } from '../../src/kube/workloads.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { EVENT_DUE_ANNOTATION } from '../../src/restarter/event-due.js';
import { createNamespace, daemonSet, deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { endsWithVersion } from '../env/event-text.js';
import { startRequestProxy, kubeconfigThroughRequestProxy, type RequestProxy } from '../env/request-proxy.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { serviceAccountCredentials, type ServiceAccountCredentials } from '../env/service-account.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { workloadApi, type AnyWorkload } from '../env/workload-rollouts.js';

// An Event for every rollout rollguard made, also when the process died after its template write
// landed and before the Event did. A proxy that sees each request stands between rollguard and
// the API server: once the PATCH of the set has been answered, it holds rollguard's POST of the
// Event (never forwarded), and the process is SIGKILLed with the write stored and no Event. The
// next rollguard must tell it: reason and message naming the object and both versions, once,
// with no rollout of its own; a third start tells nothing again.

const { kc, core, apps } = testCluster();
const KINDS: readonly AppsWorkloadKind[] = ['StatefulSet', 'Deployment', 'DaemonSet'];
const LEASE_ARGS = ['--shutdown-delay=0s', '--lease-duration=3s', '--renew-deadline=2s', '--retry-period=300ms'];

describe('the Event of a rollout whose process died between the write and the Event', () => {
  let ns: string;
  let own: string;
  let account: ServiceAccountCredentials;
  let proxy: RequestProxy & { caPem: string };
  let viaProxy: string;
  const processes: RollguardProcess[] = [];

  async function start(name: string): Promise<RollguardProcess> {
    const proc = await startRollguardProcess({
      name,
      kubeconfigPath: viaProxy,
      // the loop alone writes: every template write here is one it decided and must explain
      args: [`--namespace=${own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', '--lease-name=crash-event', ...LEASE_ARGS],
    });
    processes.push(proc);
    await proc.waitReady();
    return proc;
  }

  /** Leading, its first pass made, and nothing queued or in flight. */
  async function idle(proc: RollguardProcess): Promise<void> {
    await waitUntil(`${proc.name} leads and is idle after its first pass`, async () => {
      const passed = proc.logLines().some((l) => l.msg === 'caches synced; reconciling every labelled StatefulSet, Deployment and DaemonSet');
      const s = (await proc.status()) as { leader: { leader: boolean }; reconcile: { queued: number; in_flight: number } };
      return (passed && s.leader.leader && s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || `first pass ${passed}, ${JSON.stringify(s)}`;
    });
  }

  const eventsAbout = async (kind: AppsWorkloadKind, name: string): Promise<CoreV1Event[]> =>
    (await core.listNamespacedEvent({ namespace: ns, fieldSelector: `involvedObject.name=${name},involvedObject.kind=${kind}` })).items.filter((e) => e.source?.component === 'rollguard');

  function manifest(kind: AppsWorkloadKind, name: string, configMap: string): AnyWorkload {
    const labels = { [ENABLED_LABEL]: 'true' };
    const w: AnyWorkload = kind === 'StatefulSet' ? statefulSet(name, { replicas: 0, labels }) : kind === 'Deployment' ? deployment(name, { replicas: 0, labels }) : daemonSet(name, { labels });
    w.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: configMap } }];
    return w;
  }

  beforeAll(async () => {
    ns = await createNamespace(core, 'crash-event');
    own = await createNamespace(core, 'crash-event-rg');
    account = await serviceAccountCredentials(kc, own, 'rollguard');
    const cluster = kc.getCurrentCluster()!;
    const caPem = cluster.caData ? Buffer.from(cluster.caData, 'base64').toString('utf8') : fs.readFileSync(cluster.caFile!, 'utf8');
    proxy = await startRequestProxy({ url: cluster.server, caPem });
    viaProxy = kubeconfigThroughRequestProxy(proxy, account.kubeconfigPath, fs.mkdtempSync(path.join(os.tmpdir(), 'crash-event-')));
  });
  afterAll(async () => {
    for (const p of processes) await p.kill();
    await proxy?.close();
    await account?.remove();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deleteNamespace({ name: own }).catch(() => undefined);
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(processes, 40);
  });

  it.each(KINDS)('%s: the next rollguard tells it, once, and rolls nothing', async (kind) => {
    const name = `${kind.toLowerCase()}-web`;
    const config = `${name}-config`;
    const api = workloadApi(apps, kind);
    const key = annotationKey('ConfigMap', config);
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: config }, data: { v: '0' } } });
    await api.create(ns, manifest(kind, name, config));

    const first = await start(`${name}-1`);
    // the loop annotates the new set (ReferencesAnnotated), with its Event, and has nothing left to do
    await waitFor(`${kind} ${name} annotated`, async () => ((await api.read(ns, name)).spec?.template.metadata?.annotations?.[key] ? true : undefined));
    await idle(first);

    const setPath = `/apis/apps/v1/namespaces/${ns}/${WORKLOAD_PLURALS[kind]}/${name}`;
    const armedAt = proxy.answered().length;
    proxy.holdWhen(
      (r, answered) =>
        r.method === 'POST' && r.path.startsWith(`/api/v1/namespaces/${ns}/events`) && answered.slice(armedAt).some((a) => a.method === 'PATCH' && a.path.startsWith(setPath) && a.status === 200),
    );
    const cm = await core.patchNamespacedConfigMap({ name: config, namespace: ns, body: [{ op: 'replace', path: '/data/v', value: '1' }] });
    const rv = cm.metadata!.resourceVersion!;
    await waitUntil('the template write landed and its Event is held', async () => {
      const at = (await api.read(ns, name)).spec?.template.metadata?.annotations?.[key];
      return (at?.endsWith(`/${rv}`) && proxy.held().length > 0) || `template at ${at}, held ${JSON.stringify(proxy.held())}`;
    });
    await first.kill();
    proxy.release();
    const written = await api.read(ns, name);
    const naming = (events: CoreV1Event[]): CoreV1Event[] => events.filter((e) => e.reason === 'ConfigChanged' && endsWithVersion(e.message, rv));
    expect(naming(await eventsAbout(kind, name)), 'no Event before the next rollguard').toEqual([]);

    const second = await start(`${name}-2`);
    const told = await waitFor('the ConfigChanged Event from the next rollguard', async () => {
      const found = naming(await eventsAbout(kind, name));
      return found.length > 0 ? found : undefined;
    });
    await idle(second);
    expect(told).toHaveLength(1);
    expect(told[0]!.type).toBe('Normal');
    expect(told[0]!.count ?? 1).toBe(1);
    expect(told[0]!.involvedObject.uid).toBe(written.metadata!.uid);
    expect(told[0]!.message).toContain(`ConfigMap ${config}`);
    expect(told[0]!.message).toMatch(new RegExp(`resourceVersion \\d+ → ${rv}`));
    const after = await api.read(ns, name);
    // no rollout of its own: the template as the first process wrote it, no new generation
    expect(after.spec?.template).toEqual(written.spec?.template);
    expect(after.metadata?.generation).toBe(written.metadata?.generation);
    // the mark removed where that is no generation; a Deployment's stays until its next template write
    expect(after.metadata?.annotations?.[EVENT_DUE_ANNOTATION] === undefined).toBe(kind !== 'Deployment');

    // another start (a new leader) tells nothing again
    await second.kill();
    const third = await start(`${name}-3`);
    await idle(third);
    const again = naming(await eventsAbout(kind, name));
    expect(again.map((e) => [e.metadata?.name, e.count ?? 1])).toEqual([[told[0]!.metadata?.name, 1]]);
    expect((await api.read(ns, name)).metadata?.generation).toBe(written.metadata?.generation);
    await third.kill();
  });
});
