import fs from 'node:fs';
import path from 'node:path';
import {
  AdmissionregistrationV1Api,
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  KubernetesObjectApi,
  loadAllYaml,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { pino } from 'pino';
import type { Config } from './config.js';
import { createLogger } from './logger.js';
import { startRollguard } from './main.js';
import { statusCode } from './kube/api-status.js';
import { ANNOTATION_PREFIX, ENABLED_LABEL } from './restarter/annotations.js';

const DEMO_NAMESPACE = 'demo';
const ROLLGUARD_NAMESPACE = 'rollguard-system';
const WEBHOOK_CONFIGURATION = 'rollguard';
const DEMO_TIMEOUT_MS = 120_000;

/**
 * `rollguard dev` (npm start): a local control plane, rollguard against it with the
 * webhook registered by URL on 127.0.0.1, and a demo StatefulSet that shows the
 * first rollout is the only one. Stops everything it started on Ctrl-C.
 */
export async function dev(config: Config): Promise<number> {
  // test/env is not part of the production image; dev mode loads it on demand
  const { startControlPlane } = await import('../test/env/control-plane.js');
  const { FakeKubelet } = await import('../test/env/fake-kubelet.js');
  const devDir = path.resolve(config.devDir);
  const cpDir = path.join(devDir, 'control-plane');
  fs.rmSync(cpDir, { recursive: true, force: true });
  fs.mkdirSync(cpDir, { recursive: true });

  say('starting the local control plane (etcd, kube-apiserver, kube-controller-manager); the first run builds them with Go, which takes a few minutes');
  const cp = await startControlPlane({ dir: cpDir });
  const kubeconfigPath = path.join(devDir, 'admin.kubeconfig');
  fs.copyFileSync(cp.kubeconfigPath, kubeconfigPath);
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);

  const stops: (() => Promise<void>)[] = [() => cp.stop()];
  const stopAll = async (): Promise<void> => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  };
  let interrupted = false;
  const done = new Promise<void>((resolve) => {
    const onSignal = (): void => {
      if (interrupted) process.exit(130);
      interrupted = true;
      say('stopping everything that was started…');
      resolve();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });

  try {
    await ensureNamespace(core, ROLLGUARD_NAMESPACE);
    const logFile = path.join(devDir, 'rollguard.log');
    // synchronous, so the last lines are in the file when the process exits
    const logger = createLogger(config.logLevel, pino.destination({ dest: logFile, sync: true, append: false }));
    const rollguard = await startRollguard(
      {
        ...config,
        namespace: ROLLGUARD_NAMESPACE,
        webhookHost: '127.0.0.1',
        adminHost: '127.0.0.1',
        webhookConfiguration: WEBHOOK_CONFIGURATION,
        tlsExtraIps: [...config.tlsExtraIps, '127.0.0.1'],
      },
      kc,
      logger,
    );
    stops.push(() => rollguard.stop());
    await registerWebhook(kc, rollguard.webhookPort());
    say(`rollguard runs: webhook https://127.0.0.1:${rollguard.webhookPort()}/mutate, admin http://127.0.0.1:${rollguard.adminPort()} (/status, /metrics); logs in ${path.relative(process.cwd(), logFile)}`);
    await until('rollguard ready (certificate loaded, caBundle injected)', () => rollguard.ready());

    await ensureNamespace(core, DEMO_NAMESPACE);
    const kubelet = new FakeKubelet(kc, DEMO_NAMESPACE).start();
    stops.push(() => kubelet.stop());
    const applied = await applyExamples(kc, path.join(repoRoot(), 'deploy', 'examples'));
    say(`applied deploy/examples into namespace ${DEMO_NAMESPACE}: ${applied.join(', ')}`);

    const apps = kc.makeApiClient(AppsV1Api);
    const sets = (await apps.listNamespacedStatefulSet({ namespace: DEMO_NAMESPACE, labelSelector: `${ENABLED_LABEL}=true` })).items;
    for (const set of sets) {
      const name = set.metadata!.name!;
      await until(`${name} to be Ready`, async () => {
        const s = await apps.readNamespacedStatefulSet({ name, namespace: DEMO_NAMESPACE });
        return (s.status?.readyReplicas ?? 0) === (s.spec?.replicas ?? 1) && s.status?.currentRevision === s.status?.updateRevision;
      });
      const s = await apps.readNamespacedStatefulSet({ name, namespace: DEMO_NAMESPACE });
      const ours = Object.entries(s.spec?.template.metadata?.annotations ?? {}).filter(([k]) =>
        Object.values(ANNOTATION_PREFIX).some((p) => k.startsWith(p)),
      );
      console.log(`\nStatefulSet ${DEMO_NAMESPACE}/${name}: ${s.status?.readyReplicas}/${s.spec?.replicas} Ready, generation: ${s.metadata?.generation}`);
      for (const [k, v] of ours) console.log(`  ${k}: ${v}`);
    }
    const kubectl = `${path.join(cp.binDir, 'kubectl')} --kubeconfig ${path.relative(process.cwd(), kubeconfigPath)}`;
    console.log(`
ready: try a change.
  The webhook wrote the annotations above at creation, so generation is 1 and no pod restarted.
  Change the ConfigMap and watch the StatefulSet roll, one pod at a time:
    ${kubectl} -n ${DEMO_NAMESPACE} edit configmap app-config
    ${kubectl} -n ${DEMO_NAMESPACE} get pods -w
    ${kubectl} -n ${DEMO_NAMESPACE} get events --field-selector reason=ConfigChanged
  rollguard's own view: curl -s http://127.0.0.1:${rollguard.adminPort()}/status
Ctrl-C stops rollguard and the control plane.`);
    await done;
    return 0;
  } catch (err) {
    console.error(`rollguard dev: ${err instanceof Error ? err.message : String(err)}\n${cp.logTail(15)}`);
    return 1;
  } finally {
    await stopAll();
  }
}

function say(text: string): void {
  console.log(`[rollguard dev] ${text}`);
}

async function until(what: string, probe: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + DEMO_TIMEOUT_MS;
  while (!(await Promise.resolve().then(probe).catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function ensureNamespace(core: CoreV1Api, name: string): Promise<void> {
  try {
    await core.createNamespace({ body: { metadata: { name } } });
  } catch (err) {
    if (statusCode(err) !== 409) throw err;
  }
}

/** The webhook reached by URL on loopback, as envtest does; rollguard injects the caBundle. */
async function registerWebhook(kc: KubeConfig, port: number): Promise<void> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  await api.createMutatingWebhookConfiguration({
    body: {
      metadata: { name: WEBHOOK_CONFIGURATION },
      webhooks: [
        {
          name: 'statefulsets.rollguard.io',
          clientConfig: { url: `https://127.0.0.1:${port}/mutate` },
          rules: [{ operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: ['statefulsets'] }],
          objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } },
          namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: [ROLLGUARD_NAMESPACE] }] },
          failurePolicy: 'Ignore',
          sideEffects: 'None',
          reinvocationPolicy: 'IfNeeded',
          admissionReviewVersions: ['v1'],
          timeoutSeconds: 3,
        },
      ],
    },
  });
}

async function applyExamples(kc: KubeConfig, dir: string): Promise<string[]> {
  const client = KubernetesObjectApi.makeApiClient(kc);
  const applied: string[] = [];
  // ConfigMaps and Secrets first, as helm orders them, so the webhook sees them
  const order = ['Namespace', 'ConfigMap', 'Secret', 'Service'];
  const rank = (o: KubernetesObject): number => {
    const i = order.indexOf(o.kind ?? '');
    return i === -1 ? order.length : i;
  };
  const objects = fs
    .readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .flatMap((f) => loadAllYaml(fs.readFileSync(path.join(dir, f), 'utf8')) as KubernetesObject[])
    .filter((o) => o && o.kind)
    .sort((a, b) => rank(a) - rank(b));
  for (const obj of objects) {
    obj.metadata = { ...obj.metadata, namespace: DEMO_NAMESPACE };
    await client.create(obj);
    applied.push(`${obj.kind}/${obj.metadata.name}`);
  }
  return applied;
}

function repoRoot(): string {
  for (let dir = path.dirname(new URL(import.meta.url).pathname); ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'deploy', 'examples'))) return dir;
    if (path.dirname(dir) === dir) throw new Error('deploy/examples not found above the rollguard installation');
  }
}
