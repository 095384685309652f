import https from 'node:https';
import { Watch, type AppsV1Api, type CoreV1Api, type KubeConfig, type V1StatefulSet } from '@kubernetes/client-node';
import { isRollguardAnnotation } from '../../src/restarter/annotations.js';
import { parseAnnotationValue } from '../../src/restarter/versions.js';
import { waitUntil } from './wait.js';

/** What a user counts as the rollouts of a set: template generations and ControllerRevisions. */
export interface RolloutCount {
  generation: number;
  revisions: number;
}

/**
 * Each set's generation and its ControllerRevisions, once the StatefulSet controller has seen
 * every generation (observedGeneration caught up), so the revision count is final.
 */
export async function rolloutCounts(apps: AppsV1Api, namespace: string, names: readonly string[]): Promise<Map<string, RolloutCount>> {
  let counts = new Map<string, RolloutCount>();
  await waitUntil(`the StatefulSet controller to observe every generation in ${namespace}`, async () => {
    const sets = (await apps.listNamespacedStatefulSet({ namespace })).items.filter((s) => names.includes(s.metadata?.name ?? ''));
    const behind = sets.filter((s) => (s.status?.observedGeneration ?? 0) < (s.metadata?.generation ?? 0)).map((s) => s.metadata?.name);
    if (sets.length !== names.length) return `${sets.length} of ${names.length} sets found`;
    if (behind.length > 0) return `not yet observed: ${behind.join(', ')}`;
    const revisions = (await apps.listNamespacedControllerRevision({ namespace })).items;
    counts = new Map(
      sets.map((s) => [
        s.metadata!.name!,
        {
          generation: s.metadata?.generation ?? 0,
          revisions: revisions.filter((r) => r.metadata?.ownerReferences?.some((o) => o.uid === s.metadata?.uid)).length,
        },
      ]),
    );
    return true;
  });
  return counts;
}

export interface RolloutEvent {
  set: string;
  reason: string;
  message: string;
  count: number;
}

/** rollguard's Events about StatefulSets in the namespace, repeats counted. */
export async function rollguardEvents(core: CoreV1Api, namespace: string): Promise<RolloutEvent[]> {
  return (await core.listNamespacedEvent({ namespace })).items
    .filter((e) => e.source?.component === 'rollguard' && e.involvedObject.kind === 'StatefulSet')
    .map((e) => ({ set: e.involvedObject.name ?? '', reason: e.reason ?? '', message: e.message ?? '', count: e.count ?? 1 }));
}

/** Events in `after` beyond those in `before` (same set, reason and message), repeats counted. */
export function eventsAdded(before: RolloutEvent[], after: RolloutEvent[]): RolloutEvent[] {
  const key = (e: RolloutEvent): string => JSON.stringify([e.set, e.reason, e.message]);
  const total = (events: RolloutEvent[]): Map<string, RolloutEvent> => {
    const out = new Map<string, RolloutEvent>();
    for (const e of events) out.set(key(e), { ...e, count: (out.get(key(e))?.count ?? 0) + e.count });
    return out;
  };
  const was = total(before);
  return [...total(after).entries()]
    .map(([k, e]) => ({ ...e, count: e.count - (was.get(k)?.count ?? 0) }))
    .filter((e) => e.count > 0);
}

/** One observed state of a set's template annotations (rollguard's keys only). */
export interface TemplateState {
  resourceVersion: string;
  generation: number;
  annotations: Record<string, string>;
}

export interface TemplateHistory {
  states: TemplateState[];
  /** Every step where a rollguard annotation went to an older version or back to absent, in words. */
  backwards(): string[];
  stop(): void;
}

function rollguardAnnotations(set: V1StatefulSet): Record<string, string> {
  return Object.fromEntries(Object.entries(set.spec?.template.metadata?.annotations ?? {}).filter(([k]) => isRollguardAnnotation(k)));
}

function movedBackwards(from: string, to: string): boolean {
  const a = parseAnnotationValue(from);
  const b = parseAnnotationValue(to);
  if (a.kind !== 'version') return false;
  return b.kind === 'absent' || (b.kind === 'version' && b.resourceVersion < a.resourceVersion);
}

/**
 * Watches one StatefulSet from its current state on and records every state of its rollguard
 * template annotations, so a test can tell whether any value ever moved backwards.
 */
export async function watchTemplateAnnotations(kc: KubeConfig, namespace: string, set: V1StatefulSet): Promise<TemplateHistory> {
  const states: TemplateState[] = [];
  const record = (s: V1StatefulSet): void => {
    states.push({ resourceVersion: s.metadata?.resourceVersion ?? '', generation: s.metadata?.generation ?? 0, annotations: rollguardAnnotations(s) });
  };
  record(set);
  let stopped = false;
  let controller: AbortController | undefined;
  const start = async (resourceVersion: string): Promise<void> => {
    controller = await new Watch(kc).watch(
      `/apis/apps/v1/namespaces/${namespace}/statefulsets`,
      { fieldSelector: `metadata.name=${set.metadata!.name!}`, resourceVersion, allowWatchBookmarks: false },
      (phase, obj: V1StatefulSet) => {
        if (phase === 'ADDED' || phase === 'MODIFIED') record(obj);
      },
      () => {
        // the API server ends watches now and then: go on from the last state seen
        if (!stopped) void start(states.at(-1)!.resourceVersion);
      },
    );
  };
  await start(set.metadata!.resourceVersion!);
  return {
    states,
    backwards() {
      const out: string[] = [];
      for (let i = 1; i < states.length; i++) {
        const before = states[i - 1]!;
        const after = states[i]!;
        for (const [key, value] of Object.entries(after.annotations)) {
          const was = before.annotations[key];
          if (was !== undefined && movedBackwards(was, value)) out.push(`${key}: ${was} → ${value} (resourceVersion ${before.resourceVersion} → ${after.resourceVersion})`);
        }
      }
      return out;
    },
    stop() {
      stopped = true;
      controller?.abort();
    },
  };
}

/** GET /metrics of the API server, as text, with the kubeconfig's credentials. */
export async function apiServerMetricsText(kc: KubeConfig): Promise<string> {
  const opts: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(opts);
  return new Promise<string>((resolve, reject) => {
    https
      .get(`${kc.getCurrentCluster()!.server}/metrics`, opts, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          res.statusCode === 200 ? resolve(Buffer.concat(chunks).toString('utf8')) : reject(new Error(`GET /metrics of the API server: HTTP ${res.statusCode}`)),
        );
      })
      .on('error', reject);
  });
}

/** The sum of one metric's samples for one webhook, from the API server's own /metrics. */
export async function apiServerWebhookMetric(kc: KubeConfig, metric: string, webhookName: string): Promise<number> {
  const text = await apiServerMetricsText(kc);
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== metric || !(m[2] ?? '').includes(`name="${webhookName}"`)) continue;
    sum += Number(m[3]);
  }
  return sum;
}
