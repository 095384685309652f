/**
 * Every flag of rollguard, in one table: the parser, `--help`, the environment
 * variables and the flag table of docs/configuration.md all come from it.
 */

export type FlagType = 'string' | 'int' | 'number' | 'duration' | 'bool' | 'list' | 'level';

export interface FlagSpec {
  name: string;
  type: FlagType;
  default: string;
  description: string;
  /** bounds for int/number/duration (durations in ms) */
  min?: number;
  max?: number;
  commands: ('serve' | 'dev')[];
}

const BOTH: FlagSpec['commands'] = ['serve', 'dev'];
const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export const FLAGS = [
  { name: 'kubeconfig', type: 'string', default: '', description: 'kubeconfig file; empty: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account', commands: ['serve'] },
  { name: 'namespace', type: 'string', default: '', description: "rollguard's own namespace (TLS Secret, Lease, Events about itself); empty: the pod's namespace", commands: BOTH },
  { name: 'watch-namespaces', type: 'list', default: '', description: 'comma-separated namespaces to watch; empty: all namespaces', commands: BOTH },
  { name: 'webhook-host', type: 'string', default: '0.0.0.0', description: 'address the HTTPS admission server binds', commands: BOTH },
  { name: 'webhook-port', type: 'int', default: '9443', min: 0, max: 65535, description: 'port of the HTTPS admission server (/mutate, /healthz, /readyz)', commands: BOTH },
  { name: 'admin-host', type: 'string', default: '0.0.0.0', description: 'address the plain-HTTP admin server binds', commands: BOTH },
  { name: 'admin-port', type: 'int', default: '8080', min: 0, max: 65535, description: 'port of the plain-HTTP admin server (/metrics, /status, /healthz, /readyz)', commands: BOTH },
  { name: 'service-name', type: 'string', default: 'rollguard-webhook', description: 'Service in front of the webhook; names the serving certificate <service>.<namespace>.svc', commands: BOTH },
  { name: 'webhook-configuration', type: 'string', default: 'rollguard', description: 'MutatingWebhookConfiguration whose caBundle rollguard keeps; empty: inject nothing', commands: BOTH },
  { name: 'eviction-webhook-configuration', type: 'string', default: 'rollguard', description: "ValidatingWebhookConfiguration of the eviction guard whose caBundle rollguard keeps while it exists; empty: inject nothing", commands: BOTH },
  { name: 'tls-secret', type: 'string', default: 'rollguard-webhook-tls', description: 'Secret that holds the CA and the serving certificate', commands: BOTH },
  { name: 'tls-cert-file', type: 'string', default: '', description: 'serving certificate file (e.g. from cert-manager); with --tls-key-file it disables self-managed TLS', commands: BOTH },
  { name: 'tls-key-file', type: 'string', default: '', description: 'private key file for --tls-cert-file', commands: BOTH },
  { name: 'tls-extra-dns-names', type: 'list', default: '', description: 'extra DNS names in the serving certificate', commands: BOTH },
  { name: 'tls-extra-ips', type: 'list', default: '', description: 'extra IP addresses in the serving certificate', commands: BOTH },
  { name: 'ca-validity', type: 'duration', default: '26280h', min: 60_000, description: 'lifetime of the self-managed CA (3 years)', commands: BOTH },
  { name: 'cert-validity', type: 'duration', default: '2160h', min: 1_000, description: 'lifetime of the serving certificate (90 days)', commands: BOTH },
  { name: 'cert-renew-before', type: 'duration', default: '720h', min: 1_000, description: 'renew the serving certificate this long before it expires; the CA is renewed when a third of its lifetime is left', commands: BOTH },
  { name: 'key-bits', type: 'int', default: '2048', min: 2048, max: 8192, description: 'RSA key size of the CA and serving keys', commands: BOTH },
  { name: 'debounce', type: 'duration', default: '5s', min: 0, description: 'a burst of changes to the objects of one workload (StatefulSet, Deployment, DaemonSet, Rollout) within this window makes one rollout', commands: BOTH },
  { name: 'min-restart-interval', type: 'duration', default: '1m', min: 0, description: 'at most one restart per workload in this window (counted from its last restart, kept on the workload); the last change wins when it passes (0: no floor)', commands: BOTH },
  { name: 'max-restarts-per-second', type: 'number', default: '5', min: 0.01, description: 'global pace of restarts that rollguard starts', commands: BOTH },
  { name: 'reference-wait', type: 'duration', default: '1s', min: 0, max: 2_000, description: "at admission, how long a write waits for the caches to bring a ConfigMap or Secret it references and they do not know (one created just before its workload is still on the watch); 0: no wait: it is written absent and its arrival rolls the workload", commands: BOTH },
  { name: 'workers', type: 'int', default: '4', min: 1, max: 64, description: 'workloads reconciled in parallel, at least (fewer only while the API server answers 429)', commands: BOTH },
  { name: 'max-workers', type: 'int', default: '32', min: 1, max: 64, description: 'workloads the restarter reconciles in parallel at most: it adds workers past --workers when the API server answers too slowly for --max-restarts-per-second to be kept (half the count at most each second, none while reconciles wait for their turn of the pace); at or below --workers: always --workers', commands: BOTH },
  { name: 'resync-period', type: 'duration', default: '10m', min: 0, description: 're-check every opted-in workload this often (0: never)', commands: BOTH },
  { name: 'watch-idle-timeout', type: 'duration', default: '2m', min: 1_000, description: 'a watch silent this long (two bookmark intervals) is dead and restarted; applies once the API server has sent a bookmark', commands: BOTH },
  { name: 'leader-election', type: 'bool', default: 'true', description: 'elect one leader through a Lease; only the leader reconciles', commands: BOTH },
  { name: 'lease-name', type: 'string', default: 'rollguard-leader', description: 'name of the coordination.k8s.io Lease', commands: BOTH },
  { name: 'lease-duration', type: 'duration', default: '15s', min: 1_000, description: 'how long a lease holds without renewal', commands: BOTH },
  { name: 'renew-deadline', type: 'duration', default: '10s', min: 500, description: 'the leader gives up leadership when it cannot renew within this time', commands: BOTH },
  { name: 'retry-period', type: 'duration', default: '2s', min: 100, description: 'how often candidates try to take the lease and the leader renews it', commands: BOTH },
  { name: 'shutdown-delay', type: 'duration', default: '10s', min: 0, description: 'after SIGTERM, keep serving this long while endpoints and the API server move away', commands: BOTH },
  { name: 'shutdown-timeout', type: 'duration', default: '25s', min: 1_000, description: 'exit by this time after SIGTERM, whatever is left (fits terminationGracePeriodSeconds 30)', commands: BOTH },
  { name: 'rollout-min-step-interval', type: 'duration', default: '10s', min: 0, description: 'health-gated rollouts: least time between two partition steps of one StatefulSet', commands: BOTH },
  { name: 'rollout-min-ready', type: 'duration', default: '10s', min: 0, description: "health-gated rollouts: how long a pod must be Ready before the next step, when the set's minReadySeconds is 0", commands: BOTH },
  { name: 'eviction-defer-max', type: 'duration', default: '10m', min: 0, description: 'primary handover: the longest an eviction of a primary is answered 429 (handover in progress) before it is allowed with a warning', commands: BOTH },
  { name: 'allowed-probe-hosts', type: 'list', default: '', description: "health-gated rollouts: hosts a health URL may name besides a Service of the set's namespace or a pod of the set (resolved through DNS; link-local and metadata addresses stay refused); empty: none", commands: BOTH },
  { name: 'compat', type: 'string', default: '', description: "stackable: also honour Stackable commons-operator's restarter (label restarter.stackable.tech/enabled, its annotation keys and values, its opt-outs) and evict pods at their restarter.stackable.tech/expires-at.* times; empty: rollguard's contract only", commands: BOTH },
  { name: 'argo-rollouts', type: 'bool', default: 'false', description: "also restart opted-in Argo Rollouts (argoproj.io/v1alpha1 Rollout with its own spec.template) through their template annotations; needs the Rollout CRD installed and RBAC for rollouts (docs/argo-rollouts.md)", commands: BOTH },
  { name: 'log-level', type: 'level', default: 'info', description: `log level: ${LOG_LEVELS.join(', ')}`, commands: BOTH },
  { name: 'real-node', type: 'bool', default: 'false', description: 'rollguard dev: run the demo on a real node (containerd, a kubelet) with rollguard installed by its Helm chart; Linux and root', commands: ['dev'] },
  { name: 'dev-dir', type: 'string', default: 'certs/dev', description: 'rollguard dev: where the local control plane keeps its PKI, kubeconfig and logs', commands: ['dev'] },
] as const satisfies readonly FlagSpec[];

type FlagName = (typeof FLAGS)[number]['name'];
type Camel<S extends string> = S extends `${infer H}-${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;
type ValueOf<T extends FlagType> = T extends 'int' | 'number' | 'duration'
  ? number
  : T extends 'bool'
    ? boolean
    : T extends 'list'
      ? string[]
      : T extends 'level'
        ? LogLevel
        : string;
type Spec<N extends FlagName> = Extract<(typeof FLAGS)[number], { name: N }>;

/** Parsed flags; durations are in milliseconds. */
export type Config = { [N in FlagName as Camel<N>]: ValueOf<Spec<N>['type']> };

export class ConfigError extends Error {}

/** `--tls-cert-file` → `ROLLGUARD_TLS_CERT_FILE` */
export function envName(flag: string): string {
  return `ROLLGUARD_${flag.toUpperCase().replaceAll('-', '_')}`;
}

function camel(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** "1h30m", "500ms", "10s", or a bare number of seconds. */
export function parseDuration(text: string): number | undefined {
  const t = text.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t) * 1_000;
  const parts = [...t.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== t) return undefined;
  return parts.reduce((sum, p) => sum + Number(p[1]) * (DURATION_UNITS[p[2]!] ?? 0), 0);
}

function parseValue(spec: FlagSpec, raw: string, origin: string): number | boolean | string | string[] {
  const fail = (why: string): never => {
    throw new ConfigError(`invalid ${origin}=${JSON.stringify(raw)}: ${why}`);
  };
  const bounded = (n: number, unit = ''): number => {
    if (spec.min !== undefined && n < spec.min) fail(`must be at least ${spec.min}${unit}`);
    if (spec.max !== undefined && n > spec.max) fail(`must be at most ${spec.max}${unit}`);
    return n;
  };
  switch (spec.type) {
    case 'string':
      return raw;
    case 'list':
      return raw.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
    case 'bool':
      if (['true', '1', 'yes'].includes(raw)) return true;
      if (['false', '0', 'no'].includes(raw)) return false;
      return fail('expected true or false');
    case 'int': {
      if (!/^-?\d+$/.test(raw.trim())) fail('expected a whole number');
      return bounded(Number(raw));
    }
    case 'number': {
      const n = Number(raw);
      if (raw.trim() === '' || !Number.isFinite(n)) fail('expected a number');
      return bounded(n);
    }
    case 'duration': {
      const ms = parseDuration(raw);
      if (ms === undefined) return fail('expected a duration such as 500ms, 10s, 5m or 1h');
      return bounded(ms, ' ms');
    }
    case 'level':
      if (!(LOG_LEVELS as readonly string[]).includes(raw)) fail(`expected one of ${LOG_LEVELS.join(', ')}`);
      return raw;
  }
}

export interface ParsedArgs {
  config: Config;
  /** arguments that are not flags */
  positional: string[];
  help: boolean;
  version: boolean;
  /** flags set by the command line or the environment, not left at their defaults */
  given: Set<string>;
}

/**
 * Flags win over environment variables, which win over defaults.
 * Throws ConfigError naming the flag (or variable) and the reason.
 */
export function parseArgs(argv: string[], env: NodeJS.ProcessEnv, command: 'serve' | 'dev'): ParsedArgs {
  const specs = FLAGS.filter((f) => (f.commands as readonly string[]).includes(command));
  const byName = new Map<string, FlagSpec>(specs.map((s) => [s.name, s]));
  const values: Record<string, number | boolean | string | string[]> = {};
  const given = new Set<string>();
  for (const spec of specs) {
    const fromEnv = env[envName(spec.name)];
    if (fromEnv !== undefined) given.add(spec.name);
    values[camel(spec.name)] =
      fromEnv !== undefined ? parseValue(spec, fromEnv, envName(spec.name)) : parseValue(spec, spec.default, `default of --${spec.name}`);
  }
  const positional: string[] = [];
  let help = false;
  let version = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') {
      help = true;
      continue;
    }
    if (arg === '--version') {
      version = true;
      continue;
    }
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const spec = byName.get(name);
    if (!spec) throw new ConfigError(`unknown flag --${name} for "rollguard ${command}" (see rollguard ${command} --help)`);
    let raw: string;
    if (eq !== -1) raw = arg.slice(eq + 1);
    else if (spec.type === 'bool' && (argv[i + 1] === undefined || argv[i + 1]!.startsWith('--'))) raw = 'true';
    else {
      const next = argv[i + 1];
      if (next === undefined) throw new ConfigError(`flag --${name} needs a value`);
      raw = next;
      i++;
    }
    values[camel(spec.name)] = parseValue(spec, raw, `--${name}`);
    given.add(spec.name);
  }
  const config = values as unknown as Config;
  checkCombinations(config, command);
  return { config, positional, help, version, given };
}

function checkCombinations(c: Config, command: 'serve' | 'dev'): void {
  if (command === 'serve' || command === 'dev') {
    if ((c.tlsCertFile === '') !== (c.tlsKeyFile === '')) {
      throw new ConfigError('--tls-cert-file and --tls-key-file go together: give both or neither');
    }
    if (c.renewDeadline >= c.leaseDuration) {
      throw new ConfigError(`--renew-deadline (${c.renewDeadline} ms) must be shorter than --lease-duration (${c.leaseDuration} ms)`);
    }
    if (c.retryPeriod >= c.renewDeadline) {
      throw new ConfigError(`--retry-period (${c.retryPeriod} ms) must be shorter than --renew-deadline (${c.renewDeadline} ms)`);
    }
    if (c.shutdownDelay >= c.shutdownTimeout) {
      throw new ConfigError(`--shutdown-delay (${c.shutdownDelay} ms) must be shorter than --shutdown-timeout (${c.shutdownTimeout} ms)`);
    }
    if (c.certRenewBefore >= c.certValidity) {
      throw new ConfigError(`--cert-renew-before (${c.certRenewBefore} ms) must be shorter than --cert-validity (${c.certValidity} ms)`);
    }
    if (c.compat !== '' && c.compat !== 'stackable') {
      throw new ConfigError(`invalid --compat=${JSON.stringify(c.compat)}: expected stackable or empty`);
    }
    for (const ip of c.tlsExtraIps) {
      if (!/^[\d.]+$|^[0-9a-fA-F:]+$/.test(ip)) throw new ConfigError(`invalid --tls-extra-ips entry ${JSON.stringify(ip)}: not an IP address`);
    }
  }
}

/** The flag reference of `--help` and of docs/configuration.md, from the same table. */
export function flagHelp(command: 'serve' | 'dev'): string {
  return FLAGS.filter((f) => (f.commands as readonly string[]).includes(command))
    .map((f) => {
      const def = f.default === '' ? '' : ` (default ${f.default})`;
      return `  --${f.name} <${f.type}>\n      ${f.description}${def}\n      env: ${envName(f.name)}`;
    })
    .join('\n');
}

export function flagMarkdownTable(): string {
  const rows = FLAGS.map(
    (f) => `| \`--${f.name}\` | \`${envName(f.name)}\` | ${f.default === '' ? '' : `\`${f.default}\``} | ${f.description} |`,
  );
  return ['| flag | environment | default | meaning |', '| --- | --- | --- | --- |', ...rows].join('\n');
}
