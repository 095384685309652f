import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { ApiextensionsV1Api, loadYaml, type KubeConfig, type V1CustomResourceDefinition } from '@kubernetes/client-node';
import { statusCode } from '../kube/api-status.js';
import { devScript } from './control-plane.js';
import { waitFor } from './wait.js';

/** The name of Argo Rollouts' Rollout CRD. */
export const ROLLOUT_CRD_NAME = 'rollouts.argoproj.io';

/**
 * The path of Argo Rollouts' Rollout CRD manifest: fetch-argo-crd.sh downloads the
 * github.com/argoproj/argo-rollouts module through the Go module proxy once and keeps the YAML
 * under ~/.cache/rollguard. Only the CRD: the Argo controller is not built or run.
 */
export function argoRolloutsCrdFile(): string {
  const out = execFileSync('bash', [devScript('fetch-argo-crd.sh')], { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
  const file = out.trim().split('\n').pop() ?? '';
  if (!fs.existsSync(file)) throw new Error(`src/dev/fetch-argo-crd.sh printed "${file}", which is no file`);
  return file;
}

/** Creates the Rollout CRD (kept when it exists) and waits until the API server serves it (Established). */
export async function installArgoRolloutsCrd(kc: KubeConfig, opts: { timeoutMs?: number } = {}): Promise<void> {
  const api = kc.makeApiClient(ApiextensionsV1Api);
  const crd = loadYaml<V1CustomResourceDefinition>(fs.readFileSync(argoRolloutsCrdFile(), 'utf8'));
  try {
    await api.createCustomResourceDefinition({ body: crd });
  } catch (err) {
    if (statusCode(err) !== 409) throw err;
  }
  await waitFor(
    `CRD ${ROLLOUT_CRD_NAME} Established`,
    async () => {
      const found = await api.readCustomResourceDefinition({ name: ROLLOUT_CRD_NAME });
      return found.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ? true : undefined;
    },
    { timeoutMs: opts.timeoutMs ?? 30_000, intervalMs: 200 },
  );
}
