import { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { errorText } from '../kube/api-status.js';
import { loadKubeConfig } from '../kube/kubeconfig.js';
import { isTerminating } from '../rollout/pods.js';
import { matches } from './selector.js';
import { handoverSettings } from './settings.js';
import { HANDOVER_REQUEST_ANNOTATION, HANDOVER_REQUEST_VALUE, setPodAnnotation } from './state.js';

/**
 * `rollguard handover <namespace>/<set>`: asks for a handover away from the set's primary, the
 * same as `kubectl annotate pod <primary> rollguard.io/handover=requested`; rollguard's leader
 * performs it, and the Events on the set say how it went.
 */
export async function requestHandover(args: readonly string[]): Promise<number> {
  const target = args.find((a) => !a.startsWith('--'));
  const kubeconfig = args.find((a) => a.startsWith('--kubeconfig='))?.slice('--kubeconfig='.length);
  const unknown = args.find((a) => a.startsWith('--') && !a.startsWith('--kubeconfig='));
  const fail = (message: string, code = 1): number => {
    console.error(`rollguard handover: ${message}`);
    return code;
  };
  if (unknown) return fail(`unknown flag ${unknown} (only --kubeconfig=<file>)`, 2);
  const m = target === undefined ? null : /^([a-z0-9-]+)\/([a-z0-9.-]+)$/.exec(target);
  if (!m) return fail('expected <namespace>/<statefulset>, e.g. rollguard handover shop/db', 2);
  const [namespace, name] = [m[1]!, m[2]!];
  const kc = loadKubeConfig(kubeconfig ?? '');
  const apps = kc.makeApiClient(AppsV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  try {
    const set = await apps.readNamespacedStatefulSet({ name, namespace });
    const parsed = handoverSettings(set);
    if (parsed === undefined) return fail(`StatefulSet ${namespace}/${name} has no rollguard.io/primary-selector: it asks for no handover`);
    if (!parsed.ok) return fail(`StatefulSet ${namespace}/${name}: ${parsed.reason}`);
    const uid = set.metadata?.uid;
    const pods = (await core.listNamespacedPod({ namespace })).items.filter(
      (p) => !isTerminating(p) && p.metadata?.ownerReferences?.some((r) => r.controller === true && r.uid === uid) && matches(parsed.settings.selector, p.metadata?.labels),
    );
    if (pods.length !== 1) {
      return fail(`${pods.length} pods of ${namespace}/${name} match the primary selector ${JSON.stringify(parsed.settings.selectorText)}: ${pods.map((p) => p.metadata?.name).join(', ') || 'none'}; exactly one must`);
    }
    const primary = pods[0]!.metadata!.name!;
    await setPodAnnotation((ops) => core.patchNamespacedPod({ name: primary, namespace, body: ops }), HANDOVER_REQUEST_ANNOTATION, HANDOVER_REQUEST_VALUE);
    console.log(`requested a handover away from pod ${namespace}/${primary}, the primary of StatefulSet ${name}; rollguard's leader performs it.`);
    console.log(`  kubectl -n ${namespace} get events --field-selector involvedObject.name=${name}`);
    return 0;
  } catch (err) {
    return fail(`${namespace}/${name}: ${errorText(err)}`);
  }
}
