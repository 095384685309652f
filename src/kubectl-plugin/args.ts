import type { AppsWorkloadKind } from '../kube/workloads.js';

export const PLUGIN_USAGE = `Usage:
  kubectl rollguard why <kind>/<name> [-n <namespace>] [-o json]
      whether rollguard manages the workload and if not why not; each ConfigMap and Secret its
      pods read (keys read, the version the pods run, the current one); what rollguard does
      next and when; its last restarts with their reasons, and when the pods were replaced
  kubectl rollguard list [-n <namespace> | -A] [-o json]
      every workload rollguard manages, with one line of state
  (also: rollguard why ..., rollguard list ...)

<kind>: statefulset (sts), deployment (deploy), daemonset (ds), with or without .apps.
Flags: -n/--namespace, -A/--all-namespaces (list), -o/--output json|text,
       --kubeconfig <file>, --context <name>. Only get and list are needed, with your own credentials.`;

/** The plugin's kind names, as kubectl spells them. */
const KINDS: Record<string, AppsWorkloadKind> = {
  statefulset: 'StatefulSet',
  statefulsets: 'StatefulSet',
  sts: 'StatefulSet',
  deployment: 'Deployment',
  deployments: 'Deployment',
  deploy: 'Deployment',
  daemonset: 'DaemonSet',
  daemonsets: 'DaemonSet',
  ds: 'DaemonSet',
};

export interface PluginArgs {
  command: 'why' | 'list' | 'help' | 'version';
  kind?: AppsWorkloadKind;
  name?: string;
  namespace?: string;
  allNamespaces: boolean;
  output: 'text' | 'json';
  kubeconfig?: string;
  context?: string;
}

export class UsageError extends Error {}

/** `sts/web`, `StatefulSet.apps/web`, `deploy/api`: the kind and the name. */
export function parseTarget(text: string): { kind: AppsWorkloadKind; name: string } {
  const slash = text.indexOf('/');
  if (slash <= 0 || slash === text.length - 1 || text.indexOf('/', slash + 1) >= 0) throw new UsageError(`${JSON.stringify(text)} is not <kind>/<name> (e.g. statefulset/web)`);
  const kindText = text.slice(0, slash).toLowerCase().replace(/\.apps(\/v1)?$/, '');
  const kind = KINDS[kindText];
  if (!kind && /^(rollouts?|ro)(\.argoproj\.io(\/v1alpha1)?)?$/.test(kindText)) {
    throw new UsageError(
      `Argo Rollouts' Rollouts are restarted with --argo-rollouts but not explained by why or list yet (docs/argo-rollouts.md): kubectl describe rollout ${text.slice(slash + 1)} shows rollguard's Events`,
    );
  }
  if (!kind) throw new UsageError(`${JSON.stringify(text.slice(0, slash))} is not a kind rollguard restarts (statefulset, deployment, daemonset)`);
  return { kind, name: text.slice(slash + 1) };
}

const VALUED = new Map<string, keyof PluginArgs>([
  ['-n', 'namespace'],
  ['--namespace', 'namespace'],
  ['-o', 'output'],
  ['--output', 'output'],
  ['--kubeconfig', 'kubeconfig'],
  ['--context', 'context'],
]);

/** kubectl's own flag forms: `-n ns`, `-nns`, `--namespace=ns`, `-ojson`. */
export function parsePluginArgs(argv: readonly string[]): PluginArgs {
  const [command, ...rest] = argv;
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') return { command: 'help', allNamespaces: false, output: 'text' };
  if (command === 'version' || command === '--version') return { command: 'version', allNamespaces: false, output: 'text' };
  if (command !== 'why' && command !== 'list') throw new UsageError(`unknown command ${JSON.stringify(command)} (why or list)`);
  const args: PluginArgs = { command, allNamespaces: false, output: 'text' };
  const positional: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === '-A' || arg === '--all-namespaces') {
      args.allNamespaces = true;
      continue;
    }
    if (arg === '-h' || arg === '--help') return { command: 'help', allNamespaces: false, output: 'text' };
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const flag = eq > 0 ? arg.slice(0, eq) : /^-[no]./.test(arg) ? arg.slice(0, 2) : arg;
    const field = VALUED.get(flag);
    if (field === undefined) {
      if (arg.startsWith('-')) throw new UsageError(`unknown flag ${arg}`);
      positional.push(arg);
      continue;
    }
    const value = eq > 0 ? arg.slice(eq + 1) : flag !== arg ? arg.slice(2) : rest[++i];
    if (value === undefined || value === '') throw new UsageError(`${flag} needs a value`);
    if (field === 'output') {
      if (value !== 'json' && value !== 'text') throw new UsageError(`-o ${value}: the output is json or text`);
      args.output = value;
    } else {
      (args as unknown as Record<string, string>)[field] = value;
    }
  }
  if (command === 'why') {
    if (positional.length !== 1) throw new UsageError(`why takes one <kind>/<name>, got ${positional.length === 0 ? 'none' : positional.join(' ')}`);
    if (args.allNamespaces) throw new UsageError('why explains one workload: -A is for list');
    Object.assign(args, parseTarget(positional[0]!));
  } else if (positional.length > 0) {
    throw new UsageError(`list takes no argument, got ${positional.join(' ')}`);
  }
  if (args.allNamespaces && args.namespace !== undefined) throw new UsageError('-n and -A exclude each other');
  return args;
}
