import type { V1Deployment, V1EnvFromSource, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EXPIRES_AT_PREFIX } from '../../src/compat/expiry.js';
import { REASON_EXPIRED, REASON_INVALID_EXPIRY } from '../../src/compat/pod-restarter.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { createNamespace, deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';

const { core, apps, kubeconfigPath } = testCluster();

/**
 * Two namespaces: `kept` loses its objects one collection at a time, `dropped` goes as a whole
 * (the namespace controller deletes what it held). Sized to fill every per-object map by the
 * thousand and stay within a minute on a loaded 2-core machine.
 */
const SIZES = { kept: { configMaps: 1200, secrets: 400, sets: 150 }, dropped: { configMaps: 400, secrets: 200, sets: 50 } } as const;
const CONFIG_MAPS_PER_SET = 10;
const SECRETS_PER_SET = 3;
/** Sets whose first ConfigMap gets new data, so the loop reads digests, rolls and records Events. */
const CHANGED_PER_NAMESPACE = 40;
const PARALLEL_REQUESTS = 24;
/** Pods with a Stackable expires-at annotation, for the pod restarter of --compat stackable. */
const PODS = 200;

type Memory = Record<string, number>;

/** Runs `work` on every item, `PARALLEL_REQUESTS` at a time. */
async function inParallel<T>(items: readonly T[], work: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: PARALLEL_REQUESTS }, lane));
}

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
const cmName = (i: number): string => `cm-${i}`;
const secretName = (i: number): string => `secret-${i}`;

/** The ConfigMaps and Secrets set `i` reads; every set reads some of its own and one it shares with the next set. */
function readsOf(i: number, size: { configMaps: number; secrets: number }): { configMaps: string[]; secrets: string[] } {
  return {
    configMaps: range(CONFIG_MAPS_PER_SET).map((k) => cmName((i * CONFIG_MAPS_PER_SET + k) % size.configMaps)),
    secrets: range(SECRETS_PER_SET).map((k) => secretName((i * SECRETS_PER_SET + k) % size.secrets)),
  };
}

/**
 * Even sets are StatefulSets, odd ones Deployments that ask for health-gated rollouts (a
 * StatefulSet-only feature: a Warning each, remembered); no replicas: the test is about
 * rollguard's memory, not pods.
 */
function workload(i: number, size: { configMaps: number; secrets: number }): { kind: 'StatefulSet'; body: V1StatefulSet } | { kind: 'Deployment'; body: V1Deployment } {
  const reads = readsOf(i, size);
  const envFrom: V1EnvFromSource[] = [...reads.configMaps.map((name) => ({ configMapRef: { name } })), ...reads.secrets.map((name) => ({ secretRef: { name } }))];
  const labels = { [ENABLED_LABEL]: 'true' };
  const body = i % 2 === 0 ? statefulSet(`set-${i}`, { replicas: 0, labels }) : deployment(`set-${i}`, { replicas: 0, labels, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE } });
  body.spec!.template.spec!.containers[0]!.envFrom = envFrom;
  return i % 2 === 0 ? { kind: 'StatefulSet', body: body as V1StatefulSet } : { kind: 'Deployment', body: body as V1Deployment };
}

async function templateAnnotations(ns: string, i: number): Promise<Record<string, string>> {
  const set = i % 2 === 0 ? await apps.readNamespacedStatefulSet({ name: `set-${i}`, namespace: ns }) : await apps.readNamespacedDeployment({ name: `set-${i}`, namespace: ns });
  return set.spec?.template.metadata?.annotations ?? {};
}

async function memoryOf(proc: RollguardProcess): Promise<Memory> {
  return ((await proc.status()) as { memory: Memory }).memory;
}

/** The maps that differ from `baseline`, as `name: now (baseline)`. */
function differences(now: Memory, baseline: Memory): string[] {
  return Object.keys({ ...now, ...baseline })
    .filter((name) => now[name] !== baseline[name])
    .map((name) => `${name}: ${now[name]} (baseline ${baseline[name]})`);
}

describe('memory of what is gone', () => {
  let own: string;
  let kept: string;
  let dropped: string;
  let rollguard: RollguardProcess;

  beforeAll(async () => {
    own = await createNamespace(core, 'gone-rollguard');
    kept = await createNamespace(core, 'gone-kept');
    dropped = await createNamespace(core, 'gone-dropped');
    rollguard = await startRollguardProcess({
      name: 'gone',
      kubeconfigPath,
      // --compat stackable: its pod restarter keeps per-pod maps of its own
      args: [`--namespace=${own}`, `--watch-namespaces=${kept},${dropped}`, '--webhook-configuration=', '--debounce=200ms', '--max-restarts-per-second=1000', '--compat=stackable'],
    });
    await rollguard.waitReady();
  });
  afterAll(async () => {
    await rollguard?.kill();
    for (const ns of [kept, dropped, own]) if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([rollguard]);
  });

  it('after deleting thousands of ConfigMaps and Secrets, hundreds of sets and a namespace, every per-object map is back at its baseline', async () => {
    const started = Date.now();
    const baseline = await memoryOf(rollguard);
    expect(Object.keys(baseline).length).toBeGreaterThan(10);

    for (const [ns, size] of [[kept, SIZES.kept], [dropped, SIZES.dropped]] as const) {
      await inParallel(range(size.configMaps), (i) => core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: cmName(i) }, data: { v: '1' } } }));
      await inParallel(range(size.secrets), (i) => core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: secretName(i) }, stringData: { v: '1' } } }));
      await inParallel(range(size.sets), async (i) => {
        const w = workload(i, size);
        if (w.kind === 'StatefulSet') await apps.createNamespacedStatefulSet({ namespace: ns, body: w.body });
        else await apps.createNamespacedDeployment({ namespace: ns, body: w.body });
      });
    }
    const created = Date.now();

    // every set carries the version of each object it reads: the loop has seen them all
    for (const [ns, size] of [[kept, SIZES.kept], [dropped, SIZES.dropped]] as const) {
      await waitUntil(`every set in ${ns} annotated`, async () => {
        const missing: number[] = [];
        await inParallel(range(size.sets), async (i) => {
          const annotations = await templateAnnotations(ns, i);
          const reads = readsOf(i, size);
          if (![...reads.configMaps.map((n) => annotationKey('ConfigMap', n)), ...reads.secrets.map((n) => annotationKey('Secret', n))].every((k) => annotations[k])) missing.push(i);
        });
        return missing.length === 0 || `not yet: sets ${missing.slice(0, 10).join(', ')} (${missing.length})`;
      }, { timeoutMs: 90_000, intervalMs: 1_000 });
    }

    // new data in the first ConfigMap of some sets: digest reads, a rollout and its Event each
    for (const [ns, size] of [[kept, SIZES.kept], [dropped, SIZES.dropped]] as const) {
      const changed = range(CHANGED_PER_NAMESPACE).map((i) => readsOf(i, size).configMaps[0]!);
      const versions = new Map<string, string>();
      await inParallel(changed, async (name) => {
        const cm = await core.replaceNamespacedConfigMap({ name, namespace: ns, body: { metadata: { name }, data: { v: '2' } } });
        versions.set(name, cm.metadata!.resourceVersion!);
      });
      await waitUntil(`the changed sets in ${ns} rolled`, async () => {
        const behind: number[] = [];
        await inParallel(range(CHANGED_PER_NAMESPACE), async (i) => {
          const name = readsOf(i, size).configMaps[0]!;
          if (!(await templateAnnotations(ns, i))[annotationKey('ConfigMap', name)]?.endsWith(versions.get(name)!)) behind.push(i);
        });
        return behind.length === 0 || `not yet: sets ${behind.slice(0, 10).join(', ')} (${behind.length})`;
      }, { timeoutMs: 60_000, intervalMs: 1_000 });
    }
    const filled = await memoryOf(rollguard);
    // the maps were filled: a test that saw them empty could not fail
    expect(filled['restarter.cache.configmaps']).toBe(SIZES.kept.configMaps + SIZES.dropped.configMaps);
    expect(filled['restarter.reverse_index.sets']).toBe(SIZES.kept.sets + SIZES.dropped.sets);
    expect(filled['restarter.digest_reads']).toBeGreaterThan(0);
    expect(filled['events.aggregation']).toBeGreaterThan(0);
    expect(filled['restarter.reconciler.told_unsupported']).toBe((SIZES.kept.sets + SIZES.dropped.sets) / 2);
    const rolled = Date.now();

    // kept: objects first (their sets wake and find them gone), then the sets; dropped: the namespace
    await core.deleteCollectionNamespacedConfigMap({ namespace: kept });
    await core.deleteCollectionNamespacedSecret({ namespace: kept });
    await core.deleteNamespace({ name: dropped });
    await apps.deleteCollectionNamespacedStatefulSet({ namespace: kept });
    await apps.deleteCollectionNamespacedDeployment({ namespace: kept });

    await waitUntil('every per-object map back at its baseline', async () => {
      const diff = differences(await memoryOf(rollguard), baseline);
      return diff.length === 0 || diff.join('; ');
    }, { timeoutMs: 60_000, intervalMs: 500 });
    await waitUntil(`namespace ${dropped} gone`, async () => {
      const list = await core.listNamespace({ fieldSelector: `metadata.name=${dropped}` });
      return list.items.length === 0 || `phase ${list.items[0]?.status?.phase}`;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    console.log(`memory-of-gone: created in ${created - started} ms, annotated and rolled in ${rolled - created} ms, freed in ${Date.now() - rolled} ms; filled: ${JSON.stringify(filled)}`);
  }, 300_000);

  it('--compat stackable: pods it evicted, warned about, or that are deleted leave nothing behind', async () => {
    const baseline = await memoryOf(rollguard);
    const expired = new Date(Date.now() - 60_000).toISOString();
    const pod = (name: string, annotations: Record<string, string>) => ({
      metadata: { name, annotations },
      spec: { containers: [{ name: 'app', image: 'registry.example/app:1' }] },
    });
    // half with a time long past (evicted: unbound pods go at once), half with one nobody can read (a Warning each, then deleted by us)
    await inParallel(range(PODS), (i) =>
      core.createNamespacedPod({ namespace: kept, body: pod(`pod-${i}`, i % 2 === 0 ? { [`${EXPIRES_AT_PREFIX}tls`]: expired } : { [`${EXPIRES_AT_PREFIX}tls`]: 'soon' }) }),
    );
    await waitUntil('an Event for every pod', async () => {
      const events = (await core.listNamespacedEvent({ namespace: kept })).items.filter((e) => e.involvedObject.kind === 'Pod');
      const expiredEvents = events.filter((e) => e.reason === REASON_EXPIRED).length;
      const invalid = events.filter((e) => e.reason === REASON_INVALID_EXPIRY).length;
      return (expiredEvents === PODS / 2 && invalid === PODS / 2) || `${expiredEvents} ${REASON_EXPIRED}, ${invalid} ${REASON_INVALID_EXPIRY}`;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    const filled = await memoryOf(rollguard);
    expect(filled['compat.pod_restarter.warned']).toBe(PODS / 2);
    expect(filled['compat.pod_restarter.told']).toBeGreaterThan(0);
    await core.deleteCollectionNamespacedPod({ namespace: kept });
    await waitUntil('every per-object map back at its baseline', async () => {
      const diff = differences(await memoryOf(rollguard), baseline);
      return diff.length === 0 || diff.join('; ');
    }, { timeoutMs: 30_000, intervalMs: 500 });
  });
});

