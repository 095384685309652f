import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppsV1Api, CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { statusCode } from '../../src/kube/api-status.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { statefulSet } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';

const run = promisify(execFile);
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(REPO_ROOT, 'dist', 'src', 'cli.js');
const DEFAULT_PORTS = [8080, 9443];
const DEMO_TIMEOUT_MS = 150_000;
const KUTTL_TIMEOUT_MS = 240_000;
const STOP_TIMEOUT_MS = 30_000;

// `rollguard dev` (what npm start runs) as a user meets it: the compiled CLI as a child process, with
// the default ports already taken, and a state folder of the test's own (a user's certs/dev is left alone).
describe('rollguard dev', () => {
  const devDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-dev-test-'));
  const holders: net.Server[] = [];
  let child: ChildProcess | undefined;
  let exited: Promise<number | null> | undefined;
  let output = '';
  let kc: KubeConfig;
  let core: CoreV1Api;
  let apps: AppsV1Api;

  const printOutputOnFailure = (): void =>
    onTestFailed(() => {
      console.error(`--- rollguard dev output ---\n${output.slice(-6000)}`);
      const log = path.join(devDir, 'rollguard.log');
      if (fs.existsSync(log)) console.error(`--- rollguard.log ---\n${fs.readFileSync(log, 'utf8').split('\n').slice(-30).join('\n')}`);
    });

  beforeAll(async () => {
    // another program on 8080 and 9443 (already the case when something else holds them)
    for (const port of DEFAULT_PORTS) {
      const held = await holdPort(port);
      if (held) holders.push(held);
    }
    // --compat stackable: the kuttl suite has Stackable cases too (rollguard's own label is honoured as well);
    // --argo-rollouts: the Rollout CRD installed and the demo Rollout applied (docs/argo-rollouts.md)
    child = spawn(process.execPath, [CLI, 'dev', `--dev-dir=${devDir}`, '--compat=stackable', '--argo-rollouts'], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    exited = new Promise((resolve) => child!.on('exit', (code) => resolve(code)));
    // its own lines (an early exit says why in one), then the tail with the control plane's logs
    const explain = (): string => `${output.split('\n').filter((l) => /^\[?rollguard dev/.test(l)).join('\n')}\n…\n${output.slice(-2000)}`;
    const early = exited.then((code) => {
      throw new Error(`rollguard dev exited with ${code} before the demo:\n${explain()}`);
    });
    const demo = waitUntil(
      'rollguard dev to reach the demo ("ready: try a change.")',
      () => output.includes('ready: try a change.') || output.split('\n').slice(-3).join(' | '),
      { timeoutMs: DEMO_TIMEOUT_MS, intervalMs: 250 },
    );
    try {
      await Promise.race([demo, early]);
    } catch (err) {
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n--- output ---\n${explain()}`, { cause: err });
    } finally {
      early.catch(() => undefined);
    }
    kc = new KubeConfig();
    kc.loadFromFile(path.join(devDir, 'admin.kubeconfig'));
    core = kc.makeApiClient(CoreV1Api);
    apps = kc.makeApiClient(AppsV1Api);
  }, DEMO_TIMEOUT_MS + 30_000);

  afterAll(async () => {
    await stopDev();
    for (const held of holders) await new Promise((resolve) => held.close(resolve));
    fs.rmSync(devDir, { recursive: true, force: true });
  }, STOP_TIMEOUT_MS + 20_000);

  /** SIGTERM (dev stops what it started), then SIGKILL of dev and of any control plane process it left. */
  async function stopDev(): Promise<void> {
    if (!child || !exited) return;
    child.kill('SIGTERM');
    const stopped = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), STOP_TIMEOUT_MS))]);
    if (stopped) return;
    child.kill('SIGKILL');
    await exited;
    const pids = path.join(devDir, 'control-plane', 'pids');
    const list = fs.existsSync(pids) ? fs.readFileSync(pids, 'utf8').split('\n').map(Number) : [];
    for (const pid of list.filter((p) => p > 0)) {
      try {
        if (/\/(etcd|kube-apiserver|kube-controller-manager)\0/.test(fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'))) process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    throw new Error(`rollguard dev did not stop within ${STOP_TIMEOUT_MS} ms of SIGTERM`);
  }

  it('starts with 8080 and 9443 taken, on free ports it prints', async () => {
    printOutputOnFailure();
    const webhook = /webhook https:\/\/127\.0\.0\.1:(\d+)\/mutate/.exec(output);
    const admin = /admin (http:\/\/127\.0\.0\.1:(\d+))/.exec(output);
    expect(webhook, output).not.toBeNull();
    expect(admin, output).not.toBeNull();
    expect(Number(webhook![1])).not.toBe(9443);
    expect(Number(admin![2])).not.toBe(8080);
    expect(output).toContain('127.0.0.1:8080 is taken');
    expect(output).toContain('127.0.0.1:9443 is taken');
    const status = (await (await fetch(`${admin![1]}/status`)).json()) as { ready?: boolean };
    expect(status.ready).toBe(true);
    // the demo: the webhook annotated the set at creation, so it never rolled
    expect(output).toMatch(/StatefulSet demo\/web: 3\/3 Ready, generation: 1/);
  });

  it('with --argo-rollouts: the Rollout CRD installed, the demo Rollout stored with its template annotation at generation 1', async () => {
    printOutputOnFailure();
    expect(output).toContain('applied deploy/examples/argo-rollouts into namespace demo: Rollout/web-canary');
    const custom = kc.makeApiClient(CustomObjectsApi);
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: 'demo' });
    const rollout = (await custom.getNamespacedCustomObject({ group: 'argoproj.io', version: 'v1alpha1', namespace: 'demo', plural: 'rollouts', name: 'web-canary' })) as {
      metadata?: { generation?: number };
      spec?: { template?: { metadata?: { annotations?: Record<string, string> } } };
    };
    expect(rollout.metadata?.generation).toBe(1);
    expect(rollout.spec?.template?.metadata?.annotations?.['configmap.rollguard.io/app-config']).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
  });

  it("the why command it prints tells, after a change of the demo's ConfigMap, what changed and when each pod of web was replaced", async () => {
    printOutputOnFailure();
    const printed = /node (\S+) why statefulset\/web -n demo --kubeconfig (\S+)/.exec(output);
    expect(printed, output).not.toBeNull();
    const why = async (): Promise<string> => (await run(process.execPath, [printed![1]!, 'why', 'statefulset/web', '-n', 'demo', '--kubeconfig', printed![2]!], { cwd: REPO_ROOT })).stdout;
    await waitUntil('web with its digest records (the restart then names the data keys)', async () => (await apps.readNamespacedStatefulSet({ name: 'web', namespace: 'demo' })).metadata?.annotations?.['rollguard.io/digests']?.includes('app-config') || 'not yet');
    await core.patchNamespacedConfigMap({ name: 'app-config', namespace: 'demo', body: [{ op: 'replace', path: '/data/app.properties', value: 'greeting=why\n' }] });
    let text = '';
    await waitUntil('web restarted and every pod replaced, in why\'s words', async () => {
      text = await why();
      return (/^State:\s+up-to-date/m.test(text) && /\(the template now\): 3 pods, 3 ready/.test(text) && /Last restart by rollguard/.test(text)) || text.split('\n').slice(0, 3).join(' | ');
    }, { timeoutMs: 90_000, intervalMs: 1_000 });
    expect(text).toMatch(/\d+s ago\)\s+rollguard\n\s+ConfigMap app-config: data changed \(key app\.properties\), resourceVersion \d+ → \d+\n\s+pods made then or since: web-\d \S+ \(\d+s ago\), web-\d \S+ \(\d+s ago\), web-\d \S+ \(\d+s ago\)/);
  });

  it('deletes a namespace within seconds, and gives a new one its default ServiceAccount', async () => {
    printOutputOnFailure();
    const name = `dev-ns-${Math.random().toString(36).slice(2, 8)}`;
    await core.createNamespace({ body: { metadata: { name } } });
    await waitFor(`ServiceAccount ${name}/default`, async () => (await core.readNamespacedServiceAccount({ name: 'default', namespace: name })).metadata?.name, { timeoutMs: 20_000 });
    await core.createNamespacedConfigMap({ namespace: name, body: { metadata: { name: 'some' }, data: { a: '1' } } });
    await core.deleteNamespace({ name });
    await waitUntil(
      `namespace ${name} to disappear`,
      async () => {
        try {
          const ns = await core.readNamespace({ name });
          return `phase ${ns.status?.phase}, conditions ${JSON.stringify(ns.status?.conditions ?? [])}`;
        } catch (err) {
          if (statusCode(err) === 404) return true;
          throw err;
        }
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  });

  it('gives a labelled StatefulSet of a new namespace Ready pods, and rolls it when its ConfigMap changes', async () => {
    printOutputOnFailure();
    const namespace = `dev-app-${Math.random().toString(36).slice(2, 8)}`;
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    try {
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'settings' }, data: { level: 'info' } } });
      const set = statefulSet('app', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' } });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'settings' } }];
      await apps.createNamespacedStatefulSet({ namespace, body: set });
      const settled = async (): Promise<string | true> => {
        const s = await apps.readNamespacedStatefulSet({ name: 'app', namespace });
        const st = s.status;
        const done = st?.readyReplicas === 2 && st.updatedReplicas === 2 && st.currentRevision === st.updateRevision && st.observedGeneration === s.metadata?.generation;
        return done || JSON.stringify(st);
      };
      await waitUntil('app to have 2 Ready pods', settled, { timeoutMs: 60_000, intervalMs: 250 });
      const before = await apps.readNamespacedStatefulSet({ name: 'app', namespace });
      expect(before.metadata?.generation).toBe(1);

      await core.patchNamespacedConfigMap({ name: 'settings', namespace, body: [{ op: 'replace', path: '/data/level', value: 'debug' }] });
      await waitUntil(
        'app to roll to a new revision',
        async () => {
          const s = await apps.readNamespacedStatefulSet({ name: 'app', namespace });
          return (s.status?.updateRevision !== before.status?.updateRevision && (s.metadata?.generation ?? 0) > 1) || `generation ${s.metadata?.generation}`;
        },
        { timeoutMs: 60_000, intervalMs: 250 },
      );
      await waitUntil('app to be Ready again on the new revision', settled, { timeoutMs: 60_000, intervalMs: 250 });
      const pods = await core.listNamespacedPod({ namespace });
      expect(pods.items.map((p) => p.spec?.nodeName)).toEqual(['fake-node', 'fake-node']);
    } finally {
      await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    }
  });

  it("hands the demo db's primary role over before its pod is replaced, when db-config changes", async () => {
    printOutputOnFailure();
    expect(output).toContain('db-0 is the primary (label role=primary)');
    const namespace = 'demo';
    await core.patchNamespacedConfigMap({ name: 'db-config', namespace, body: [{ op: 'replace', path: '/data/max_connections', value: '200' }] });
    let succeeded = '';
    await waitUntil(
      'a HandoverSucceeded Event on demo/db',
      async () => {
        const events = await core.listNamespacedEvent({ namespace, fieldSelector: 'involvedObject.name=db' });
        succeeded = events.items.find((e) => e.reason === 'HandoverSucceeded')?.message ?? '';
        return succeeded !== '' || events.items.map((e) => e.reason).join(',');
      },
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    expect(succeeded).toMatch(/^Handed the primary role over from db-0 to db-\d in [\d.]+s \(attempt 1\)$/);
  }, 150_000);

  it('prints a kuttl command that passes against this cluster', async () => {
    printOutputOnFailure();
    const line = output.split('\n').find((l) => l.includes('kubectl kuttl test'));
    expect(line, output).toBeDefined();
    const kuttl = spawn('bash', ['-c', line!.trim()], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    kuttl.stdout.on('data', (d: Buffer) => (out += d.toString()));
    kuttl.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => kuttl.kill('SIGKILL'), KUTTL_TIMEOUT_MS);
    const code = await new Promise<number | null>((resolve) => kuttl.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    expect(code, `${line}\nexited ${code}:\n${out.slice(-4000)}`).toBe(0);
    expect(out).toMatch(/PASS: kuttl\/harness\/configmap-change-rolls/);
    expect(out).toMatch(/PASS: kuttl\/harness\/webhook-annotates-at-creation/);
  }, KUTTL_TIMEOUT_MS + 10_000);
});

/** Listens on 127.0.0.1:port as "another program" would; undefined when something already does. */
function holdPort(port: number): Promise<net.Server | undefined> {
  return new Promise((resolve) => {
    const srv = net.createServer((socket) => socket.destroy());
    srv.once('error', () => resolve(undefined));
    srv.listen(port, '127.0.0.1', () => resolve(srv));
  });
}
