import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { buildNodeImages, startRealCluster } from './cluster.js';

const run = promisify(execFile);
const RELEASE = 'rollguard';
const RELEASE_NS = 'rollguard-system';
const DEMO_NAMESPACE = 'demo';
/** db.yaml's handover calls a replicated application that moves its role; the real node's stand-in image serves files only */
const EXAMPLES = ['app-config.yaml', 'web.yaml', 'web-gated.yaml'];
const WAIT = '300s';

const say = (line: string): void => console.log(`rollguard dev --real-node: ${line}`);

/**
 * `rollguard dev --real-node` (npm start -- --real-node): the demo on a real node (containerd,
 * runc, a kubelet), with rollguard installed by its Helm chart from the image this clone builds,
 * reached through its Service, and the examples in a namespace that enforces Pod Security
 * "restricted". Root only; stops everything it started on Ctrl-C.
 */
export async function devOnRealNode(root: string): Promise<number> {
  if (process.getuid?.() !== 0) {
    console.error('rollguard dev --real-node: a real node needs root (containerd, runc, bridges, iptables); `npm start` without the flag does not');
    return 1;
  }
  say('installing the node packages, building kubelet and the images (the first run takes several minutes)');
  let cluster: Awaited<ReturnType<typeof startRealCluster>>;
  let helm: string;
  try {
    helm = await tool(root, 'helm');
    cluster = await startRealCluster({ imageArchives: buildNodeImages(root) });
  } catch (err) {
    console.error(`rollguard dev --real-node: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
  let interrupted = false;
  const done = new Promise<void>((resolve) => {
    const onSignal = (): void => {
      if (interrupted) process.exit(130);
      interrupted = true;
      say('stopping the node and the control plane…');
      resolve();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
  const kubectl = cluster.kubectl;
  try {
    say(`the node is Ready (API server ${cluster.server}); helm install ${RELEASE}`);
    await run(helm, ['--kubeconfig', cluster.kubeconfigPath, 'install', RELEASE, path.join(root, 'deploy/helm/rollguard'), '--namespace', RELEASE_NS, '--create-namespace', '--wait', '--timeout', '5m']);
    await kubectl(['create', 'namespace', DEMO_NAMESPACE]);
    await kubectl(['label', 'namespace', DEMO_NAMESPACE, 'pod-security.kubernetes.io/enforce=restricted']);
    await kubectl(['apply', '-n', DEMO_NAMESPACE, ...EXAMPLES.flatMap((f) => ['-f', path.join(root, 'deploy/examples', f)])]);
    for (const set of ['web', 'web-gated']) await kubectl(['rollout', 'status', `statefulset/${set}`, '-n', DEMO_NAMESPACE, `--timeout=${WAIT}`]);
    console.log(`\n${await kubectl(['get', 'statefulsets,pods', '-n', DEMO_NAMESPACE, '-o', 'wide'])}`);
    const k = `${cluster.kubectlPath} --kubeconfig ${cluster.kubeconfigPath}`;
    console.log(`ready: rollguard runs as two pods of its chart, its webhook reached through its Service.
  The webhook annotated web and web-gated at creation: generation 1, no pod restarted.
    ${k} -n ${DEMO_NAMESPACE} get statefulset web -o jsonpath='{.metadata.generation} {.spec.template.metadata.annotations}'
  Change the ConfigMap and watch real containers replaced, one at a time:
    ${k} -n ${DEMO_NAMESPACE} patch configmap app-config -p '{"data":{"app.properties":"greeting=hi"}}'
    ${k} -n ${DEMO_NAMESPACE} get pods -w
    ${k} -n ${DEMO_NAMESPACE} get events --field-selector reason=ConfigChanged
  rollguard itself:
    ${k} -n ${RELEASE_NS} get pods
    ${k} -n ${RELEASE_NS} logs deployment/${RELEASE}
  The handover demo (db.yaml) needs an application that moves its role: npm start (without --real-node) has one.
Ctrl-C stops the node and the control plane.`);
    await done;
    return 0;
  } catch (err) {
    console.error(`rollguard dev --real-node: ${err instanceof Error ? err.message : String(err)}\n${cluster.logTail(15)}`);
    return 1;
  } finally {
    await cluster.stop();
  }
}

/** A Go tool the project builds and caches (test/env/build-tools.sh): the path of its binary. */
async function tool(root: string, name: string): Promise<string> {
  const { stdout } = await run('bash', [path.join(root, 'test/env/build-tools.sh'), name], { maxBuffer: 16 * 1024 * 1024 });
  return path.join(stdout.trim().split('\n').pop() ?? '', name);
}
