import { errorText } from '../kube/api-status.js';
import { loadKubeConfig } from '../kube/kubeconfig.js';
import { VERSION } from '../version.js';
import { explainWorkload } from '../explain/explain.js';
import { renderExplanation, renderList } from '../explain/render.js';
import { PLUGIN_USAGE, UsageError, parsePluginArgs } from './args.js';
import { PluginReader } from './reader.js';

/**
 * `kubectl rollguard why|list` (and `rollguard why|list`): reads with the user's kubeconfig,
 * explains with the pure explain/ functions, prints text or JSON. `name` is how the command is
 * called, for its messages. Exit 0 with an answer (also "not managed"), 1 when the cluster could
 * not be read, 2 for a usage error.
 */
export async function runPlugin(argv: readonly string[], name = 'kubectl rollguard'): Promise<number> {
  let args;
  try {
    args = parsePluginArgs(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(`${name}: ${err.message}\n\n${PLUGIN_USAGE}`);
    return 2;
  }
  if (args.command === 'help') {
    console.log(PLUGIN_USAGE);
    return 0;
  }
  if (args.command === 'version') {
    console.log(VERSION);
    return 0;
  }
  let namespace = args.namespace;
  try {
    const kc = loadKubeConfig(args.kubeconfig ?? '');
    if (args.context !== undefined) {
      if (!kc.getContexts().some((c) => c.name === args.context)) throw new UsageError(`no context ${JSON.stringify(args.context)} in the kubeconfig`);
      kc.setCurrentContext(args.context);
    }
    namespace ??= kc.getContextObject(kc.getCurrentContext())?.namespace || 'default';
    const reader = new PluginReader(kc);
    if (args.command === 'why') {
      const explanation = explainWorkload(await reader.facts(args.kind!, namespace, args.name!));
      console.log(args.output === 'json' ? JSON.stringify(explanation, null, 2) : renderExplanation(explanation));
      return explanation.state === 'not-found' ? 1 : 0;
    }
    const explanations = (await reader.allFacts(args.allNamespaces ? undefined : namespace)).map(explainWorkload);
    console.log(args.output === 'json' ? JSON.stringify(explanations, null, 2) : renderList(explanations));
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`${name}: ${err.message}`);
      return 2;
    }
    console.error(`${name}: ${errorText(err)}`);
    return 1;
  }
}
