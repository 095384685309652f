import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { loadAllYaml, RbacAuthorizationV1Api, type V1Deployment, type V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { FakeReplicatedApp } from '../../src/dev/fake-replicated-app.js';
import type { Explanation } from '../../src/explain/explanation.js';
import { ENABLED_LABEL, LAST_RESTART_ANNOTATION } from '../../src/restarter/annotations.js';
import { TIMING_ANNOTATION } from '../../src/restarter/timing.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { createNamespace, deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { handoverSet, setAtRest } from '../env/handover-sets.js';
import { freePort } from '../env/ports.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const run = promisify(execFile);
const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
// short enough for a test, long enough that a state lasts a few plugin runs
const DEBOUNCE_S = 8;
const FLOOR_S = 25;
const ARGS = [`--debounce=${DEBOUNCE_S}s`, `--min-restart-interval=${FLOOR_S}s`, '--rollout-min-step-interval=0s', '--rollout-min-ready=0s'];
/** The plugin's times against the test's own clock: a change's time is its write's, to the second. */
const TOLERANCE_S = 3;

/** The kubectl plugin as a user installs it: `npm pack`'s tarball (its production dependencies bundled) installed with npm, offline. */
async function installPlugin(dir: string): Promise<string> {
  // the integration setup built dist/ already; --ignore-scripts keeps prepack from building it again under running tests
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--pack-destination', dir, '--silent'], { cwd: REPO, maxBuffer: 64 * 1024 * 1024 });
  const tarball = path.join(dir, stdout.trim().split('\n').pop()!);
  const prefix = path.join(dir, 'prefix');
  await run('npm', ['install', '--global', '--prefix', prefix, '--offline', '--no-audit', '--no-fund', tarball], { cwd: dir, maxBuffer: 16 * 1024 * 1024 });
  return path.join(prefix, 'bin');
}

const secondsUntil = (iso: string): number => (Date.parse(iso) - Date.now()) / 1000;

describe('kubectl rollguard why and list: the installed plugin through the real kubectl, with get and list only, against rollguard as a process', () => {
  const { kc, core, apps } = testCluster();
  let fixture: RollguardFixture;
  let other: string;
  let dir: string;
  let env: NodeJS.ProcessEnv;
  const apps_: FakeReplicatedApp[] = [];

  /** A kubeconfig of a ServiceAccount that may only get and list, in the test's namespaces, and not Secrets. */
  async function readerKubeconfig(namespaces: string[]): Promise<string> {
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    const verbs = ['get', 'list'];
    for (const namespace of namespaces) {
      await rbac.createNamespacedRole({
        namespace,
        body: {
          metadata: { name: 'why-reader' },
          rules: [
            { apiGroups: ['apps'], resources: ['statefulsets', 'deployments', 'daemonsets', 'replicasets', 'controllerrevisions'], verbs },
            { apiGroups: [''], resources: ['configmaps', 'pods', 'events'], verbs },
          ],
        },
      });
      await rbac.createNamespacedRoleBinding({
        namespace,
        body: { metadata: { name: 'why-reader' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'why-reader' }, subjects: [{ kind: 'ServiceAccount', name: 'why-reader', namespace: fixture.ns }] },
      });
    }
    await core.createNamespacedServiceAccount({ namespace: fixture.ns, body: { metadata: { name: 'why-reader' } } });
    const token = await core.createNamespacedServiceAccountToken({ name: 'why-reader', namespace: fixture.ns, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
    const cluster = kc.getCurrentCluster()!;
    const ca = cluster.caData ?? Buffer.from(fs.readFileSync(cluster.caFile!)).toString('base64');
    const file = path.join(dir, 'reader.kubeconfig');
    fs.writeFileSync(
      file,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'test', cluster: { server: cluster.server, 'certificate-authority-data': ca } }],
        users: [{ name: 'reader', user: { token: token.status!.token } }],
        contexts: [{ name: 'reader', context: { cluster: 'test', user: 'reader', namespace: fixture.ns } }],
        'current-context': 'reader',
      }),
    );
    return file;
  }

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-plugin-'));
    const bin = await installPlugin(dir);
    fixture = await startRollguardFixture({ name: 'why', webhook: 'registered', args: ARGS, kubelet: { podIps: 'distinct' } });
    other = await createNamespace(core, 'why-unwatched');
    env = { ...process.env, PATH: `${bin}:${controlPlaneBinaries()}:${process.env.PATH}`, KUBECONFIG: await readerKubeconfig([fixture.ns, other]) };
  });

  afterAll(async () => {
    for (const app of apps_) await app.stop();
    await fixture?.teardown();
    if (other) await core.deleteNamespace({ name: other }).catch(() => undefined);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  /** `kubectl rollguard <args>` as a user runs it: the real kubectl finds the installed plugin on PATH. */
  async function kubectl(...args: string[]): Promise<string> {
    const { stdout } = await run('kubectl', ['rollguard', ...args], { env, maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  }
  const why = async (target: string, namespace = fixture.ns): Promise<Explanation> => JSON.parse(await kubectl('why', target, '-n', namespace, '-o', 'json')) as Explanation;
  const whyText = (target: string, namespace = fixture.ns): Promise<string> => kubectl('why', target, '-n', namespace);
  const stateLine = (text: string): string => /^State:\s+(\S+)/m.exec(text)?.[1] ?? `no State line in:\n${text}`;

  async function configMap(name: string, data: Record<string, string>, labels?: Record<string, string>): Promise<void> {
    await core.createNamespacedConfigMap({ namespace: fixture.ns, body: { metadata: { name, labels }, data } });
  }
  /** Changes the ConfigMap; the time just before the write, as the test's clock has it. */
  async function change(name: string, data: Record<string, string>): Promise<number> {
    const before = Date.now();
    await core.patchNamespacedConfigMap({ name, namespace: fixture.ns, body: [{ op: 'replace', path: '/data', value: data }] });
    return before;
  }
  const readSet = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace: fixture.ns });

  it('unmanaged, and unseen: a Deployment without the label says how to opt in; a labelled set where rollguard does not watch says it has not been seen', async () => {
    await configMap('plain-config', { a: '1' });
    const plain = deployment('plain', { replicas: 1 });
    plain.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'plain-config' } }];
    await apps.createNamespacedDeployment({ namespace: fixture.ns, body: plain });
    const text = await whyText('deploy/plain');
    expect(stateLine(text)).toBe('unmanaged');
    expect(text).toContain('Managed:  no: it has no label rollguard.io/enabled: "true"');

    await core.createNamespacedConfigMap({ namespace: other, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    const lost = statefulSet('lost', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    lost.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    await apps.createNamespacedStatefulSet({ namespace: other, body: lost });
    const unseen = await why('statefulset/lost', other);
    expect(unseen.state).toBe('unseen');
    expect(unseen.notManaged).toContain('the namespace outside --watch-namespaces');
    expect(unseen.references[0]).toMatchObject({ kind: 'ConfigMap', name: 'cfg', state: 'changed' });
  });

  it('the demo set, up to date, then after a change: debouncing with its deadline, then what changed and when each pod was replaced', async () => {
    // deploy/examples' web and the objects it reads, as `rollguard dev` applies them
    for (const file of ['app-config.yaml', 'web.yaml']) {
      for (const obj of loadAllYaml(fs.readFileSync(path.join(REPO, 'deploy', 'examples', file), 'utf8')) as { kind: string; metadata: { name: string } }[]) {
        if (obj.kind === 'ConfigMap') await core.createNamespacedConfigMap({ namespace: fixture.ns, body: obj });
        if (obj.kind === 'Secret') await core.createNamespacedSecret({ namespace: fixture.ns, body: obj });
        if (obj.kind === 'StatefulSet') await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body: obj as V1StatefulSet });
      }
    }
    // Ready, and its data digests recorded (what lets the restart's Event name the keys that changed)
    const ready = await waitFor('web Ready with its digest records', async () => {
      const s = await readSet('web');
      return s.status?.readyReplicas === (s.spec?.replicas ?? 1) && s.metadata?.annotations?.['rollguard.io/digests']?.includes('app-config') ? s : undefined;
    });
    const calm = await why('sts/web');
    expect(calm.state).toBe('up-to-date');
    expect(calm.workload.generation).toBe(1);
    // the webhook wrote the rules into the CREATE: the plugin counts with rollguard's flags, not the defaults
    expect(ready.metadata?.annotations?.[TIMING_ANNOTATION]).toContain(`debounce=${DEBOUNCE_S}s`);
    expect(calm.timing).toMatchObject({ recorded: true, rules: { debounceMs: DEBOUNCE_S * 1000, minRestartIntervalMs: FLOOR_S * 1000 } });
    expect(calm.references.map((r) => [r.kind, r.name, r.keys, r.state])).toEqual([
      ['ConfigMap', 'app-config', undefined, 'up-to-date'],
      ['Secret', 'app-secret', undefined, 'unreadable'],
    ]);
    expect(calm.references[1]!.why).toBe('get secrets app-secret: forbidden to you');

    const changedAt = await change('app-config', { 'app.properties': 'greeting=hi\n' });
    const text = await whyText('sts/web');
    expect(stateLine(text)).toBe('debouncing');
    const pending = await why('sts/web');
    expect(pending.state).toBe('debouncing');
    const debounce = pending.next.find((n) => n.cause === 'debounce')!;
    const deadline = Date.parse(debounce.at!.at);
    // the window opens at the change, or earlier with a write of the set's own that it folds into (rollguard's digest records)
    expect((deadline - changedAt) / 1000).toBeLessThan(DEBOUNCE_S + TOLERANCE_S);
    expect((deadline - changedAt) / 1000).toBeGreaterThan(-TOLERANCE_S);
    expect(Math.abs(debounce.at!.inSeconds - secondsUntil(debounce.at!.at))).toBeLessThan(TOLERANCE_S);
    expect(text).toMatch(new RegExp(`at \\S+ \\(in \\d+s\\): rollguard looks at the change of ConfigMap app-config by then: the debounce \\(${DEBOUNCE_S}s\\)`));
    expect(pending.references[0]).toMatchObject({ name: 'app-config', state: 'changed', pods: [{ version: pending.references[0]!.template, pods: 3 }] });

    await waitUntil('web restarted and every pod replaced', async () => {
      const s = await readSet('web');
      return (s.status?.updatedReplicas === 3 && s.status.currentRevision === s.status.updateRevision && s.status.readyReplicas === 3 && s.metadata?.generation === 2) || `generation ${s.metadata?.generation}, updated ${s.status?.updatedReplicas}`;
    }, { timeoutMs: 60_000 });
    // the plugin's reads may come from a watch cache a moment behind the one the wait read
    const done = await waitFor('the plugin to see web up to date', async () => {
      const e = await why('sts/web');
      return e.state === 'up-to-date' ? e : undefined;
    }, { timeoutMs: 20_000 });
    expect(done.workload.generation).toBe(2);
    const after = await whyText('sts/web');
    const restartedAt = Date.parse(done.lastRestartAt!.at);
    // rollguard restarted it when the plugin said it would
    expect(Math.abs(restartedAt - deadline) / 1000).toBeLessThan(TOLERANCE_S);
    const [latest] = done.restarts;
    expect(latest).toMatchObject({ cause: 'rollguard', reason: expect.stringMatching(/^ConfigMap app-config: data changed \(key app\.properties\), resourceVersion \d+ → \d+$/) });
    expect(latest!.podsReplaced.map((p) => p.name).sort()).toEqual(['web-0', 'web-1', 'web-2']);
    for (const p of latest!.podsReplaced) expect(Date.parse(p.at!.at)).toBeGreaterThanOrEqual(restartedAt - 1000);
    // what a person reads: the change, its keys, and each pod with the time it was made
    expect(after).toContain(latest!.reason);
    expect(after).toMatch(/pods made then or since: web-\d \S+ \(\d+s ago\), web-\d \S+ \(\d+s ago\), web-\d \S+ \(\d+s ago\)/);
    expect(after).toContain('(the template now): 3 pods, 3 ready: web-0, web-1, web-2');
  });

  it('floored: a change right after a restart waits out the debounce, then the restart floor, and rolls at its deadline', async () => {
    const lastRestart = Date.parse((await readSet('web')).metadata!.annotations![LAST_RESTART_ANNOTATION]!);
    await change('app-config', { 'app.properties': 'greeting=hello again\n' });
    const floored = await waitFor('web past its debounce, held by the floor', async () => {
      const e = await why('sts/web');
      return e.state === 'floored' ? e : undefined;
    }, { timeoutMs: (DEBOUNCE_S + 10) * 1000, intervalMs: 500 });
    const floor = floored.next.find((n) => n.cause === 'restart-floor')!;
    expect(Date.parse(floor.at!.at)).toBe(lastRestart + FLOOR_S * 1000);
    expect(Math.abs(floor.at!.inSeconds - secondsUntil(floor.at!.at))).toBeLessThan(TOLERANCE_S);
    expect(stateLine(await whyText('sts/web'))).toBe('floored');
    const rolled = await waitFor('web restarted at its floor', async () => {
      const at = Date.parse((await readSet('web')).metadata!.annotations![LAST_RESTART_ANNOTATION]!);
      return at > lastRestart ? at : undefined;
    }, { timeoutMs: (FLOOR_S + 10) * 1000 });
    expect((rolled - (lastRestart + FLOOR_S * 1000)) / 1000).toBeGreaterThanOrEqual(-0.5);
    expect((rolled - (lastRestart + FLOOR_S * 1000)) / 1000).toBeLessThan(TOLERANCE_S);
    const e = await why('sts/web');
    expect(e.restarts.filter((r) => r.cause === 'rollguard')).toHaveLength(2);
  });

  it('ignored: a change of an object labelled rollguard.io/ignore restarts nothing, and the plugin says so', async () => {
    await configMap('quiet-config', { a: '1' });
    const quiet = statefulSet('quiet', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    quiet.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'quiet-config' } }];
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body: quiet });
    await waitUntil('quiet annotated', async () => Object.keys((await readSet('quiet')).spec?.template.metadata?.annotations ?? {}).length > 0 || 'no annotations');
    await core.patchNamespacedConfigMap({ name: 'quiet-config', namespace: fixture.ns, body: [{ op: 'add', path: '/metadata/labels', value: { 'rollguard.io/ignore': 'true' } }] });
    await change('quiet-config', { a: '2' });
    const e = await waitFor('the loop to freeze the ignored reference', async () => {
      const x = await why('sts/quiet');
      return x.state === 'ignored' ? x : undefined;
    }, { timeoutMs: (DEBOUNCE_S + 10) * 1000 });
    expect(e.references[0]).toMatchObject({ state: 'ignored', why: 'label rollguard.io/ignore=true on the ConfigMap' });
    expect(e.references[0]!.current).not.toBe(e.references[0]!.template);
    expect(e.next).toEqual([{ cause: 'nothing', text: 'nothing until a referenced object changes' }]);
    expect(stateLine(await whyText('sts/quiet'))).toBe('ignored');
    expect((await readSet('quiet')).metadata?.generation).toBe(1);
  });

  it('held: a health-gated rollout stopped by a crash-looping new pod, with the block and its cause', async () => {
    await configMap('gated-config', { a: '1' });
    const gated = statefulSet('gated', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE } });
    gated.spec!.podManagementPolicy = 'Parallel';
    gated.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'gated-config' } }];
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body: gated });
    await waitUntil('gated at rest', async () => {
      const s = await readSet('gated');
      return (s.status?.readyReplicas === 2 && s.spec?.updateStrategy?.rollingUpdate?.partition === 2) || `ready ${s.status?.readyReplicas}`;
    });
    // the pod the first step replaces comes back crash-looping
    fixture.kubelet.setBehaviour('gated-1', 'crashloop');
    await change('gated-config', { a: '2' });
    // the replaced pod is Pending for a moment before the kubelet reports its crash loop: wait for the cause to settle
    const held = await waitFor('the rollout blocked by the crash loop', async () => {
      const e = await why('sts/gated');
      return e.state === 'held' && e.summary.includes('CrashLoopBackOff') ? e : undefined;
    }, { timeoutMs: 60_000 });
    expect(held.summary).toContain('Rollout blocked at partition 1: pod gated-1 is not ready (CrashLoopBackOff)');
    expect(held.next.find((n) => n.cause === 'rollout-blocked')!.text).toContain('once pod gated-1 is healthy again');
    expect(stateLine(await whyText('sts/gated'))).toBe('held');
    fixture.kubelet.setBehaviour('gated-1', 'ready');
  });

  it('handover paused: every attempt failed; the plugin tells the next attempt and its time', async () => {
    const port = await freePort();
    const app = await new FakeReplicatedApp(kc, fixture.ns, { setName: 'db', port }).start();
    apps_.push(app);
    await configMap('db', { v: '0' });
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body: handoverSet('db', { port, annotations: { 'rollguard.io/handover-interval': '4s' } }) });
    await setAtRest(apps, fixture.ns, 'db');
    await app.makePrimary('db-0');
    app.setMode('200-no-move');
    await change('db', { v: '1' });
    const paused = await waitFor('the handover paused', async () => {
      const e = await why('sts/db');
      return e.state === 'handover-paused' ? e : undefined;
    }, { timeoutMs: 90_000, intervalMs: 500 });
    expect(paused.summary).toContain('handover of the primary role from db-0 paused');
    const next = paused.next.find((n) => n.cause === 'handover')!;
    expect(next.at).toBeDefined();
    expect(Math.abs(next.at!.inSeconds - secondsUntil(next.at!.at))).toBeLessThan(TOLERANCE_S);
    expect(next.at!.inSeconds).toBeLessThanOrEqual(4 + TOLERANCE_S);
    expect(stateLine(await whyText('sts/db'))).toBe('handover-paused');
    // what RollguardHandoverPaused alerts on, from the same process: the pause counted, its age since the handover started
    const metrics = await (await fetch(`${fixture.rollguard.adminUrl}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
    expect(metrics).toContain('rollguard_rollouts_held{reason="handover_paused"} 1');
    expect(Number(/rollguard_rollout_held_longest_seconds\{reason="handover_paused"\} (\S+)/.exec(metrics)?.[1])).toBeGreaterThan(0);
    app.setMode('ok');
  });

  it('a Deployment created through the webhook: generation 1 with the rules recorded; list shows every managed workload with one line of state', async () => {
    await configMap('api-config', { a: '1' });
    const api: V1Deployment = deployment('api', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    api.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'api-config' } }];
    await apps.createNamespacedDeployment({ namespace: fixture.ns, body: api });
    await waitUntil('api available', async () => ((await apps.readNamespacedDeployment({ name: 'api', namespace: fixture.ns })).status?.availableReplicas ?? 0) === 1 || 'not yet');
    const e = await why('deployment/api');
    expect(e).toMatchObject({ state: 'up-to-date', workload: { generation: 1 }, timing: { recorded: true } });
    // its restart: one new ReplicaSet, one generation (the record rode along with the template write), and the pod it made
    await change('api-config', { a: '2' });
    const restarted = await waitFor('api restarted, its new pod available', async () => {
      const x = await why('deployment/api');
      return x.state === 'up-to-date' && x.restarts[0]?.cause === 'rollguard' && x.pods.length === 1 ? x : undefined;
    }, { timeoutMs: 60_000 });
    expect(restarted.workload.generation).toBe(2);
    expect(restarted.restarts[0]!.reason).toMatch(/^ConfigMap api-config changed \(resourceVersion \d+ → \d+\)$|^ConfigMap api-config: data changed/);
    expect(restarted.restarts[0]!.podsReplaced).toHaveLength(1);
    expect(restarted.pods[0]).toMatchObject({ update: true, pods: [{ name: restarted.restarts[0]!.podsReplaced[0]!.name, ready: true }] });

    const lines = (await kubectl('list', '-n', fixture.ns)).trim().split('\n');
    expect(lines[0]).toMatch(/^NAMESPACE\s+WORKLOAD\s+STATE\s+SUMMARY$/);
    const states = Object.fromEntries(lines.slice(1).map((l) => l.split(/\s+/).slice(1, 3) as [string, string]));
    expect(states).toMatchObject({ 'Deployment/api': 'up-to-date', 'StatefulSet/web': 'up-to-date', 'StatefulSet/quiet': 'ignored' });
    expect(states['Deployment/plain']).toBeUndefined();
    const listed = JSON.parse(await kubectl('list', '-o', 'json')) as Explanation[];
    expect(listed.map((x) => `${x.workload.kind}/${x.workload.name}`).sort()).toEqual(Object.keys(states).sort());
  });
});
