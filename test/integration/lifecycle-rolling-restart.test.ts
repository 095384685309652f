import { AdmissionregistrationV1Api, type KubeConfig, type V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startBalancer, type Balancer } from '../env/tcp-balancer.js';
import { freePort } from '../env/ports.js';
import { startRollguardProcess, printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { apiServerMetricsText } from '../env/rollouts.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';

/** Small durations: a drain of 2 s, leases that hand over in seconds, no debounce. */
const LIFECYCLE_ARGS = [
  '--shutdown-delay=2s',
  '--shutdown-timeout=15s',
  '--lease-duration=4s',
  '--renew-deadline=3s',
  '--retry-period=500ms',
  '--debounce=0s',
];
const REPLICAS = ['a', 'b'] as const;
/** Each replica is restarted this often: a, b, a, b. */
const ROUNDS = 2;
/** Clients writing StatefulSets at once: the API server keeps about as many connections to the webhook. */
const WRITERS = 3;
/** A replica asked to stop exits by its --shutdown-timeout; this is that plus room for a loaded machine. */
const EXIT_DEADLINE_MS = 20_000;
/** Writes the load must have made before the restarts begin, so connections to both replicas exist. */
const WARM_UP_WRITES = 20;
const WEBHOOK_TIMEOUT_SECONDS = 5;
const CONFIG_MAP = 'load-config';
const TEST_TIMEOUT_MS = 240_000;

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

interface Family {
  type: string;
  help?: string;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_PAIR = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,\s*)?/;
const METRIC_TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
/** Samples a family of each type may have besides its own name. */
const SUFFIXES: Record<string, string[]> = { histogram: ['_bucket', '_sum', '_count', '_created'], summary: ['_sum', '_count', '_created'], counter: ['_created'] };
const SAMPLE_SUFFIXES = ['_bucket', '_sum', '_count', '_created'];

/** A float as Prometheus reads one (Go's ParseFloat): NaN and Inf in any case; prom-client writes "Nan". */
function sampleValue(text: string, line: string): number {
  if (/^nan$/i.test(text)) return NaN;
  const infinity = /^([+-]?)inf(inity)?$/i.exec(text);
  if (infinity) return infinity[1] === '-' ? -Infinity : Infinity;
  const n = Number(text);
  if (text === '' || Number.isNaN(n)) throw new Error(`not a sample value: ${JSON.stringify(text)} in ${JSON.stringify(line)}`);
  return n;
}

/**
 * The Prometheus text format (version 0.0.4), strictly: every sample belongs to a family whose
 * TYPE came before it, names and labels are well formed, values are floats. Throws on the first fault.
 */
function parsePrometheusText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const familyOf = (sampleName: string): Family | undefined => {
    const exact = families.get(sampleName);
    if (exact) return exact;
    for (const suffix of SAMPLE_SUFFIXES) {
      if (!sampleName.endsWith(suffix)) continue;
      const family = families.get(sampleName.slice(0, -suffix.length));
      if (family && (SUFFIXES[family.type] ?? []).includes(suffix)) return family;
    }
    return undefined;
  };
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
      if (!m) continue;
      const [, keyword, name, rest = ''] = m;
      if (!METRIC_NAME.test(name!)) throw new Error(`bad metric name in ${JSON.stringify(line)}`);
      if (keyword === 'TYPE') {
        if (!METRIC_TYPES.has(rest)) throw new Error(`unknown type in ${JSON.stringify(line)}`);
        const family = families.get(name!);
        if (family && family.samples.length > 0) throw new Error(`TYPE after samples: ${JSON.stringify(line)}`);
        families.set(name!, { ...(family ?? { samples: [] }), type: rest });
      } else {
        families.set(name!, { ...(families.get(name!) ?? { type: 'untyped', samples: [] }), help: rest });
      }
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(-?\d+))?$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${JSON.stringify(line)}`);
    const [, name, labelText, value] = m;
    const labels: Record<string, string> = {};
    let rest = (labelText ?? '{}').slice(1, -1).trim();
    while (rest.length > 0) {
      const pair = LABEL_PAIR.exec(rest);
      if (!pair) throw new Error(`bad labels in ${JSON.stringify(line)}`);
      labels[pair[1]!] = pair[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
      rest = rest.slice(pair[0].length);
    }
    const family = familyOf(name!);
    if (!family) throw new Error(`sample of a metric with no TYPE before it: ${JSON.stringify(line)}`);
    family.samples.push({ name: name!, labels, value: sampleValue(value!, line) });
  }
  return families;
}

/** The sum of the samples of one family whose labels include `match`. */
function total(families: Map<string, Family>, name: string, match: Record<string, string> = {}): number {
  const samples = families.get(name)?.samples ?? [];
  return samples
    .filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

/** GET /metrics of the API server with the admin client's credentials. */
async function apiServerMetrics(kc: KubeConfig): Promise<Map<string, Family>> {
  return parsePrometheusText(await apiServerMetricsText(kc));
}

async function rollguardMetrics(proc: RollguardProcess): Promise<Map<string, Family>> {
  const res = await fetch(`${proc.adminUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
  if (!res.ok) throw new Error(`GET /metrics of ${proc.name}: HTTP ${res.status}`);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheusText(await res.text());
}

function errorText(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  const message = err instanceof Error ? err.message : String(err);
  return typeof body === 'string' && !message.includes(body) ? `${message}: ${body}` : message;
}

/** A writer's record: when each admitted write came back, and every failure with its reason. */
interface LoadRecord {
  admittedAt: number[];
  failures: string[];
  /** Created sets whose stored template lacks the annotation the webhook writes. */
  unannotated: string[];
}

// The test of record for "no EOF while a webhook replica shuts down": two replicas behind a real
// L4 balancer that follows /readyz (as a Service follows endpoints), failurePolicy Fail, writes
// through the real API server all the time, and every replica restarted in turn.
describe('rolling restart of the webhook under load', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  const admissionApi = kc.makeApiClient(AdmissionregistrationV1Api);
  const suffix = Math.random().toString(36).slice(2, 8);
  const webhookConfiguration = `lifecycle-rolling-${suffix}`;
  const webhookName = `rolling-${suffix}.rollguard.io`;
  let rollguardNamespace: string;
  let workloads: string;
  let balancer: Balancer | undefined;
  const ports = new Map<string, { webhookPort: number; adminPort: number }>();
  const current = new Map<string, RollguardProcess>();
  const everyProcess: RollguardProcess[] = [];

  async function startReplica(name: string): Promise<RollguardProcess> {
    const proc = await startRollguardProcess({
      name,
      kubeconfigPath,
      ...ports.get(name)!,
      args: [
        `--namespace=${rollguardNamespace}`,
        `--watch-namespaces=${workloads}`,
        `--webhook-configuration=${webhookConfiguration}`,
        '--tls-secret=webhook-tls',
        '--lease-name=rolling-leader',
        ...LIFECYCLE_ARGS,
      ],
    });
    everyProcess.push(proc);
    current.set(name, proc);
    return proc;
  }

  async function balancerRoutesTo(name: string): Promise<void> {
    await waitUntil(`the balancer to route to ${name}`, async () => {
      const states = await balancer!.serverStates();
      return states[name] === 'UP' || JSON.stringify(states);
    });
  }

  beforeAll(async () => {
    rollguardNamespace = await createNamespace(core, 'lifecycle-rolling-rg');
    workloads = await createNamespace(core, 'lifecycle-rolling-wl');
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: CONFIG_MAP }, data: { v: '1' } } });
    for (const name of REPLICAS) ports.set(name, { webhookPort: await freePort(), adminPort: await freePort() });
    balancer = await startBalancer(REPLICAS.map((name) => ({ name, port: ports.get(name)!.webhookPort, checkPort: ports.get(name)!.adminPort })));
    await admissionApi.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: webhookConfiguration },
        webhooks: [
          {
            name: webhookName,
            clientConfig: { url: `https://127.0.0.1:${balancer.port}/mutate` },
            failurePolicy: 'Fail',
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': workloads } },
            objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } },
            rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['statefulsets'] }],
            sideEffects: 'None',
            admissionReviewVersions: ['v1'],
            timeoutSeconds: WEBHOOK_TIMEOUT_SECONDS,
          },
        ],
      },
    });
    // both at once: they race to create the one TLS Secret, and both serve its certificate
    const started = await Promise.all(REPLICAS.map((name) => startReplica(name)));
    await Promise.all(started.map((proc) => proc.waitReady()));
    for (const name of REPLICAS) await balancerRoutesTo(name);
  });

  afterAll(async () => {
    for (const proc of everyProcess) await proc.kill();
    await balancer?.stop();
    await admissionApi.deleteMutatingWebhookConfiguration({ name: webhookConfiguration }).catch(() => undefined);
    for (const ns of [workloads, rollguardNamespace]) if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(everyProcess);
  });

  function labelledSet(name: string): V1StatefulSet {
    // no pods: only the writes matter here
    const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: CONFIG_MAP } }];
    return set;
  }

  /** Creates, updates and deletes labelled sets in a loop until `until` aborts; a CREATE and an UPDATE go through the webhook each time. */
  async function writer(id: number, until: AbortSignal, record: LoadRecord): Promise<void> {
    const key = annotationKey('ConfigMap', CONFIG_MAP);
    for (let n = 0; !until.aborted; n++) {
      const name = `load-${id}-${n}`;
      try {
        const created = await apps.createNamespacedStatefulSet({ namespace: workloads, body: labelledSet(name) });
        record.admittedAt.push(Date.now());
        if (!created.spec?.template.metadata?.annotations?.[key]) record.unannotated.push(name);
        await apps.patchNamespacedStatefulSet({
          name,
          namespace: workloads,
          body: [{ op: 'add', path: '/metadata/labels/write', value: String(n) }],
        });
        record.admittedAt.push(Date.now());
        await apps.deleteNamespacedStatefulSet({ name, namespace: workloads });
      } catch (err) {
        record.failures.push(`${new Date().toISOString()} ${name}: ${errorText(err)}`);
        // the failed set may exist; a fresh name keeps the loop going either way
      }
    }
  }

  it(
    'admits every write while each replica in turn is stopped with SIGTERM and started again',
    async () => {
      const before = await apiServerMetrics(kc);
      const requestsBefore = total(before, 'apiserver_admission_webhook_request_total', { name: webhookName });
      const record: LoadRecord = { admittedAt: [], failures: [], unannotated: [] };
      const stopLoad = new AbortController();
      const writers = Array.from({ length: WRITERS }, (_, i) => writer(i, stopLoad.signal, record));
      const drains: { replica: string; from: number; to: number }[] = [];
      let admittedByReplicas = 0;
      try {
        await waitUntil('the load to flow', () => record.admittedAt.length >= WARM_UP_WRITES || `${record.admittedAt.length} writes, failures: ${record.failures.join('; ')}`);
        for (let round = 1; round <= ROUNDS; round++) {
          for (const name of REPLICAS) {
            const proc = current.get(name)!;
            // its counter is gone with the process: read it on the way out
            admittedByReplicas += total(await rollguardMetrics(proc), 'rollguard_admission_reviews_total');
            const signalledAt = Date.now();
            proc.child.kill('SIGTERM');
            let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
            void proc.exited.then((e) => (exit = e));
            await waitFor(`${name} (round ${round}) to exit after SIGTERM`, () => exit, { timeoutMs: EXIT_DEADLINE_MS });
            expect(exit, `exit of ${name} in round ${round}`).toEqual({ code: 0, signal: null });
            drains.push({ replica: name, from: signalledAt, to: Date.now() });
            const next = await startReplica(name);
            await next.waitReady();
            // ready is not enough: the balancer must have seen it, or stopping the other leaves none
            await balancerRoutesTo(name);
          }
        }
        // writes go on after the last restart, so a failure at its very end would show too
        const admittedSoFar = record.admittedAt.length;
        await waitUntil('writes after the last restart', () => record.admittedAt.length >= admittedSoFar + WARM_UP_WRITES || `${record.admittedAt.length - admittedSoFar} writes`);
      } finally {
        stopLoad.abort();
        await Promise.all(writers);
      }

      console.log(`[rolling] ${record.admittedAt.length} writes admitted; per drain: ${drains.map((d) => `${d.replica} ${d.to - d.from} ms ${record.admittedAt.filter((t) => t >= d.from && t <= d.to).length}`).join(', ')}`);
      expect(record.failures).toEqual([]);
      expect(record.unannotated).toEqual([]);
      // load really ran while each replica drained, not only between restarts
      for (const drain of drains) {
        const during = record.admittedAt.filter((t) => t >= drain.from && t <= drain.to).length;
        expect(during, `writes admitted while ${drain.replica} was shutting down`).toBeGreaterThan(0);
      }

      const after = await apiServerMetrics(kc);
      expect(total(after, 'apiserver_admission_webhook_fail_open_count', { name: webhookName })).toBe(0);
      expect(total(after, 'apiserver_admission_webhook_rejection_count', { name: webhookName })).toBe(0);
      const requests = total(after, 'apiserver_admission_webhook_request_total', { name: webhookName }) - requestsBefore;
      expect(requests).toBeGreaterThanOrEqual(record.admittedAt.length);
      for (const proc of current.values()) admittedByReplicas += total(await rollguardMetrics(proc), 'rollguard_admission_reviews_total');
      expect(admittedByReplicas).toBeGreaterThan(0);
    },
    TEST_TIMEOUT_MS,
  );

  it('serves /metrics as Prometheus text whose admission counter moves with each review', async () => {
    const reviewsNow = async (): Promise<number> => {
      let sum = 0;
      for (const proc of current.values()) sum += total(await rollguardMetrics(proc), 'rollguard_admission_reviews_total', { result: 'patched' });
      return sum;
    };
    for (const proc of current.values()) {
      const families = await rollguardMetrics(proc);
      for (const name of ['rollguard_admission_reviews_total', 'rollguard_admission_duration_seconds', 'rollguard_leader']) {
        expect(families.has(name), `${proc.name} exports ${name}`).toBe(true);
      }
      // prom-client's process metrics, under rollguard's prefix
      expect([...families.keys()].some((name) => /^rollguard_process_.*cpu_seconds_total$/.test(name))).toBe(true);
      expect(families.get('rollguard_admission_duration_seconds')?.type).toBe('histogram');
    }
    const reviewsBefore = await reviewsNow();
    const writes = 3;
    for (let i = 0; i < writes; i++) {
      const created = await apps.createNamespacedStatefulSet({ namespace: workloads, body: labelledSet(`counted-${i}`) });
      expect(created.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', CONFIG_MAP)]).toMatch(/\/\d+$/);
    }
    // one review per CREATE: the sets are stored annotated, so the reconcile loop writes none
    expect(await reviewsNow()).toBe(reviewsBefore + writes);
  });
});
