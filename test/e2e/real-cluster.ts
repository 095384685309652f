import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { inject, onTestFailed } from 'vitest';
import { waitFor } from '../env/wait.js';

const run = promisify(execFile);

export interface RealClusterClient {
  kubeconfigPath: string;
  /** kubectl against the real cluster; the error carries its stderr */
  kubectl(args: string[], input?: string): Promise<string>;
  /** kubectl … -o json, parsed */
  kubectlJson<T>(args: string[]): Promise<T>;
  helm(args: string[]): Promise<string>;
}

async function tool(file: string, args: string[], input?: string): Promise<string> {
  try {
    const child = run(file, args, { maxBuffer: 64 * 1024 * 1024 });
    if (input !== undefined) {
      child.child.stdin?.end(input);
    }
    return (await child).stdout;
  } catch (err) {
    const { stderr = '', stdout = '' } = err as { stderr?: string; stdout?: string };
    throw new Error(`${path.basename(file)} ${args.join(' ')} failed: ${(stderr + stdout).trim() || String(err)}`, { cause: err });
  }
}

/** The real node's cluster that the e2e project's global setup started. */
export function realCluster(): RealClusterClient {
  const kubeconfigPath = inject('realKubeconfigPath');
  const kubectlPath = inject('realKubectlPath');
  const helmPath = inject('helmPath');
  const kubectl = (args: string[], input?: string): Promise<string> => tool(kubectlPath, ['--kubeconfig', kubeconfigPath, ...args], input);
  return {
    kubeconfigPath,
    kubectl,
    kubectlJson: async <T>(args: string[]): Promise<T> => JSON.parse(await kubectl([...args, '-o', 'json'])) as T,
    helm: (args: string[]) => tool(helmPath, ['--kubeconfig', kubeconfigPath, ...args]),
  };
}

/** Called in a test (or beforeEach): on its failure, prints the tail of every process log of the real cluster. */
export function printRealClusterLogsOnFailure(lines = 40): void {
  onTestFailed(() => {
    const dir = inject('realClusterDir');
    for (const name of ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'containerd', 'kubelet', 'kube-proxy']) {
      const file = path.join(dir, `${name}.log`);
      if (!fs.existsSync(file)) continue;
      console.error(`--- last ${lines} lines of ${name} ---\n${fs.readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n')}`);
    }
  });
}

/** Waits until namespace `name` is absent or Active: a namespace still terminating refuses what a next file creates in it. */
export async function namespaceSettled(cluster: RealClusterClient, name: string): Promise<void> {
  await waitFor(`namespace ${name} absent or Active`, async () => {
    const phase = (await cluster.kubectl(['get', 'namespace', name, '--ignore-not-found', '-o', 'jsonpath={.status.phase}'])).trim();
    return phase === '' || phase === 'Active' ? true : undefined;
  }, { timeoutMs: 180_000, intervalMs: 1_000 });
}

/** Creates each item of a v1 List in its order (kubectl prints a List's objects as one JSON stream, not a List); the objects as stored. */
export async function createEach<T>(cluster: RealClusterClient, list: string): Promise<T[]> {
  const made: T[] = [];
  for (const item of (JSON.parse(list) as { items: unknown[] }).items) made.push(JSON.parse(await cluster.kubectl(['create', '-f', '-', '-o', 'json'], JSON.stringify(item))) as T);
  return made;
}
