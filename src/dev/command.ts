import fs from 'node:fs';
import path from 'node:path';
import { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { loadKubeConfig } from '../kube/kubeconfig.js';
import { pino } from 'pino';
import type { Config } from '../config.js';
import { statusCode } from '../kube/api-status.js';
import { createLogger } from '../logger.js';
import { startRollguard } from '../main.js';
import { ANNOTATION_PREFIX, ENABLED_LABEL } from '../restarter/annotations.js';
import { devScript, reapLeftovers, startControlPlane, type ControlPlane } from './control-plane.js';
import { applyExamples, repoRoot } from './demo.js';
import { installArgoRolloutsCrd } from './argo-rollouts.js';
import { FakeKubelet } from './fake-kubelet.js';
import { FakeReplicatedApp } from './fake-replicated-app.js';
import { portIsFree } from './ports.js';
import { waitFor } from './wait.js';
import { registerWebhook } from './webhook-registration.js';

const DEMO_NAMESPACE = 'demo';
const ROLLGUARD_NAMESPACE = 'rollguard-system';
const WEBHOOK_CONFIGURATION = 'rollguard';
const LOOPBACK = '127.0.0.1';
const DEMO_TIMEOUT_MS = 120_000;
/** The handover demo: deploy/examples/db.yaml calls POST :8008/switchover on the primary's pod. */
const DEMO_DB = 'db';
const DEMO_DB_PORT = 8008;

/**
 * `rollguard dev` (npm start): a local control plane, rollguard against it with the
 * webhook registered by URL on 127.0.0.1, and a demo StatefulSet that shows the
 * first rollout is the only one. Stops everything it started on Ctrl-C.
 * `given`: the flags the user set; a port left at its default moves to a free one when taken.
 */
export async function dev(config: Config, given: ReadonlySet<string> = new Set()): Promise<number> {
  if (config.realNode) {
    // loaded only here: `npm start` without the flag stays as it was
    const { devOnRealNode } = await import('./real-node/demo.js');
    return devOnRealNode(repoRoot());
  }
  let root: string;
  let cp: ControlPlane;
  let ports: Pick<Config, 'webhookPort' | 'adminPort'>;
  const devDir = path.resolve(config.devDir);
  try {
    root = repoRoot();
    const cpDir = path.join(devDir, 'control-plane');
    const owner = reapLeftovers(cpDir);
    if (owner !== undefined && owner !== process.pid) {
      throw new Error(`another rollguard dev (pid ${owner}) runs in ${display(devDir)}: stop it, or give this one --dev-dir of its own`);
    }
    fs.rmSync(cpDir, { recursive: true, force: true });
    fs.mkdirSync(cpDir, { recursive: true });
    ports = {
      webhookPort: await loopbackPort('webhook-port', config.webhookPort, given),
      adminPort: await loopbackPort('admin-port', config.adminPort, given),
    };
    say('starting the local control plane (etcd, kube-apiserver, kube-controller-manager); the first run builds them with Go, which takes a few minutes');
    cp = await startControlPlane({ dir: cpDir });
  } catch (err) {
    console.error(`rollguard dev: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
  const kubeconfigPath = path.join(devDir, 'admin.kubeconfig');
  fs.copyFileSync(cp.kubeconfigPath, kubeconfigPath);
  const kc = loadKubeConfig(kubeconfigPath);
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
    if (config.argoRollouts) {
      say(`--argo-rollouts: installing Argo Rollouts' Rollout CRD (downloaded once through the Go module proxy); not its controller: a Rollout's template changes, no canary runs`);
      await installArgoRolloutsCrd(kc);
    }
    const logFile = path.join(devDir, 'rollguard.log');
    // synchronous, so the last lines are in the file when the process exits
    const logger = createLogger(config.logLevel, pino.destination({ dest: logFile, sync: true, append: false }));
    const rollguard = await startRollguard(
      {
        ...config,
        namespace: ROLLGUARD_NAMESPACE,
        ...ports,
        webhookHost: LOOPBACK,
        adminHost: LOOPBACK,
        webhookConfiguration: WEBHOOK_CONFIGURATION,
        evictionWebhookConfiguration: WEBHOOK_CONFIGURATION,
        tlsExtraIps: [...config.tlsExtraIps, LOOPBACK],
      },
      kc,
      logger,
    );
    stops.push(() => rollguard.stop());
    await registerWebhook(kc, {
      name: WEBHOOK_CONFIGURATION,
      port: rollguard.webhookPort(),
      namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: [ROLLGUARD_NAMESPACE] }] },
      timeoutSeconds: 3,
      compat: config.compat === 'stackable' ? 'stackable' : '',
      evictionGuard: true,
      argoRollouts: config.argoRollouts,
    });
    const adminUrl = `http://${LOOPBACK}:${rollguard.adminPort()}`;
    say(`rollguard runs: webhook https://${LOOPBACK}:${rollguard.webhookPort()}/mutate and /validate-eviction, admin ${adminUrl} (/status, /metrics); logs in ${display(logFile)}`);
    await until('rollguard ready (certificate loaded, caBundle injected)', () => rollguard.ready());

    // every namespace but rollguard's own, so kuttl's namespaces and a user's own manifests get Ready pods
    // each pod its own 127.0.0.N, so the demo's replicated application can listen on every pod's address
    const kubelet = new FakeKubelet(kc, undefined, { skipNamespaces: [ROLLGUARD_NAMESPACE], bind: 'all', podIps: 'distinct' }).start();
    stops.push(() => kubelet.stop());
    await ensureNamespace(core, DEMO_NAMESPACE);
    const applied = await applyExamples(kc, path.join(root, 'deploy', 'examples'), DEMO_NAMESPACE);
    say(`applied deploy/examples into namespace ${DEMO_NAMESPACE}: ${applied.join(', ')}`);
    if (config.argoRollouts) {
      const rollouts = await applyExamples(kc, path.join(root, 'deploy', 'examples', 'argo-rollouts'), DEMO_NAMESPACE);
      say(`applied deploy/examples/argo-rollouts into namespace ${DEMO_NAMESPACE}: ${rollouts.join(', ')} (its template annotations: kubectl get rollout web-canary -o yaml)`);
    }

    const db = await new FakeReplicatedApp(kc, DEMO_NAMESPACE, { setName: DEMO_DB, port: DEMO_DB_PORT }).start();
    stops.push(() => db.stop());
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
    if (sets.some((s) => s.metadata?.name === DEMO_DB)) {
      await db.makePrimary(`${DEMO_DB}-0`);
      console.log(`  ${DEMO_DB}-0 is the primary (label role=primary), served by a fake replicated application on each pod's address`);
    }
    const kubectl = `${path.join(cp.binDir, 'kubectl')} --kubeconfig ${display(kubeconfigPath)}`;
    console.log(`
ready: try a change.
  The webhook wrote the annotations above at creation, so generation is 1 and no pod restarted.
  Change the ConfigMap and watch the StatefulSet roll, one pod at a time:
    ${kubectl} -n ${DEMO_NAMESPACE} edit configmap app-config
    ${kubectl} -n ${DEMO_NAMESPACE} get pods -w
    ${kubectl} -n ${DEMO_NAMESPACE} get events --field-selector reason=ConfigChanged
  A primary handover: change db-config and watch the role move before db-0 is replaced:
    ${kubectl} -n ${DEMO_NAMESPACE} patch configmap db-config -p '{"data":{"max_connections":"200"}}'
    ${kubectl} -n ${DEMO_NAMESPACE} get pods -L role -w
    ${kubectl} -n ${DEMO_NAMESPACE} get events --field-selector involvedObject.name=${DEMO_DB}
  Why a set rolled, or did not, what changed and when each pod was replaced (the kubectl plugin: docs/kubectl-plugin.md):
    node ${display(path.join(root, 'dist', 'src', 'cli.js'))} why statefulset/web -n ${DEMO_NAMESPACE} --kubeconfig ${display(kubeconfigPath)}
  rollguard's own view: curl -s ${adminUrl}/status
  Your own manifests work in any namespace but ${ROLLGUARD_NAMESPACE} (label a StatefulSet ${ENABLED_LABEL}=true).
  The project's kuttl cases against this cluster (the first run builds kubectl-kuttl; the stackable-* cases need rollguard dev --compat=stackable):
    ${kuttlCommand(root, devDir, cp.binDir, kubeconfigPath)}
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

/** The configured port, or 0 (the system picks a free one) when the user left it at its default and another program holds it. */
async function loopbackPort(flag: string, configured: number, given: ReadonlySet<string>): Promise<number> {
  if (given.has(flag) || configured === 0 || (await portIsFree(LOOPBACK, configured))) return configured;
  say(`${LOOPBACK}:${configured} is taken: using a free port for --${flag} instead (set --${flag} to pin one)`);
  return 0;
}

/**
 * A shell command that runs the project's kuttl cases with the kuttl the project builds, from a folder of its own
 * (kuttl writes a kubeconfig into its working folder).
 */
function kuttlCommand(root: string, devDir: string, binDir: string, kubeconfigPath: string): string {
  const suite = path.join(root, 'test', 'kuttl');
  const work = path.join(devDir, 'kuttl');
  fs.mkdirSync(work, { recursive: true });
  const kuttlDir = `$(bash ${quote(devScript('build-kuttl.sh'))})`;
  return (
    `(cd ${quote(work)} && PATH="${kuttlDir}:${binDir}:$PATH" KUBECONFIG=${quote(kubeconfigPath)} ` +
    `kubectl kuttl test ${quote(suite)} --config ${quote(path.join(suite, 'kuttl-test.yaml'))})`
  );
}

function quote(text: string): string {
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}

/** Relative to the working folder when inside it, as the user typed it; else absolute. */
function display(file: string): string {
  const relative = path.relative(process.cwd(), file);
  return relative.startsWith('..') || path.isAbsolute(relative) ? file : relative;
}

function say(text: string): void {
  console.log(`[rollguard dev] ${text}`);
}

async function until(what: string, probe: () => boolean | Promise<boolean>): Promise<void> {
  await waitFor(what, async () => ((await probe()) ? true : undefined), { timeoutMs: DEMO_TIMEOUT_MS, intervalMs: 200 });
}

async function ensureNamespace(core: CoreV1Api, name: string): Promise<void> {
  try {
    await core.createNamespace({ body: { metadata: { name } } });
  } catch (err) {
    if (statusCode(err) !== 409) throw err;
  }
}
