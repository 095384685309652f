import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { startControlPlane } from '../../src/dev/control-plane.js';
import { buildRollguard } from './rollguard-process.js';

declare module 'vitest' {
  export interface ProvidedContext {
    kubeconfigPath: string;
    apiServer: string;
    controlPlaneDir: string;
  }
}

/** One real control plane for the whole integration project; each test file makes its own namespace. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started = Date.now();
  // tests that need rollguard as a real process (signals, two replicas) run the compiled CLI
  buildRollguard();
  // promtool's cold build takes minutes (docs/development.md), more than a test's hook may: here, with no timeout
  execFileSync('bash', [path.join(path.dirname(fileURLToPath(import.meta.url)), 'build-tools.sh'), 'promtool'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const cp = await startControlPlane();
  console.log(`[control-plane] ready at ${cp.server} in ${Date.now() - started} ms (logs in ${cp.dir})`);
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
