import type { V1Pod } from '@kubernetes/client-node';
import { isJsonObject, jsonObjectOrUndefined, sameJson } from '../kube/json.js';
import type { WorkloadKind } from '../kube/workloads.js';
import { annotationChanges, storedAnnotations, templateBesidesRollguard, type Dialect } from '../restarter/annotations.js';
import { describeChange } from '../restarter/change-text.js';
import type { V1PodTemplateSpec } from '@kubernetes/client-node';
import { momentOf, type RestartRecord } from './explanation.js';
import { podRevisionLabel, type EventFact, type RevisionFact } from './facts.js';

/** The template annotation `kubectl rollout restart` writes. */
export const KUBECTL_RESTARTED_AT = 'kubectl.kubernetes.io/restartedAt';
/** The Event reasons of rollguard's template writes (restarter/reconciler.ts). */
export const RESTART_REASONS: readonly string[] = ['ConfigChanged', 'ReferencesAnnotated', 'ReferencesRemoved'];
/** An Event this far from a revision's creation can still be its (a retried Event, a slow controller). */
const EVENT_MATCH_WINDOW_MS = 5 * 60_000;
/** The owner's changes named per restart; past them a count. */
const MAX_OWNER_CHANGES = 4;

function annotationsOf(template: unknown): Record<string, string> {
  const raw = jsonObjectOrUndefined(jsonObjectOrUndefined(jsonObjectOrUndefined(template)?.metadata)?.annotations) ?? {};
  return Object.fromEntries(Object.entries(raw).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

/** The paths at which two JSON values differ (`spec.containers[0].image`), at most `limit`. */
/** The owner's template without `kubectl rollout restart`'s annotation: equal on both sides when that was the only change. */
function ownTemplate(template: unknown, dialect: Dialect): unknown {
  const annotations = annotationsOf(template);
  if (!Object.hasOwn(annotations, KUBECTL_RESTARTED_AT)) return templateBesidesRollguard(template as V1PodTemplateSpec, dialect);
  const { [KUBECTL_RESTARTED_AT]: _restartedAt, ...rest } = annotations;
  const t = template as V1PodTemplateSpec;
  return templateBesidesRollguard({ ...t, metadata: { ...t.metadata, annotations: rest } }, dialect);
}

export function differingPaths(a: unknown, b: unknown, limit = MAX_OWNER_CHANGES + 1, at = ''): string[] {
  if (sameJson(a, b)) return [];
  if (Array.isArray(a) && Array.isArray(b) && a.length === b.length) {
    const out: string[] = [];
    for (let i = 0; i < a.length && out.length < limit; i++) out.push(...differingPaths(a[i], b[i], limit - out.length, `${at}[${i}]`));
    return out;
  }
  if (isJsonObject(a) && isJsonObject(b)) {
    const out: string[] = [];
    for (const key of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      if (out.length >= limit) break;
      out.push(...differingPaths(a[key], b[key], limit - out.length, at ? `${at}.${key}` : key));
    }
    return out;
  }
  return [at || '(the whole template)'];
}

/** rollguard's restart Event of this revision: near its creation, naming every object that changed. */
function eventFor(events: readonly EventFact[], createdAt: Date | undefined, objects: readonly string[]): EventFact | undefined {
  const candidates = events.filter(
    (e) => e.component === 'rollguard' && RESTART_REASONS.includes(e.reason) && objects.every((o) => e.message.includes(o)) && (createdAt === undefined || Math.abs(e.firstAt.getTime() - createdAt.getTime()) <= EVENT_MATCH_WINDOW_MS),
  );
  const distance = (e: EventFact): number => (createdAt ? Math.abs(e.firstAt.getTime() - createdAt.getTime()) : 0);
  return candidates.sort((x, y) => distance(x) - distance(y))[0];
}

/**
 * The workload's restarts, newest first, from its revisions (ControllerRevisions, a Deployment's
 * ReplicaSets), which outlive Events: what each revision changed against the one before it
 * (rollguard's annotations, the owner's template, `kubectl rollout restart`), told with
 * rollguard's Event where it is still there (it names the data keys that changed), and the pods of
 * the revision that run now, with when each was made.
 */
export function restartHistory(input: { kind: WorkloadKind; dialect: Dialect; revisions: readonly RevisionFact[]; events: readonly EventFact[]; pods: readonly V1Pod[]; now: Date }): RestartRecord[] {
  const { dialect, now } = input;
  const label = podRevisionLabel(input.kind);
  const ordered = [...input.revisions].sort((a, b) => a.revision - b.revision);
  const records: RestartRecord[] = [];
  ordered.forEach((revision, i) => {
    const podsReplaced = input.pods
      .filter((p) => !p.metadata?.deletionTimestamp && revision.podLabel !== '' && p.metadata?.labels?.[label] === revision.podLabel)
      .map((p) => ({ name: p.metadata?.name ?? '', ...(p.metadata?.creationTimestamp ? { at: momentOf(new Date(p.metadata.creationTimestamp), now) } : {}) }))
      .sort((a, b) => (a.at?.inSeconds ?? 0) - (b.at?.inSeconds ?? 0));
    const at = revision.createdAt ? { at: momentOf(revision.createdAt, now) } : {};
    const previous = ordered[i - 1];
    if (!previous) {
      records.push({ revision: revision.name, ...at, cause: 'created', reason: 'the first revision of the template', podsReplaced });
      return;
    }
    const before = annotationsOf(previous.template);
    const after = annotationsOf(revision.template);
    const ours = annotationChanges(before, storedAnnotations(after, dialect), dialect);
    const owner = differingPaths(templateBesidesRollguard(previous.template as V1PodTemplateSpec, dialect), templateBesidesRollguard(revision.template as V1PodTemplateSpec, dialect));
    const restartedAt = before[KUBECTL_RESTARTED_AT] !== after[KUBECTL_RESTARTED_AT] && after[KUBECTL_RESTARTED_AT] !== undefined;
    const ownerOnlyRestart = restartedAt && differingPaths(ownTemplate(previous.template, dialect), ownTemplate(revision.template, dialect)).length === 0;
    const cause = ours.length > 0 ? (owner.length > 0 ? 'owner-and-rollguard' : 'rollguard') : ownerOnlyRestart ? 'rollout-restart' : 'owner';
    const event = ours.length > 0 ? eventFor(input.events, revision.createdAt, ours.map((c) => (c.kind && c.name ? `${c.kind} ${c.name}` : c.key))) : undefined;
    const ourText = event?.message ?? ours.map(describeChange).join('; ');
    const ownerText =
      cause === 'rollout-restart'
        ? `kubectl rollout restart (at ${after[KUBECTL_RESTARTED_AT]})`
        : `the pod template changed besides rollguard's annotations (${owner.slice(0, MAX_OWNER_CHANGES).join(', ')}${owner.length > MAX_OWNER_CHANGES ? ', …' : ''}): not rollguard's doing`;
    const reason = cause === 'rollguard' ? ourText : cause === 'owner-and-rollguard' ? `the owner's template change, with rollguard's bump in the same write (one rollout): ${ourText}` : ownerText;
    records.push({ revision: revision.name, ...at, cause, reason, ...(owner.length > 0 && cause !== 'rollout-restart' ? { ownerChanges: owner.slice(0, MAX_OWNER_CHANGES) } : {}), podsReplaced });
  });
  return records.reverse();
}
