import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { KubeConfig } from '@kubernetes/client-node';
import { startControlPlane } from '../../src/dev/control-plane.js';
import { buildRollguard } from './rollguard-process.js';
import { holdStatefulSetParams } from './statefulset-params.js';

declare module 'vitest' {
  export interface ProvidedContext {
    kubeconfigPath: string;
    apiServer: string;
    controlPlaneDir: string;
  }
}

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
/**
 * Tools that test files ask for (helm for the manifest and RBAC tests, promtool for the alerts'
 * cases, kubectl-kuttl for the kuttl cases). Each script builds its tool with Go on first use and
 * is instant once cached; a cold build takes minutes on two cores (promtool's about 6.5, see
 * docs/development.md), more than a hook's or a test's timeout, so it happens here, where there
 * is none, and `npm test` needs no build run before it.
 */
const TOOL_SCRIPTS: [string, ...string[]][] = [
  ['test/env/build-tools.sh', 'helm'],
  ['test/env/build-tools.sh', 'promtool'],
  ['src/dev/build-kuttl.sh'],
  // Argo Rollouts' Rollout CRD (a module download, no build) for the Rollout tests
  ['test/env/build-tools.sh', 'argo-rollouts-crd'],
];

function buildTools(): void {
  for (const [script, ...args] of TOOL_SCRIPTS) {
    execFileSync('bash', [path.join(REPO_ROOT, script), ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  }
}

/** One real control plane for the whole integration project; each test file makes its own namespace. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started = Date.now();
  // tests that need rollguard as a real process (signals, two replicas) run the compiled CLI
  buildRollguard();
  buildTools();
  // builds etcd and Kubernetes first when they are not cached
  const cp = await startControlPlane();
  console.log(`[control-plane] ready at ${cp.server} in ${Date.now() - started} ms (logs in ${cp.dir})`);
  // before any test file installs a fence, and removes it
  const kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfigPath);
  await holdStatefulSetParams(kc).catch(async (err: unknown) => {
    await cp.stop();
    throw err;
  });
  project.provide('kubeconfigPath', cp.kubeconfigPath);
  project.provide('apiServer', cp.server);
  project.provide('controlPlaneDir', cp.dir);
  const onSignal = (): void => {
    void cp.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return async () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cp.stop();
  };
}
