import { AppsV1Api, CoreV1Api, KubeConfig, type V1StatefulSet } from '@kubernetes/client-node';
import pino from 'pino';
import { Registry } from 'prom-client';
import { Manager } from '../src/manager.js';
import { createMetrics } from '../src/metrics.js';
import { ENABLED_LABEL } from '../src/restarter/annotations.js';
import { EventRecorder } from '../src/kube/events.js';
import { createRestarterController } from '../src/restarter/controller.js';
import { startControlPlane } from '../src/dev/control-plane.js';

// A flapping Secret (cert tooling gone wrong): changed every 200 ms for 2 minutes, referenced by
// 50 StatefulSets. Rollouts per set with the restart floor (--min-restart-interval) and, as the
// reference in the same run, with the debounce alone. No webhook, so the first pass annotates
// each set once too. Prints figures; asserts nothing.
// Run: npm run bench -- flapping-secret   (BENCH_SECONDS, BENCH_SETS, BENCH_FLOOR_SECONDS)

const SETS = Number(process.env.BENCH_SETS ?? 50);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 120);
const CHANGE_EVERY_MS = 200;
const FLOOR_MS = Number(process.env.BENCH_FLOOR_SECONDS ?? 60) * 1000;
const DEBOUNCE_MS = 5_000;

interface PhaseResult {
  changes: number;
  rolloutsPerSet: number[];
  deferred: number;
}

async function phase(kc: KubeConfig, label: string, minRestartIntervalMs: number): Promise<PhaseResult> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const namespace = `flap-${label}-${Math.random().toString(36).slice(2, 6)}`;
  const logger = pino({ level: 'warn' });
  const metrics = createMetrics(new Registry());
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  await core.createNamespacedSecret({ namespace, body: { metadata: { name: 'tls' }, stringData: { 'tls.crt': '0' } } });
  for (let i = 0; i < SETS; i++) {
    const name = `set-${i}`;
    const body: V1StatefulSet = {
      metadata: { name, labels: { [ENABLED_LABEL]: 'true' } },
      spec: {
        replicas: 1,
        serviceName: name,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: {
            containers: [{ name: 'app', image: 'registry.example/app:1', volumeMounts: [{ name: 'tls', mountPath: '/tls' }] }],
            volumes: [{ name: 'tls', secret: { secretName: 'tls' } }],
          },
        },
      },
    };
    await apps.createNamespacedStatefulSet({ namespace, body });
  }
  const controller = createRestarterController({
    events: new EventRecorder({ kubeConfig: kc, component: 'rollguard', logger }),
    kubeConfig: kc,
    namespaces: [namespace],
    logger,
    metrics,
    debounceMs: DEBOUNCE_MS,
    minRestartIntervalMs,
    maxRestartsPerSecond: 50,
  });
  const manager = new Manager(controller.runnables, logger);
  await manager.start();
  let changes = 0;
  try {
    const end = Date.now() + SECONDS * 1000;
    while (Date.now() < end) {
      const next = Date.now() + CHANGE_EVERY_MS;
      await core.patchNamespacedSecret({ name: 'tls', namespace, body: [{ op: 'replace', path: '/data/tls.crt', value: Buffer.from(String(++changes)).toString('base64') }] });
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - Date.now())));
    }
    // the trailing edge: the last change still rolls once its window (debounce, floor) has passed
    const settleBy = Date.now() + minRestartIntervalMs + DEBOUNCE_MS + 10_000;
    while (Date.now() < settleBy && (controller.status().queued > 0 || controller.status().inFlight > 0)) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  } finally {
    await manager.stop();
  }
  const sets = (await apps.listNamespacedStatefulSet({ namespace })).items;
  const rolloutsPerSet = sets.map((s) => (s.metadata?.generation ?? 1) - 1);
  const deferred = (await metrics.restartsDeferred.get()).values.reduce((sum, v) => sum + v.value, 0);
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
  return { changes, rolloutsPerSet, deferred };
}

function summary(r: PhaseResult): string {
  const sorted = [...r.rolloutsPerSet].sort((a, b) => a - b);
  const mean = sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length);
  return `${r.changes} changes; rollouts per set min ${sorted[0]} max ${sorted.at(-1)} mean ${mean.toFixed(2)}; deferrals ${r.deferred}`;
}

async function main(): Promise<void> {
  const cp = await startControlPlane({ controllerManager: false });
  try {
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    console.log(`${SETS} sets, one Secret changed every ${CHANGE_EVERY_MS} ms for ${SECONDS} s, debounce ${DEBOUNCE_MS / 1000} s`);
    const floor = await phase(kc, 'floor', FLOOR_MS);
    const bound = 2 + Math.floor((SECONDS * 1000) / FLOOR_MS);
    console.log(`with --min-restart-interval=${FLOOR_MS / 1000}s: ${summary(floor)} (bound: 2 + ${SECONDS} s / ${FLOOR_MS / 1000} s = ${bound})`);
    const reference = await phase(kc, 'debounce', 0);
    console.log(`debounce alone (reference):   ${summary(reference)}`);
    const max = (r: PhaseResult): number => Math.max(...r.rolloutsPerSet);
    console.log(`ratio of max rollouts per set, floor / debounce alone: ${(max(floor) / Math.max(1, max(reference))).toFixed(2)}`);
  } finally {
    await cp.stop();
  }
}

await main();
