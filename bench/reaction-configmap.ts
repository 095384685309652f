import { AppsV1Api, CoreV1Api, KubeConfig, Watch, type V1ObjectMeta, type V1PodTemplateSpec } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import pino from 'pino';
import { Registry } from 'prom-client';
import { startControlPlane } from '../src/dev/control-plane.js';
import { loadKubeConfig } from '../src/kube/kubeconfig.js';
import { Manager } from '../src/manager.js';
import { createMetrics } from '../src/metrics.js';
import { ENABLED_LABEL, annotationKey } from '../src/restarter/annotations.js';
import { EventRecorder } from '../src/kube/events.js';
import { createRestarterController } from '../src/restarter/controller.js';

// Reaction time of the reconcile loop: from a ConfigMap update to the patched workloads, seen
// by independent watches (debounce off), in two shapes of 500 labelled workloads:
// - one ConfigMap per StatefulSet, 200 updates, no pacing: update → that set's patch;
// - one ConfigMap shared by StatefulSets, Deployments and DaemonSets in turn, 10 updates, at
//   the global pace (BENCH_PACE, 100/s): update → the last of the 500 patches, and the most
//   patches in any 1-s window against the pace plus its burst.
// Each shape twice in one process: without the data check (the reference), then with it (one GET
// and an HMAC per change), printing the ratios and the GETs per change. Prints figures; asserts
// nothing. Run: npm run bench -- reaction-configmap

const SETS = Number(process.env.BENCH_SETS ?? 500);
const UPDATES = Number(process.env.BENCH_UPDATES ?? 200);
const SHARED_UPDATES = Number(process.env.BENCH_SHARED_UPDATES ?? 10);
const CREATE_CONCURRENCY = 16;
const TARGET_P99_MS = 1_000;
/** An update not seen patched within this long is reported as lost. */
const UPDATE_DEADLINE_MS = 10_000;
const SHARED_DEADLINE_MS = 120_000;

type Shape = 'per-set' | 'shared';

/** The shared shape mixes the three kinds; the per-set shape is StatefulSets only. */
const kindOf = (shape: Shape, i: number): 'StatefulSet' | 'Deployment' | 'DaemonSet' =>
  shape === 'per-set' ? 'StatefulSet' : (['StatefulSet', 'Deployment', 'DaemonSet'] as const)[i % 3]!;
/** The shared shape runs at the global pace (a burst of one second's worth), and checks it holds. */
const SHARED_PACE = Number(process.env.BENCH_PACE ?? 100);

async function inParallel(count: number, job: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      while (next < count) await job(next++);
    }),
  );
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

const sum = async (metric: { get(): Promise<{ values: { value: number }[] }> }): Promise<number> => (await metric.get()).values.reduce((total, v) => total + v.value, 0);
const fmt = (ms: number): string => `${ms.toFixed(1)} ms`;

/** The same cluster and user through client-node's own KubeConfig: a new connection for every call. */
function perCallKubeConfig(kc: KubeConfig): KubeConfig {
  const copy = new KubeConfig();
  copy.loadFromString(kc.exportConfig());
  return copy;
}

interface Run {
  label: string;
  p50: number;
  p99: number;
}

async function scenario(kc: KubeConfig, shape: Shape, logger: Logger): Promise<Run[]> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const namespace = `reaction-${shape}-${Math.random().toString(36).slice(2, 8)}`;
  const configMapOf = (i: number): string => (shape === 'shared' ? 'shared' : `cfg-${i}`);
  const updates = shape === 'shared' ? SHARED_UPDATES : UPDATES;
  let manager: Manager | undefined;
  let stopWatches = (): void => {};
  try {
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    const created = performance.now();
    await inParallel(shape === 'shared' ? 1 : SETS, (i) => core.createNamespacedConfigMap({ namespace, body: { metadata: { name: configMapOf(i) }, data: { v: '0' } } }));
    await inParallel(SETS, (i) => {
      const name = `set-${i}`;
      const selector = { matchLabels: { app: name } };
      const template: V1PodTemplateSpec = {
        metadata: { labels: { app: name } },
        spec: { containers: [{ name: 'app', image: 'registry.example/app:1', envFrom: [{ configMapRef: { name: configMapOf(i) } }] }] },
      };
      const metadata = { name, labels: { [ENABLED_LABEL]: 'true' } };
      switch (kindOf(shape, i)) {
        case 'Deployment':
          return apps.createNamespacedDeployment({ namespace, body: { metadata, spec: { replicas: 1, selector, template } } });
        case 'DaemonSet':
          return apps.createNamespacedDaemonSet({ namespace, body: { metadata, spec: { selector, template } } });
        default:
          return apps.createNamespacedStatefulSet({ namespace, body: { metadata, spec: { replicas: 1, serviceName: name, selector, template } } });
      }
    });
    const what =
      shape === 'shared'
        ? `${SETS} labelled workloads (StatefulSets, Deployments, DaemonSets in turn) on one ConfigMap`
        : `${SETS} ConfigMaps and ${SETS} labelled StatefulSets`;
    console.log(`[${shape}] created ${what} in ${((performance.now() - created) / 1000).toFixed(1)} s`);

    // The observer: what each set's annotation for its ConfigMap says, and when it last changed.
    const seen = new Map<string, { value: string; at: number }>();
    const waiters = new Set<{ names: Set<string>; value: string; resolve: (at: number) => void }>();
    const patchTimes: number[] = [];
    const observe = (_type: string, workload: { metadata?: V1ObjectMeta; spec?: { template: V1PodTemplateSpec } }): void => {
      const at = performance.now();
      const name = workload.metadata?.name ?? '';
      const i = Number(name.slice('set-'.length));
      const value = workload.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', configMapOf(i))];
      if (value === undefined) return;
      if (seen.get(name)?.value !== value) patchTimes.push(at);
      seen.set(name, { value, at });
      for (const waiter of waiters) {
        if (waiter.value !== value || !waiter.names.delete(name)) continue;
        if (waiter.names.size === 0) {
          waiters.delete(waiter);
          waiter.resolve(at);
        }
      }
    };
    const watchEnded = (err: unknown): void => {
      if (err && !(err instanceof Error && err.name === 'AbortError')) console.error('observer watch ended:', err);
    };
    const watches = await Promise.all(
      (shape === 'shared' ? ['statefulsets', 'deployments', 'daemonsets'] : ['statefulsets']).map((resource) =>
        new Watch(kc).watch(`/apis/apps/v1/namespaces/${namespace}/${resource}`, {}, observe, watchEnded),
      ),
    );
    stopWatches = () => watches.forEach((w) => w.abort());
    /** When every named set shows `value`; undefined after `deadlineMs`. */
    const patchedAll = (names: string[], value: string, deadlineMs: number): Promise<number | undefined> => {
      const missing = new Set(names.filter((n) => seen.get(n)?.value !== value));
      if (missing.size === 0) return Promise.resolve(Math.max(...names.map((n) => seen.get(n)!.at)));
      const waiter = { names: missing, value, resolve: (_at: number) => {} };
      const patched = new Promise<number>((resolve) => (waiter.resolve = resolve));
      waiters.add(waiter);
      const timeout = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), deadlineMs).unref());
      return Promise.race([patched, timeout]).then((at) => {
        waiters.delete(waiter);
        return at;
      });
    };

    const runs: Run[] = [];
    const variants = [
      { dataCheck: false, pooled: true },
      { dataCheck: true, pooled: true },
      // the last: client-node's own KubeConfig, a new connection pool (TCP + TLS) for every call
      ...(shape === 'shared' ? [{ dataCheck: true, pooled: false }] : []),
    ];
    for (const [variant, { dataCheck, pooled }] of variants.entries()) {
      const runMetrics = createMetrics(new Registry());
      const runKubeConfig = pooled ? kc : perCallKubeConfig(kc);
      const controller = createRestarterController({
        events: new EventRecorder({ kubeConfig: runKubeConfig, component: 'rollguard', logger }),
        kubeConfig: runKubeConfig,
        minRestartIntervalMs: 0,
        namespaces: [namespace],
        logger,
        metrics: runMetrics,
        debounceMs: 0,
        maxRestartsPerSecond: shape === 'shared' ? SHARED_PACE : Infinity,
        resyncPeriodMs: 0,
        ...(dataCheck ? { ownNamespace: namespace } : {}),
      });
      manager = new Manager(controller.runnables, logger);
      const label = `[${shape}] ${dataCheck ? 'with the data check' : 'without the data check (reference)'}${pooled ? '' : ', a connection per call'}`;
      const started = performance.now();
      await manager.start();
      const deadline = Date.now() + 120_000;
      while (seen.size < SETS) {
        if (Date.now() > deadline) throw new Error(`only ${seen.size} of ${SETS} sets annotated after 120 s`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const settle = async (): Promise<void> => {
        const by = Date.now() + 120_000;
        // the first pass of the data check reads each ConfigMap once and records its digest
        await new Promise((resolve) => setTimeout(resolve, 200));
        while ((controller.status().inFlight > 0 || controller.status().queued > 0) && Date.now() < by) {
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      };
      await settle();
      const readsBefore = await sum(runMetrics.dataReads);
      const patchesBefore = await sum(runMetrics.patches);
      console.log(`${label}: first pass done ${((performance.now() - started) / 1000).toFixed(2)} s after start, ${readsBefore} GETs`);

      const latencies: number[] = [];
      let lost = 0;
      const cpuBefore = process.cpuUsage();
      const patchTimesBefore = patchTimes.length;
      for (let n = 0; n < updates; n++) {
        const i = (n * 7) % SETS;
        const names = shape === 'shared' ? Array.from({ length: SETS }, (_, k) => `set-${k}`) : [`set-${i}`];
        const t0 = performance.now();
        const cm = await core.patchNamespacedConfigMap({ name: configMapOf(i), namespace, body: [{ op: 'replace', path: '/data/v', value: `run${variant}-${n + 1}` }] });
        const value = `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
        const at = await patchedAll(names, value, shape === 'shared' ? SHARED_DEADLINE_MS : UPDATE_DEADLINE_MS);
        if (at === undefined) {
          lost++;
          continue;
        }
        latencies.push(at - t0);
      }
      const cpu = process.cpuUsage(cpuBefore);
      latencies.sort((a, b) => a - b);
      const measured = shape === 'shared' ? `ConfigMap update → last of ${SETS} patches seen` : 'ConfigMap update → StatefulSet patch seen';
      console.log(
        `${label}: ${measured}, over ${latencies.length} updates: ` +
          `p50 ${fmt(percentile(latencies, 50))}, p90 ${fmt(percentile(latencies, 90))}, p99 ${fmt(percentile(latencies, 99))}, max ${fmt(latencies.at(-1) ?? NaN)}` +
          (shape === 'per-set' ? ` (target p99 < ${TARGET_P99_MS} ms)` : '') +
          (lost ? `; ${lost} not seen in time` : ''),
      );
      await settle();
      const patches = (await sum(runMetrics.patches)) - patchesBefore;
      const reads = (await sum(runMetrics.dataReads)) - readsBefore;
      // the observer's watch runs in this process too: its share is in the figure
      const cpuPerPatch = (cpu.user + cpu.system) / 1000 / Math.max(1, patches);
      console.log(
        `${label}: patches written: ${patches} (${(patches / updates).toFixed(1)} per change); GETs per change: ${(reads / updates).toFixed(2)}; ` +
          `CPU of this process per patch: ${cpuPerPatch.toFixed(2)} ms`,
      );
      if (shape === 'shared') {
        // the global pace: patches seen in any 1-s window, against the limit plus its burst
        const times = patchTimes.slice(patchTimesBefore).sort((a, b) => a - b);
        let most = 0;
        for (let lo = 0, hi = 0; hi < times.length; hi++) {
          while (times[hi]! - times[lo]! >= 1000) lo++;
          most = Math.max(most, hi - lo + 1);
        }
        const burst = Math.max(1, Math.ceil(SHARED_PACE));
        console.log(`${label}: most patches seen in any 1-s window: ${most} (pace ${SHARED_PACE}/s + burst ${burst} = ${SHARED_PACE + burst})`);
      }
      runs.push({ label, p50: percentile(latencies, 50), p99: percentile(latencies, 99) });
      await manager.stop();
      manager = undefined;
    }
    return runs;
  } finally {
    stopWatches();
    await manager?.stop();
    await core.deleteNamespace({ name: namespace }).catch(() => undefined);
  }
}

async function main(): Promise<void> {
  const reuse = process.env.BENCH_KUBECONFIG;
  const cp = reuse ? undefined : await startControlPlane({ controllerManager: false });
  const kc = loadKubeConfig(reuse ?? cp!.kubeconfigPath);
  const logger = pino({ level: 'warn' });
  try {
    const shapes = (process.env.BENCH_SHAPES ?? 'per-set,shared').split(',') as Shape[];
    for (const shape of shapes) {
      const [reference, checked, unpooled] = await scenario(kc, shape, logger);
      const ratio = (what: string, a: Run, b: Run): void =>
        console.log(`[${shape}] ${what}: p50 ×${(a.p50 / b.p50).toFixed(2)} (${(a.p50 - b.p50).toFixed(1)} ms), p99 ×${(a.p99 / b.p99).toFixed(2)} (${(a.p99 - b.p99).toFixed(1)} ms)`);
      if (reference && checked) ratio('data check / reference', checked, reference);
      if (checked && unpooled) ratio('pooled connections / a connection per call', checked, unpooled);
    }
  } finally {
    await cp?.stop();
  }
}

await main();
