import { AppsV1Api, CoreV1Api, KubeConfig, Watch, type V1StatefulSet } from '@kubernetes/client-node';
import pino from 'pino';
import { Registry } from 'prom-client';
import { startControlPlane } from '../src/dev/control-plane.js';
import { Manager } from '../src/manager.js';
import { createMetrics } from '../src/metrics.js';
import { ENABLED_LABEL, annotationKey } from '../src/restarter/annotations.js';
import { createRestarterController } from '../src/restarter/controller.js';

// Reaction time of the reconcile loop: from a ConfigMap update to the patched StatefulSet, seen
// by an independent watch, over 200 updates with 500 labelled sets (debounce off, no pacing).
// Prints figures; asserts nothing. Run: npx tsc -p tsconfig.json && node dist/bench/reaction-configmap.js

const SETS = Number(process.env.BENCH_SETS ?? 500);
const UPDATES = Number(process.env.BENCH_UPDATES ?? 200);
const CREATE_CONCURRENCY = 16;
const TARGET_P99_MS = 1_000;
/** An update not seen patched within this long is reported as lost. */
const UPDATE_DEADLINE_MS = 10_000;

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

async function main(): Promise<void> {
  const reuse = process.env.BENCH_KUBECONFIG;
  const cp = reuse ? undefined : await startControlPlane({ controllerManager: false });
  const kc = new KubeConfig();
  kc.loadFromFile(reuse ?? cp!.kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const namespace = `reaction-${Math.random().toString(36).slice(2, 8)}`;
  const logger = pino({ level: 'warn' });
  const metrics = createMetrics(new Registry());
  let manager: Manager | undefined;
  let watchRequest: AbortController | undefined;
  try {
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    const created = performance.now();
    await inParallel(SETS, (i) => core.createNamespacedConfigMap({ namespace, body: { metadata: { name: `cfg-${i}` }, data: { v: '0' } } }));
    await inParallel(SETS, (i) => {
      const name = `set-${i}`;
      const body: V1StatefulSet = {
        metadata: { name, labels: { [ENABLED_LABEL]: 'true' } },
        spec: {
          replicas: 1,
          serviceName: name,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: { containers: [{ name: 'app', image: 'registry.example/app:1', envFrom: [{ configMapRef: { name: `cfg-${i}` } }] }] },
          },
        },
      };
      return apps.createNamespacedStatefulSet({ namespace, body });
    });
    console.log(`created ${SETS} ConfigMaps and ${SETS} labelled StatefulSets in ${((performance.now() - created) / 1000).toFixed(1)} s`);

    // The observer: when each set's annotation for its ConfigMap took each value.
    const seen = new Map<string, { value: string; at: number }>();
    const waiters = new Map<string, { value: string; resolve: (at: number) => void }>();
    const key = (i: number): string => annotationKey('ConfigMap', `cfg-${i}`);
    watchRequest = await new Watch(kc).watch(
      `/apis/apps/v1/namespaces/${namespace}/statefulsets`,
      {},
      (_type, set: V1StatefulSet) => {
        const at = performance.now();
        const name = set.metadata?.name ?? '';
        const i = Number(name.slice('set-'.length));
        const value = set.spec?.template.metadata?.annotations?.[key(i)];
        if (value === undefined) return;
        seen.set(name, { value, at });
        const waiter = waiters.get(name);
        if (waiter?.value === value) {
          waiters.delete(name);
          waiter.resolve(at);
        }
      },
      (err: unknown) => {
        if (err && !(err instanceof Error && err.name === 'AbortError')) console.error('observer watch ended:', err);
      },
    );

    const controller = createRestarterController({
      kubeConfig: kc,
      minRestartIntervalMs: 0,
      namespaces: [namespace],
      logger,
      metrics,
      debounceMs: 0,
      maxRestartsPerSecond: Infinity,
      resyncPeriodMs: 0,
    });
    manager = new Manager(controller.runnables, logger);
    const started = performance.now();
    await manager.start();
    const deadline = Date.now() + 120_000;
    while (seen.size < SETS) {
      if (Date.now() > deadline) throw new Error(`only ${seen.size} of ${SETS} sets annotated after 120 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    console.log(`first pass: ${SETS} sets annotated ${((performance.now() - started) / 1000).toFixed(2)} s after start`);

    const latencies: number[] = [];
    let lost = 0;
    for (let n = 0; n < UPDATES; n++) {
      const i = (n * 7) % SETS;
      const name = `set-${i}`;
      const t0 = performance.now();
      const cm = await core.patchNamespacedConfigMap({ name: `cfg-${i}`, namespace, body: [{ op: 'replace', path: '/data/v', value: String(n + 1) }] });
      const value = `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;
      const patchedAt =
        seen.get(name)?.value === value
          ? Promise.resolve(seen.get(name)!.at)
          : new Promise<number>((resolve) => waiters.set(name, { value, resolve }));
      const timeout = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), UPDATE_DEADLINE_MS).unref());
      const at = await Promise.race([patchedAt, timeout]);
      if (at === undefined) {
        lost++;
        waiters.delete(name);
        continue;
      }
      latencies.push(at - t0);
    }
    latencies.sort((a, b) => a - b);
    const fmt = (ms: number): string => `${ms.toFixed(1)} ms`;
    console.log(
      `ConfigMap update → StatefulSet patch seen, over ${latencies.length} updates with ${SETS} sets: ` +
        `p50 ${fmt(percentile(latencies, 50))}, p90 ${fmt(percentile(latencies, 90))}, p99 ${fmt(percentile(latencies, 99))}, max ${fmt(latencies.at(-1) ?? NaN)} ` +
        `(target p99 < ${TARGET_P99_MS} ms)${lost ? `; ${lost} not seen within ${UPDATE_DEADLINE_MS} ms` : ''}`,
    );
    // The observer can see a patch before the reconcile that wrote it has counted it.
    const idleBy = Date.now() + UPDATE_DEADLINE_MS;
    while ((controller.status().inFlight > 0 || controller.status().queued > 0) && Date.now() < idleBy) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const patches = (await metrics.patches.get()).values.reduce((sum, v) => sum + v.value, 0);
    console.log(`patches written: ${patches} (${SETS} first annotations + ${UPDATES} changes expected)`);
  } finally {
    watchRequest?.abort();
    await manager?.stop();
    await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    await cp?.stop();
  }
}

await main();
