import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { buildNodeImages, startRealCluster } from '../../src/dev/real-node/cluster.js';
import { goTool } from '../env/tools.js';
import { NEXT_TAG } from './images.js';

declare module 'vitest' {
  export interface ProvidedContext {
    realKubeconfigPath: string;
    realKubectlPath: string;
    realClusterDir: string;
    helmPath: string;
  }
}

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** One real node for the suite: the images built from this clone, then the cluster. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let started = Date.now();
  // a second tag of the same image: the upgrade check rolls rollguard onto a new tag
  const archives = buildNodeImages(REPO_ROOT, [NEXT_TAG]);
  console.log(`[e2e] images built in ${Date.now() - started} ms`);
  const helm = await goTool('helm');
  started = Date.now();
  // no year-long grace for kubelet tokens: a token past its expirationSeconds is refused, as
  // the token check needs (real clusters keep the grace on by default)
  const cluster = await startRealCluster({ imageArchives: archives, apiServerArgs: ['--service-account-extend-token-expiration=false'] });
  console.log(`[e2e] real node Ready at ${cluster.server} in ${Date.now() - started} ms (logs in ${cluster.dir})`);
  project.provide('realKubeconfigPath', cluster.kubeconfigPath);
  project.provide('realKubectlPath', cluster.kubectlPath);
  project.provide('realClusterDir', cluster.dir);
  project.provide('helmPath', helm);
  const onSignal = (): void => {
    void cluster.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return async () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cluster.stop();
  };
}
