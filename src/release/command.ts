import { AppsV1Api, KubeConfig, type V1StatefulSet } from '@kubernetes/client-node';
import { errorText, isConflict } from '../kube/api-status.js';
import { ENABLED_LABEL } from '../restarter/annotations.js';
import { releaseOf } from './plan.js';

export const RELEASE_USAGE = `Usage: rollguard release [--kubeconfig=<file>] [--namespaces=<a,b>] [--dry-run]

Hands the partitions of health-gated StatefulSets back before an uninstall: each set labelled
rollguard.io/enabled=true with rollguard.io/rollout: health-gated gets partition 0 and loses the
rollguard.io/rollout annotation, so nothing stays frozen at partition = replicas. Run it with your
own credentials (rollguard's service account may not remove that annotation), after scaling
rollguard to 0 or uninstalling it, or before: a rollguard still running leaves a released set alone.`;

const CONFLICT_RETRIES = 3;

interface ReleaseOptions {
  kubeconfig: string;
  namespaces: string[];
  dryRun: boolean;
}

function parseReleaseArgs(argv: string[]): ReleaseOptions | string {
  const options: ReleaseOptions = { kubeconfig: '', namespaces: [], dryRun: false };
  for (const arg of argv) {
    const [flag, value] = arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (flag === '--dry-run' && value === undefined) options.dryRun = true;
    else if (flag === '--kubeconfig' && value) options.kubeconfig = value;
    else if (flag === '--namespaces' && value) options.namespaces = value.split(',').map((n) => n.trim()).filter((n) => n !== '');
    else return `unknown or incomplete argument ${JSON.stringify(arg)}`;
  }
  return options;
}

async function listGated(apps: AppsV1Api, namespaces: string[]): Promise<V1StatefulSet[]> {
  const labelSelector = `${ENABLED_LABEL}=true`;
  if (namespaces.length === 0) return (await apps.listStatefulSetForAllNamespaces({ labelSelector })).items;
  const lists = await Promise.all(namespaces.map((namespace) => apps.listNamespacedStatefulSet({ namespace, labelSelector })));
  return lists.flatMap((l) => l.items);
}

/** `rollguard release`: prints one line per set; exit 1 when a set could not be released. */
export async function release(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(RELEASE_USAGE);
    return 0;
  }
  const options = parseReleaseArgs(argv);
  if (typeof options === 'string') {
    console.error(`rollguard release: ${options}\n\n${RELEASE_USAGE}`);
    return 2;
  }
  const kc = new KubeConfig();
  if (options.kubeconfig) kc.loadFromFile(options.kubeconfig);
  else kc.loadFromDefault();
  const apps = kc.makeApiClient(AppsV1Api);
  let failed = 0;
  let released = 0;
  for (const listed of await listGated(apps, options.namespaces)) {
    let set = listed;
    for (let attempt = 1; ; attempt++) {
      const plan = releaseOf(set);
      if (!plan) break;
      const what = `StatefulSet ${plan.namespace}/${plan.name}: partition ${plan.partition ?? 'unset'} → ${plan.ops.some((o) => o.op === 'replace') ? 0 : 'as it is'}, rollguard.io/rollout removed`;
      if (options.dryRun) {
        console.log(`would release ${what}`);
        break;
      }
      try {
        await apps.patchNamespacedStatefulSet({ name: plan.name, namespace: plan.namespace, body: plan.ops });
        console.log(`released ${what}`);
        released++;
        break;
      } catch (err) {
        if (isConflict(err) && attempt < CONFLICT_RETRIES) {
          set = await apps.readNamespacedStatefulSet({ name: plan.name, namespace: plan.namespace });
          continue;
        }
        console.error(`rollguard release: StatefulSet ${plan.namespace}/${plan.name}: ${errorText(err)}`);
        failed++;
        break;
      }
    }
  }
  if (!options.dryRun) console.log(`${released} health-gated StatefulSet(s) released${failed ? `, ${failed} failed` : ''}`);
  return failed > 0 ? 1 : 0;
}
