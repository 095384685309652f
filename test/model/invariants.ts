import type { CoreV1Event, V1PodTemplateSpec } from '@kubernetes/client-node';
import { ANNOTATION_PREFIX, annotationKey, isRollguardAnnotation, LAST_RESTART_ANNOTATION } from '../../src/restarter/annotations.js';
import { parseAnnotationValue } from '../../src/restarter/versions.js';
import { waitFor } from '../env/wait.js';
import type { WorkloadHistory, WorkloadState } from './recorder.js';
import { OBJECT_KINDS, readsOf, startable, viewOf, type ObjectKind, type ObjectRead } from './universe.js';
import type { World } from './world.js';

// What the checker asserts after a quiet period, from the API server's state (fresh reads) and
// the states its watches recorded. Each invariant is one of the restart promise's.

export interface Violation {
  invariant: 'explained' | 'event' | 'backwards' | 'floor' | 'settled' | 'held' | 'idle' | 'own-fields';
  workload: string;
  detail: string;
}

export interface Figures {
  /** template changes rollguard's loop made */
  loopRollouts: number;
  /** of them: explained by a change of what the set reads */
  dataRollouts: number;
  /** of them: references annotated the webhook had not (a set written while it was away) */
  annotations: number;
  /** of them: a copied value of another object replaced (ForeignVersion) */
  repairs: number;
  /** template changes the checker's own writes made (webhook's mutations included) */
  userTemplateWrites: number;
}

export const zeroFigures = (): Figures => ({ loopRollouts: 0, dataRollouts: 0, annotations: 0, repairs: 0, userTemplateWrites: 0 });

const describe = (h: { kind: string; namespace: string; name: string }): string => `${h.kind} ${h.namespace}/${h.name}`;

function withoutRollguardValues(template: V1PodTemplateSpec | undefined): string {
  const annotations = Object.fromEntries(Object.entries(template?.metadata?.annotations ?? {}).filter(([k]) => !isRollguardAnnotation(k)));
  return JSON.stringify({ ...template, metadata: { ...template?.metadata, annotations } });
}

/** The object an annotation key names, among the reads of a template (or the key's own name). */
function objectOfKey(key: string): { kind: ObjectKind; name: string } | undefined {
  for (const kind of OBJECT_KINDS) {
    const prefix = ANNOTATION_PREFIX[kind];
    if (key.startsWith(prefix)) return { kind, name: key.slice(prefix.length) };
  }
  return undefined;
}

async function rollguardEvents(world: World): Promise<CoreV1Event[]> {
  const out: CoreV1Event[] = [];
  for (const namespace of world.namespaces) out.push(...(await world.core.listNamespacedEvent({ namespace })).items.filter((e) => e.source?.component === 'rollguard'));
  return out;
}

const eventsOf = (events: CoreV1Event[], uid: string, reason?: string): CoreV1Event[] =>
  events.filter((e) => e.involvedObject.uid === uid && (reason === undefined || e.reason === reason));

/** One template change of rollguard's loop and what in it needs an Event. */
export interface LoopRollout {
  history: WorkloadHistory;
  before: WorkloadState;
  after: WorkloadState;
  /** versions (or removals, as `no longer tracking Kind name`) its Event must name */
  mustName: string[];
}

/** What the transition checks read: the recorded states, the checker's own writes, the floor. */
export interface RecordedRun {
  recorder: Pick<World['recorder'], 'workloads' | 'versions'>;
  checkerWrites: ReadonlySet<string>;
  floorMs: number;
}

/** The transitions of every workload since `since` (uid → index of the first state of this run). */
export function transitions(world: RecordedRun, since: Map<string, number>): { loop: LoopRollout[]; violations: Violation[]; figures: Figures } {
  const figures = zeroFigures();
  const violations: Violation[] = [];
  const loop: LoopRollout[] = [];
  for (const history of world.recorder.workloads.values()) {
    const from = Math.max(1, since.get(history.uid) ?? 0);
    for (let i = from; i < history.states.length; i++) {
      const before = history.states[i - 1]!;
      const after = history.states[i]!;
      if (before.deleted || after.deleted || before.templateText === after.templateText) continue;
      if (world.checkerWrites.has(after.resourceVersion)) {
        figures.userTemplateWrites++;
        continue;
      }
      figures.loopRollouts++;
      const where = `${describe(history)} at resourceVersion ${after.resourceVersion}`;
      if (withoutRollguardValues(before.template) !== withoutRollguardValues(after.template)) {
        violations.push({ invariant: 'own-fields', workload: where, detail: 'a write that is not the checker\'s changed the template beyond rollguard\'s annotations' });
      }
      const reads = readsOf(after.template);
      const mustName: string[] = [];
      let kind: 'data' | 'annotation' | 'repair' | 'other' = 'other';
      for (const key of new Set([...Object.keys(before.values), ...Object.keys(after.values)])) {
        const was = before.values[key];
        const now = after.values[key];
        if (was === now) continue;
        const object = objectOfKey(key);
        const read = object ? reads.get(`${object.kind}/${object.name}`) : undefined;
        if (now === undefined) {
          if (read) violations.push({ invariant: 'explained', workload: where, detail: `${key} removed while the template reads ${object?.kind} ${object?.name}` });
          mustName.push(`no longer tracking ${object?.kind} ${object?.name}`);
          continue;
        }
        const next = parseAnnotationValue(now);
        if (next.kind === 'version') mustName.push(String(next.resourceVersion));
        if (was === undefined) {
          if (kind === 'other') kind = 'annotation';
          continue;
        }
        const prev = parseAnnotationValue(was);
        if (prev.kind === 'version' && next.kind === 'version' && next.resourceVersion < prev.resourceVersion) {
          violations.push({ invariant: 'backwards', workload: where, detail: `${key}: ${was} → ${now}` });
          continue;
        }
        if (!read || !object) {
          violations.push({ invariant: 'explained', workload: where, detail: `${key}: ${was} → ${now}, a reference the template does not read` });
          continue;
        }
        if (prev.kind === 'absent') {
          kind = 'data';
          continue;
        }
        if (prev.kind !== 'version') continue;
        const fromRecord = world.recorder.versions.get(was);
        const foreign = !fromRecord || fromRecord.namespace !== history.namespace || fromRecord.kind !== object.kind || fromRecord.name !== object.name;
        if (foreign) {
          kind = 'repair';
          continue;
        }
        const toData = next.kind === 'version' ? world.recorder.versions.get(now)?.data : undefined;
        if (next.kind === 'version' && !world.recorder.versions.has(now)) {
          violations.push({ invariant: 'explained', workload: where, detail: `${key} → ${now}, a version the checker never saw of ${object.kind} ${object.name}` });
          continue;
        }
        if (viewOf(fromRecord.data, read) === viewOf(toData, read)) {
          violations.push({ invariant: 'explained', workload: where, detail: `${key}: ${was} → ${now}, but what the set reads of it is the same (${viewOf(toData, read)})` });
          continue;
        }
        if (!startable(toData, read)) {
          violations.push({ invariant: 'explained', workload: where, detail: `${key}: ${was} → ${now} rolled the set into pods that cannot start (required ${object.kind} ${object.name}${read.requiredKeys.size ? ` keys ${[...read.requiredKeys].join(',')}` : ''} missing)` });
          continue;
        }
        kind = 'data';
      }
      if (kind === 'data') figures.dataRollouts++;
      else if (kind === 'annotation') figures.annotations++;
      else if (kind === 'repair') figures.repairs++;
      loop.push({ history, before, after, mustName });
    }
  }
  return { loop, violations, figures };
}

/** Consecutive loop rollouts of one set at least the restart floor apart, by the times rollguard recorded. */
export function floorViolations(world: Pick<RecordedRun, 'floorMs'>, loop: LoopRollout[]): Violation[] {
  const out: Violation[] = [];
  const byUid = new Map<string, LoopRollout[]>();
  for (const r of loop) byUid.set(r.history.uid, [...(byUid.get(r.history.uid) ?? []), r]);
  for (const rollouts of byUid.values()) {
    let lastAt: number | undefined;
    for (const r of rollouts) {
      const at = Date.parse(r.after.annotations[LAST_RESTART_ANNOTATION] ?? '');
      if (Number.isNaN(at)) continue;
      if (lastAt !== undefined && at !== lastAt && at - lastAt < world.floorMs - 50) {
        out.push({ invariant: 'floor', workload: describe(r.history), detail: `two rollouts ${at - lastAt} ms apart (restart floor ${world.floorMs} ms), at resourceVersion ${r.after.resourceVersion}` });
      }
      lastAt = at;
    }
  }
  return out;
}

export function missingEvents(loop: LoopRollout[], events: CoreV1Event[]): Violation[] {
  const out: Violation[] = [];
  for (const r of loop) {
    const own = eventsOf(events, r.history.uid);
    if (own.some((e) => e.involvedObject.resourceVersion === r.after.resourceVersion)) continue;
    const unnamed = r.mustName.filter((what) => !own.some((e) => (/^\d+$/.test(what) ? new RegExp(`(→ |resourceVersion )${what}(\\D|$)`).test(e.message ?? '') : (e.message ?? '').includes(what))));
    if (unnamed.length > 0) out.push({ invariant: 'event', workload: `${describe(r.history)} at resourceVersion ${r.after.resourceVersion}`, detail: `no Event names ${unnamed.join(', ')}` });
  }
  return out;
}

/** Whether each live template names a version whose data, as the set reads it, is the object's now; what is not. */
async function settledProblems(world: World, events: CoreV1Event[]): Promise<Violation[]> {
  const out: Violation[] = [];
  for (const namespace of world.namespaces) {
    const objects = new Map<string, Record<string, string> | undefined>();
    for (const cm of (await world.core.listNamespacedConfigMap({ namespace })).items) objects.set(`ConfigMap/${cm.metadata!.name}`, { ...(cm.data ?? {}) });
    for (const s of (await world.core.listNamespacedSecret({ namespace })).items) {
      objects.set(`Secret/${s.metadata!.name}`, Object.fromEntries(Object.entries(s.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')])));
    }
    const workloads = [
      ...(await world.apps.listNamespacedStatefulSet({ namespace })).items.map((w) => ({ kind: 'StatefulSet', w })),
      ...(await world.apps.listNamespacedDeployment({ namespace })).items.map((w) => ({ kind: 'Deployment', w })),
      ...(await world.apps.listNamespacedDaemonSet({ namespace })).items.map((w) => ({ kind: 'DaemonSet', w })),
    ];
    for (const { kind, w } of workloads) {
      const where = `${kind} ${namespace}/${w.metadata!.name}`;
      const uid = w.metadata!.uid!;
      const template = w.spec?.template;
      const values = Object.fromEntries(Object.entries(template?.metadata?.annotations ?? {}).filter(([k]) => isRollguardAnnotation(k)));
      const reads = readsOf(template);
      const warned = (reason: string): boolean => eventsOf(events, uid, reason).length > 0;
      const held = (read: ObjectRead, why: string): void => {
        if (!warned('ReferenceMissing')) out.push({ invariant: 'held', workload: where, detail: `${read.kind} ${read.name}: ${why}, held without a ReferenceMissing Warning` });
      };
      for (const read of reads.values()) {
        const key = annotationKey(read.kind, read.name);
        const value = values[key];
        const now = objects.get(`${read.kind}/${read.name}`);
        if (value === undefined) {
          out.push({ invariant: 'settled', workload: where, detail: `${key} missing` });
          continue;
        }
        const parsed = parseAnnotationValue(value);
        if (parsed.kind === 'absent') {
          if (now !== undefined) out.push({ invariant: 'settled', workload: where, detail: `${key}: absent, but ${read.kind} ${read.name} exists` });
          continue;
        }
        const named = world.recorder.versions.get(value);
        if (!named || named.namespace !== namespace || named.name !== read.name || named.kind !== read.kind) {
          out.push({ invariant: 'settled', workload: where, detail: `${key}: ${value} is no version of ${read.kind} ${namespace}/${read.name}` });
          continue;
        }
        if (now === undefined) {
          if (read.required) held(read, 'deleted');
          else out.push({ invariant: 'settled', workload: where, detail: `${key}: ${value}, but the optional ${read.kind} ${read.name} is gone` });
          continue;
        }
        if (viewOf(named.data, read) === viewOf(now, read)) continue;
        if (!startable(now, read)) held(read, `a required key is missing`);
        else {
          const extra = ['VersionHeldBack', 'ForeignVersion', 'WriteInvalid'].filter(warned);
          out.push({ invariant: 'settled', workload: where, detail: `${key}: ${value} reads ${viewOf(named.data, read)}, the object now ${viewOf(now, read)}${extra.length ? ` (Warnings: ${extra.join(', ')})` : ' (no Warning)'}` });
        }
      }
      for (const key of Object.keys(values)) {
        const object = objectOfKey(key);
        if (object && !reads.has(`${object.kind}/${object.name}`)) out.push({ invariant: 'settled', workload: where, detail: `${key} left for a reference the template no longer has` });
      }
    }
  }
  return out;
}

async function idle(world: World): Promise<true | string> {
  const s = (await world.rollguard!.status()) as { reconcile?: { queued: number; in_flight: number } };
  return (s.reconcile?.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
}

/** A change of the probe's ConfigMap, rolled: the loop has seen every event before it. */
async function probeRoundTrip(world: World): Promise<void> {
  const namespace = world.namespaces[0];
  const cm = await world.core.patchNamespacedConfigMap({ namespace, name: 'probe', body: [{ op: 'replace', path: '/data/k1', value: String(Date.now()) }] });
  const rv = cm.metadata!.resourceVersion!;
  await waitFor('the probe set rolled', async () => {
    const s = await world.apps.readNamespacedStatefulSet({ namespace, name: 'probe' });
    return s.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'probe')] === `${cm.metadata!.uid}/${rv}` || undefined;
  }, { timeoutMs: world.floorMs + world.debounceMs + 30_000 });
}

/**
 * Brings rollguard and its webhook back, waits for a quiet period (probe rolled, the queue
 * empty, every template settled, or a deadline), then checks every invariant.
 */
export async function checkAfterQuiet(world: World, since: Map<string, number>): Promise<{ violations: Violation[]; figures: Figures }> {
  if (!world.rollguard) await world.startRollguard();
  if (!world.webhookUp) await world.setWebhook(true);
  await world.rollguard!.waitReady();
  await probeRoundTrip(world);
  const deadline = world.floorMs + world.debounceMs + 5_000 + 30_000;
  let problems: Violation[] = [];
  try {
    await waitFor('a quiet, settled state', async () => {
      const quiet = await idle(world);
      problems = await settledProblems(world, await rollguardEvents(world));
      if (quiet !== true) problems.push({ invariant: 'idle', workload: 'rollguard', detail: `reconcile queue not empty: ${quiet}` });
      return problems.length === 0 || undefined;
    }, { timeoutMs: deadline, intervalMs: 500 });
  } catch {
    // what was last seen is the finding
  }
  const { loop, violations, figures } = transitions(world, since);
  let eventProblems: Violation[] = [];
  try {
    await waitFor('an Event for every rollout', async () => {
      eventProblems = missingEvents(loop, await rollguardEvents(world));
      return eventProblems.length === 0 || undefined;
    }, { timeoutMs: 15_000, intervalMs: 500 });
  } catch {
    // reported below
  }
  return { violations: [...problems, ...violations, ...floorViolations(world, loop), ...eventProblems], figures };
}
