import type { Workload, WorkloadKind } from '../kube/workloads.js';
import { compatDialects, STACKABLE_ENABLED_LABEL } from '../compat/stackable.js';
import { ENABLED_LABEL, LAST_RESTART_ANNOTATION, RESTART_REASON_ANNOTATION, ROLLGUARD_DIALECT, dialectOf, type Dialect } from '../restarter/annotations.js';
import { annotationWritesBumpGeneration, unsupportedFeatures, unsupportedMessage } from '../restarter/kind-features.js';
import { TIMING_ANNOTATION, defaultTiming, parseTiming, type Timing } from '../restarter/timing.js';
import { HEALTH_GATED_ROLLOUTS } from '../rollout/decision.js';
import { PRIMARY_HANDOVER } from '../handover/settings.js';
import { momentOf, type EventLine, type Explanation, type NextStep, type ReferenceExplanation, type WorkloadState } from './explanation.js';
import type { WorkloadFacts } from './facts.js';
import { restartHistory } from './history.js';
import { pendingRestart } from './pending-restart.js';
import { referenceStates } from './reference-states.js';
import { rolloutProgress } from './rollout-progress.js';

/** The dialects a workload may be restarted in: Stackable's (under --compat stackable) before rollguard's, as the loop orders them. */
const DIALECTS: readonly Dialect[] = [...compatDialects('stackable'), ROLLGUARD_DIALECT];
/** Events kept in the explanation, newest first. */
const MAX_EVENTS = 20;

/** Why a workload is not opted in, in words a user acts on. */
function notOptedIn(kind: WorkloadKind, labels: Record<string, string> | undefined): string {
  const own = labels?.[ENABLED_LABEL];
  if (own !== undefined) return `its label ${ENABLED_LABEL} is ${JSON.stringify(own)}; rollguard manages a ${kind} only with ${ENABLED_LABEL}: "true"`;
  if (labels?.[STACKABLE_ENABLED_LABEL] === 'true') return `it carries Stackable's label ${STACKABLE_ENABLED_LABEL}, which opts in StatefulSets only (under --compat stackable); a ${kind} needs ${ENABLED_LABEL}: "true"`;
  return `it has no label ${ENABLED_LABEL}: "true" (kubectl label ${kind.toLowerCase()} <name> ${ENABLED_LABEL}=true opts it in; its pods restart once, when rollguard first annotates the template)`;
}

/**
 * The dialect the workload is restarted in. Which --compat rollguard runs with is not on the
 * object, but its writes are: of the dialects whose label opts the workload in, the one whose
 * annotations the template carries; else the loop's order (Stackable's first).
 */
function dialectFor(kind: WorkloadKind, workload: Workload): Dialect | undefined {
  const candidates = DIALECTS.filter((d) => dialectOf([d], workload.metadata?.labels, kind));
  const keys = Object.keys(workload.spec?.template?.metadata?.annotations ?? {});
  return candidates.find((d) => keys.some((k) => d.isOwnAnnotation(k))) ?? candidates[0];
}

function lastRestartOf(workload: Workload): Date | undefined {
  const raw = workload.metadata?.annotations?.[LAST_RESTART_ANNOTATION];
  const at = raw === undefined ? NaN : Date.parse(raw);
  return Number.isNaN(at) ? undefined : new Date(at);
}

/** The rules on the workload, each missing one (no record, an older rollguard's) rollguard's default. */
function timingOf(workload: Workload): { recorded: boolean; rules: Timing } {
  const recorded = parseTiming(workload.metadata?.annotations?.[TIMING_ANNOTATION]);
  return { recorded: recorded !== undefined, rules: { ...defaultTiming(), ...recorded } };
}

function eventLines(facts: WorkloadFacts): EventLine[] {
  return [...facts.events]
    .sort((a, b) => b.lastAt.getTime() - a.lastAt.getTime())
    .slice(0, MAX_EVENTS)
    .map((e) => ({ type: e.type, reason: e.reason, message: e.message, count: e.count, first: momentOf(e.firstAt, facts.now), last: momentOf(e.lastAt, facts.now) }));
}

function seenByRollguard(workload: Workload, references: readonly ReferenceExplanation[], facts: WorkloadFacts, dialect: Dialect): boolean {
  const template = workload.spec?.template?.metadata?.annotations ?? {};
  return (
    references.length === 0 ||
    Object.keys(template).some((k) => dialect.isOwnAnnotation(k)) ||
    workload.metadata?.annotations?.[LAST_RESTART_ANNOTATION] !== undefined ||
    facts.events.some((e) => e.component === 'rollguard')
  );
}

function upToDateSummary(references: readonly ReferenceExplanation[], lastRestart: Date | undefined): string {
  const tracked = references.filter((r) => r.state === 'up-to-date' || r.state === 'metadata-only' || r.state === 'unread-keys' || r.state === 'in-place').length;
  const optedOut = references.filter((r) => r.state === 'ignored' || r.state === 'untracked');
  const parts = [references.length === 0 ? 'up to date: the template references no ConfigMap or Secret' : `up to date: the template names the current version of ${tracked} of ${references.length} references`];
  if (optedOut.length > 0) parts.push(`${optedOut.map((r) => `${r.kind} ${r.name}`).join(', ')} opted out: ${optedOut.length === 1 ? 'its' : 'their'} changes restart nothing`);
  if (lastRestart) parts.push(`last restarted by rollguard at ${lastRestart.toISOString()}`);
  return parts.join('; ');
}

/**
 * Why a workload restarted or did not, and what rollguard does next and when, from what a reader
 * with get and list found (`facts`). Pure: the same facts give the same explanation.
 */
export function explainWorkload(facts: WorkloadFacts): Explanation {
  const { kind, namespace, name, workload, now } = facts;
  const base = { workload: { kind, namespace, name, ...(workload?.metadata?.generation !== undefined ? { generation: workload.metadata.generation } : {}) }, at: now.toISOString() };
  const empty = { timing: { recorded: false, rules: defaultTiming() }, references: [], next: [], restarts: [], pods: [], events: eventLines(facts), notes: [] };
  if (!workload) return { ...base, ...empty, managed: false, notManaged: `no ${kind} ${namespace}/${name}`, state: 'not-found', summary: `no ${kind} ${name} in namespace ${namespace}` };

  const timing = timingOf(workload);
  const dialect = dialectFor(kind, workload);
  if (!dialect || workload.metadata?.deletionTimestamp) {
    const why = workload.metadata?.deletionTimestamp ? `it is being deleted (since ${new Date(workload.metadata.deletionTimestamp).toISOString()})` : notOptedIn(kind, workload.metadata?.labels);
    return { ...base, ...empty, timing, managed: false, notManaged: why, state: 'unmanaged', summary: `not managed by rollguard: ${why}` };
  }

  const notes: string[] = [...facts.problems];
  if (dialect !== ROLLGUARD_DIALECT) notes.push(`restarted in Stackable's dialect (label ${dialect.enabledLabel}): only when rollguard runs with --compat stackable`);
  const asked = unsupportedFeatures(kind, workload.metadata?.annotations, [HEALTH_GATED_ROLLOUTS, PRIMARY_HANDOVER]);
  if (asked.length > 0) notes.push(unsupportedMessage(kind, asked));
  if (!timing.recorded) notes.push(`${TIMING_ANNOTATION} is not on the workload yet (a rollguard before it, or a workload it has not written since): times use rollguard's default flags`);
  if (workload.metadata?.annotations?.[RESTART_REASON_ANNOTATION] !== undefined) {
    notes.push(`the webhook folded a version bump into the owner's last template write (${workload.metadata.annotations[RESTART_REASON_ANNOTATION]}); the leader records its Event and removes ${RESTART_REASON_ANNOTATION}`);
  }
  for (const e of facts.events) if (e.component === 'rollguard' && e.type === 'Warning' && e.reason === 'WriteDenied') notes.push(`rollguard's write was denied (${e.lastAt.toISOString()}): ${e.message}`);

  const references = referenceStates({ kind, workload, dialect, objects: facts.objects, pods: facts.pods, revisions: facts.revisions, now });
  for (const r of references) if (r.state === 'unreadable') notes.push(`${r.kind} ${r.name} could not be read (${r.why}): its state is the template's`);
  const lastRestart = lastRestartOf(workload);
  const rollout = rolloutProgress({ kind, workload, pods: facts.pods, revisions: facts.revisions, events: facts.events, timing: timing.rules, now });
  const restarts = restartHistory({ kind, dialect, revisions: facts.revisions, events: facts.events, pods: facts.pods, now });
  const common = { ...base, timing, references, restarts, pods: rollout.pods, events: eventLines(facts), notes, managed: true, dialect: dialect.name, ...(lastRestart ? { lastRestartAt: momentOf(lastRestart, now) } : {}) };

  if (!seenByRollguard(workload, references, facts, dialect)) {
    const why = `rollguard has not annotated its template: the webhook did not see its creation and the loop has not reached it (rollguard down or without a leader, or the namespace outside --watch-namespaces)`;
    return { ...common, notManaged: why, state: 'unseen', summary: `opted in, but ${why}`, next: [{ cause: 'pace', text: 'rollguard annotates the template when its loop reaches the workload: one restart (Event ReferencesAnnotated)' }] };
  }

  const pending = pendingRestart({ references, timing: timing.rules, lastRestartAt: lastRestart, workloadWrittenAt: facts.workloadWrittenAt, now, metadataOnlyUnrecorded: annotationWritesBumpGeneration(kind) });
  const next: NextStep[] = [...rollout.next, ...(pending?.next ?? [])];
  const changed = references.filter((r) => r.state === 'changed' || r.state === 'dropped');
  const pendingText = pending && `${changed.map((r) => r.change).join('; ')}; ${pendingPhrase(pending.state, pending.next[0]!)}`;
  let state: WorkloadState;
  let summary: string;
  if (rollout.state === 'handover-paused' || rollout.state === 'held' || rollout.state === 'handover') {
    state = rollout.state;
    summary = `${rollout.summary ?? ''}${pendingText ? `; pending: ${pendingText}` : ''}`;
  } else if (pending) {
    state = pending.state;
    summary = pendingText!;
  } else if (rollout.state === 'rolling') {
    state = 'rolling';
    summary = rollout.summary ?? 'rolling';
  } else {
    state = references.some((r) => r.state === 'ignored' || r.state === 'untracked') ? 'ignored' : 'up-to-date';
    summary = upToDateSummary(references, lastRestart);
  }
  if (next.length === 0) next.push({ cause: 'nothing', text: 'nothing until a referenced object changes' });
  return { ...common, state, summary, next };
}

/** What a pending restart waits for, in a few words with its time. */
function pendingPhrase(state: string, first: NextStep): string {
  const until = first.at ? ` until ${first.at.at} (${first.at.inSeconds >= 0 ? `in ${first.at.inSeconds}s` : `${-first.at.inSeconds}s ago`})` : '';
  if (state === 'debouncing') return `debounce${until}, then a restart`;
  if (state === 'floored') return `restart deferred by the restart floor${until}`;
  return first.text;
}
