import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { KubernetesObjectApi, loadAllYaml, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';

/** The repository `rollguard dev` runs from: it holds the demo manifests and the kuttl cases. */
export function repoRoot(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  for (let dir = here; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'deploy', 'examples'))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`deploy/examples not found above ${here}: rollguard dev runs from a clone of the repository (the container image holds neither the demo nor the control plane's build scripts)`);
  }
}

/** Creates every object of the folder's YAML files in `namespace`; returns "Kind/name" of each. */
export async function applyExamples(kc: KubeConfig, dir: string, namespace: string): Promise<string[]> {
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
    obj.metadata = { ...obj.metadata, namespace };
    await client.create(obj);
    applied.push(`${obj.kind}/${obj.metadata.name}`);
  }
  return applied;
}
