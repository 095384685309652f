import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AdmissionregistrationV1Api, KubeConfig, type V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startFaultProxy, type FaultProxy } from '../env/fault-proxy.js';
import { freePort } from '../env/ports.js';
import { startRollguardProcess, printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import {
  apiServerWebhookMetric,
  eventsAdded,
  rollguardEvents,
  rolloutCounts,
  watchTemplateAnnotations,
  type TemplateHistory,
} from '../env/rollouts.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { ABSENT, ENABLED_LABEL, RESTART_REASON_ANNOTATION, annotationKey } from '../../src/restarter/annotations.js';
import { endsWithVersion } from '../env/event-text.js';

const ARGS = ['--shutdown-delay=0s', '--lease-duration=4s', '--renew-deadline=3s', '--retry-period=500ms', '--debounce=4s'];
const SET = 'web';
/** `app` changes, `recreated` is deleted and created again, `late` appears: each while the lagging replica sees none of it. */
const APP = 'app';
const RECREATED = 'recreated';
const LATE = 'late';
const SENTINEL = 'sentinel';
const key = (name: string): string => annotationKey('ConfigMap', name);

type Status = {
  identity: string;
  ready: boolean;
  leader: { leader: boolean; holder?: string };
  reconcile: { in_flight: number; queued: number };
  caches: Record<string, { synced: boolean; objects: number }>;
};

/** The control plane's kubeconfig with the server replaced by the proxy's URL. */
function kubeconfigThrough(kc: KubeConfig, url: string): string {
  const copy = new KubeConfig();
  copy.loadFromOptions({
    clusters: kc.clusters.map((c) => ({ ...c, server: url })),
    users: kc.users,
    contexts: kc.contexts,
    currentContext: kc.currentContext,
  });
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-lagging-')), 'kubeconfig');
  fs.writeFileSync(file, copy.exportConfig());
  return file;
}

// Injected: every byte between one replica and the API server held (a loopback proxy frozen), so
// its caches lag, while the API server calls that replica's webhook for every write of the set.
describe('a replica whose caches lag admits the writes', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  const suffix = Math.random().toString(36).slice(2, 8);
  const configuration = `faults-lagging-${suffix}`;
  const webhookName = `lagging-${suffix}.rollguard.io`;
  let rollguardNamespace: string;
  let workloads: string;
  let proxy: FaultProxy | undefined;
  const admissionApi = kc.makeApiClient(AdmissionregistrationV1Api);
  let history: TemplateHistory | undefined;
  const everyProcess: RollguardProcess[] = [];

  async function start(name: string, kubeconfig: string, webhookPort?: number): Promise<RollguardProcess> {
    const proc = await startRollguardProcess({
      name,
      kubeconfigPath: kubeconfig,
      webhookPort,
      args: [
        `--namespace=${rollguardNamespace}`,
        `--watch-namespaces=${workloads}`,
        `--webhook-configuration=${configuration}`,
        '--tls-secret=lagging-tls',
        '--lease-name=faults-lagging',
        ...ARGS,
      ],
    });
    everyProcess.push(proc);
    return proc;
  }
  const status = async (proc: RollguardProcess): Promise<Status> => (await proc.status()) as unknown as Status;
  const readSet = (): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name: SET, namespace: workloads });
  const annotations = async (): Promise<Record<string, string>> => (await readSet()).spec?.template.metadata?.annotations ?? {};
  const versionOf = async (name: string): Promise<string> => {
    const cm = await core.readNamespacedConfigMap({ name, namespace: workloads });
    return `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
  };
  const setApp = async (value: string): Promise<string> => {
    const cm = await core.patchNamespacedConfigMap({ name: APP, namespace: workloads, body: [{ op: 'replace', path: '/data/v', value }] });
    return `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
  };
  async function templateCarries(name: string, value: string): Promise<void> {
    await waitUntil(`the template to carry ${name}=${value}`, async () => {
      const now = (await annotations())[key(name)];
      return now === value || `${key(name)}=${now}`;
    });
  }
  /** An owner's change of the template (an env var), written through the lagging replica's webhook. */
  /**
   * The owner's write, returned once the StatefulSet controller has observed it: two template
   * writes it has not seen apart make one ControllerRevision, and the revisions are counted.
   */
  async function ownerTemplateChange(value: string): Promise<V1StatefulSet> {
    const written = await apps.patchNamespacedStatefulSet({
      name: SET,
      namespace: workloads,
      body: [{ op: 'add', path: '/spec/template/spec/containers/0/env', value: [{ name: 'OWNER', value }] }],
    });
    const generation = written.metadata?.generation ?? 0;
    await waitUntil(`the StatefulSet controller to observe generation ${generation}`, async () => {
      const observed = (await readSet()).status?.observedGeneration ?? 0;
      return observed >= generation || `observed ${observed}`;
    });
    return written;
  }
  const configMapsSeenBy = async (proc: RollguardProcess): Promise<number> => (await status(proc)).caches.ConfigMap?.objects ?? -1;

  beforeAll(async () => {
    rollguardNamespace = await createNamespace(core, 'faults-lag-rg');
    workloads = await createNamespace(core, 'faults-lag-wl');
    for (const name of [APP, RECREATED]) await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name }, data: { v: '0' } } });
  });

  afterAll(async () => {
    history?.stop();
    for (const proc of everyProcess) await proc.kill();
    await proxy?.close();
    await admissionApi.deleteMutatingWebhookConfiguration({ name: configuration }).catch(() => undefined);
    for (const ns of [workloads, rollguardNamespace]) if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(everyProcess);
  });

  it('never moves an annotation backwards and rolls once per change', { timeout: 180_000 }, async () => {
    // the API server calls the lagging replica, and fails the write if it does not answer
    const lagPort = await freePort();
    // a webhook name of its own: the API server's metrics are labelled by it
    await admissionApi.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: configuration },
        webhooks: [
          {
            name: webhookName,
            clientConfig: { url: `https://127.0.0.1:${lagPort}/mutate` },
            rules: [{ operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: ['statefulsets'] }],
            objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } },
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': workloads } },
            failurePolicy: 'Fail',
            sideEffects: 'None',
            reinvocationPolicy: 'IfNeeded',
            admissionReviewVersions: ['v1'],
            timeoutSeconds: 5,
          },
        ],
      },
    });
    const leader = await start('leader', kubeconfigPath);
    await leader.waitReady();
    await waitUntil('leader to lead', async () => (await status(leader)).leader.leader);
    const server = new URL(kc.getCurrentCluster()!.server);
    proxy = await startFaultProxy({ host: server.hostname, port: Number(server.port) });
    const lagging = await start('lagging', kubeconfigThrough(kc, proxy.url), lagPort);
    await lagging.waitReady();
    await waitUntil('lagging to see the leader', async () => (await status(lagging)).leader.holder === (await status(leader)).identity);
    expect((await status(lagging)).leader.leader).toBe(false);

    // created through the lagging replica's webhook while it is still fresh: annotated at admission
    const body = statefulSet(SET, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    body.spec!.template.spec!.containers[0]!.envFrom = [APP, RECREATED, LATE].map((name) => ({ configMapRef: { name, optional: true } }));
    const created = await apps.createNamespacedStatefulSet({ namespace: workloads, body });
    expect(created.spec?.template.metadata?.annotations).toMatchObject({ [key(APP)]: await versionOf(APP), [key(RECREATED)]: await versionOf(RECREATED), [key(LATE)]: ABSENT });
    await waitUntil('leader idle', async () => {
      const s = await status(leader);
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
    const countsBefore = (await rolloutCounts(apps, workloads, [SET])).get(SET)!;
    const eventsBefore = await rollguardEvents(core, workloads);
    const rejectedBefore = await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_rejection_count', webhookName);
    const reviewsBefore = await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_request_total', webhookName);
    history = await watchTemplateAnnotations(kc, workloads, created);
    let rollouts = 0;

    proxy.freeze();
    const seenAtFreeze = await configMapsSeenBy(lagging);
    console.log(`[faults-lag] injected: the API server connection of ${lagging.name} frozen (${proxy.connections()} connections held); its webhook still answers every write`);

    // 1. a change: the leader rolls the set
    const v2 = await setApp('2');
    await templateCarries(APP, v2);
    rollouts++;
    // 2. an object recreated: a new uid; the lagging cache still holds the old one
    await core.deleteNamespacedConfigMap({ name: RECREATED, namespace: workloads });
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: RECREATED }, data: { v: '1' } } });
    const recreated = await versionOf(RECREATED);
    await templateCarries(RECREATED, recreated);
    rollouts++;
    // 3. an object appears: the lagging cache still says absent
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: LATE }, data: { v: '1' } } });
    const late = await versionOf(LATE);
    await templateCarries(LATE, late);
    rollouts++;
    expect(await configMapsSeenBy(lagging), 'the lagging replica has not seen the new ConfigMap').toBe(seenAtFreeze);
    const current = await annotations();

    // 4. an owner's annotate: no template change, nothing written back
    const annotated = await apps.patchNamespacedStatefulSet({ name: SET, namespace: workloads, body: [{ op: 'add', path: '/metadata/annotations/owner', value: 'annotate' }] });
    expect(annotated.metadata?.generation).toBe((await readSet()).metadata?.generation);
    expect(annotated.spec?.template.metadata?.annotations).toEqual(current);
    // 5. an owner's template change: its own rollout, every stored value kept (the lagging cache is older)
    const changed = await ownerTemplateChange('1');
    expect(changed.spec?.template.metadata?.annotations).toEqual(current);
    rollouts++;
    // 6. a change and, before the leader's debounce closes, an owner's template change: the lagging
    // replica cannot fold what it has not seen, so the owner's rollout keeps v2 and the leader rolls v3
    const v3 = await setApp('3');
    const beforeLoop = await ownerTemplateChange('2');
    expect(beforeLoop.spec?.template.metadata?.annotations).toEqual(current);
    await templateCarries(APP, v3);
    rollouts += 2;

    // 7. the replica catches up; a change and an owner's template change right after: it may fold the bump
    proxy.restore();
    const v4 = await setApp('4');
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: SENTINEL } } });
    // watch events arrive in order: once it holds the sentinel, it has seen v4
    await waitUntil(`${lagging.name} to catch up`, async () => {
      const [lag, lead] = await Promise.all([configMapsSeenBy(lagging), configMapsSeenBy(leader)]);
      return (lag === seenAtFreeze + 2 && lead === lag) || `lagging sees ${lag}, leader ${lead}, at freeze ${seenAtFreeze}`;
    });
    const folding = await ownerTemplateChange('3');
    // folded: one rollout; else the loop's bump is a rollout of its own, before or after the owner's
    const folded = folding.metadata?.annotations?.[RESTART_REASON_ANNOTATION] !== undefined;
    rollouts += folded ? 1 : 2;
    if (folded) {
      expect(folding.spec?.template.metadata?.annotations?.[key(APP)]).toBe(v4);
      expect(folding.metadata?.annotations?.[RESTART_REASON_ANNOTATION]).toContain(`ConfigMap ${APP} changed`);
    }
    await templateCarries(APP, v4);
    await waitUntil('the restart reason turned into its Event', async () => (await readSet()).metadata?.annotations?.[RESTART_REASON_ANNOTATION] === undefined);
    await waitUntil('leader idle', async () => {
      const s = await status(leader);
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });

    const countsAfter = (await rolloutCounts(apps, workloads, [SET])).get(SET)!;
    const added = eventsAdded(eventsBefore, await rollguardEvents(core, workloads));
    const configChanged = added.filter((e) => e.reason === 'ConfigChanged');
    const generations = countsAfter.generation - countsBefore.generation;
    const revisions = countsAfter.revisions - countsBefore.revisions;
    const rejected = (await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_rejection_count', webhookName)) - rejectedBefore;
    const reviews = (await apiServerWebhookMetric(kc, 'apiserver_admission_webhook_request_total', webhookName)) - reviewsBefore;
    console.log(
      `[faults-lag] rollouts vs changes: 5 object changes, 3 owner template changes and 1 owner annotate, ${rollouts} rollouts expected (bump folded at admission: ${folded}), ` +
        `${generations} generations, ${revisions} ControllerRevisions, ${configChanged.length} ConfigChanged Events; ${history.states.length} states watched, ` +
        `${history.backwards().length} backwards; ${reviews} reviews by the lagging replica, ${rejected} rejected`,
    );
    expect(history.backwards()).toEqual([]);
    expect({ generations, revisions }).toEqual({ generations: rollouts, revisions: rollouts });
    expect(added.filter((e) => e.reason !== 'ConfigChanged')).toEqual([]);
    // one Event per object change, each naming the version it rolled to
    const named = (text: string): number => configChanged.filter((e) => e.message.includes(text)).reduce((n, e) => n + e.count, 0);
    // a version change reads "… → 264)", a data change "…, resourceVersion 208 → 264"
    const namedVersion = (resourceVersion: string): number =>
      configChanged.filter((e) => endsWithVersion(e.message, resourceVersion)).reduce((n, e) => n + e.count, 0);
    const rv = (value: string): string => value.slice(value.indexOf('/') + 1);
    expect(configChanged.reduce((n, e) => n + e.count, 0)).toBe(5);
    for (const [text, count] of [
      [`ConfigMap ${RECREATED} was recreated`, 1],
      [`ConfigMap ${LATE} appeared (resourceVersion ${ABSENT} → ${rv(late)})`, 1],
    ] as const) {
      expect(named(text), `ConfigChanged Events naming ${text}`).toBe(count);
    }
    for (const version of [v2, v3, v4]) expect(namedVersion(rv(version)), `ConfigChanged Events naming → ${rv(version)}`).toBe(1);
    if (folded) expect(named('applied at admission')).toBe(1);
    expect(rejected).toBe(0);
    expect(reviews).toBeGreaterThanOrEqual(6);
    await waitFor('the watch to have seen the last state', () => (history!.states.at(-1)?.annotations[key(APP)] === v4 ? true : undefined));
  });
});
