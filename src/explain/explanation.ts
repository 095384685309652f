import type { WorkloadKind } from '../kube/workloads.js';
import type { ObjectKind, ReadVia } from '../restarter/references.js';
import type { Timing } from '../restarter/timing.js';

/**
 * What `rollguard why` answers about one workload: plain JSON (times as RFC 3339), the same for
 * `-o json` and, rendered, for people. Everything in it comes from objects a user can get and
 * list; nothing from rollguard's memory.
 */

/** The one-word state of a workload, a closed set (`rollguard list` prints it). */
export const WORKLOAD_STATES = [
  'not-found',
  'unmanaged',
  'unseen',
  'up-to-date',
  'ignored',
  'debouncing',
  'floored',
  'waiting',
  'rolling',
  'held',
  'handover',
  'handover-paused',
] as const;
export type WorkloadState = (typeof WORKLOAD_STATES)[number];

/** A time, and how far it is from the moment of the explanation (negative: past). */
export interface Moment {
  at: string;
  inSeconds: number;
}

export type ReferenceState =
  /** the template names the object's current version */
  | 'up-to-date'
  /** the object moved on and the pods have not: a restart is due */
  | 'changed'
  /** the template no longer references it; its annotation goes with the next restart */
  | 'dropped'
  /** the object moved on, but rollguard's digest record says its data is what the pods read */
  | 'metadata-only'
  /** the object's data moved on only in keys no pod of the workload reads (rollguard's digest record): no restart */
  | 'unread-keys'
  /** the object's data moved on in keys the pods read only from mounted files, updated in place (rollguard.io/reload: files): no restart */
  | 'in-place'
  /** opted out (ignore label or annotation): frozen where it was, its changes restart nothing */
  | 'ignored'
  /** opted out before rollguard tracked it: never tracked */
  | 'untracked'
  /** the template names a version newer than the API server has (etcd restored from a backup?) */
  | 'ahead'
  /** a required object is gone (not optional): the template keeps its version, no restart into pods that cannot start (ReferenceMissing) */
  | 'missing'
  /** the reader could not read the object */
  | 'unreadable';

export interface ReferenceExplanation {
  kind: ObjectKind;
  name: string;
  /** The pod-template annotation that records it. */
  annotation: string;
  /** Where the template reads it; `keys` undefined: every key. */
  reads: { via: ReadVia; keys?: string[] }[];
  keys?: string[];
  /** The version the template names (new pods get it): `<uid>/<resourceVersion>` or `absent`. */
  template?: string;
  /** The versions the running pods were made with, from their revisions' templates. */
  pods: { version?: string; pods: number }[];
  /** The object's version now; undefined when unreadable. */
  current?: string;
  state: ReferenceState;
  /** The change in words (`ConfigMap app changed (resourceVersion 812 → 845)`), when there is one. */
  change?: string;
  /** When the object was last written, when it changed. */
  changedAt?: Moment;
  /** Why it is ignored, untracked, metadata-only, unread-keys or unreadable. */
  why?: string;
}

/** What rollguard does next for the workload, a closed set of causes. */
export type NextCause = 'debounce' | 'restart-floor' | 'pace' | 'rollout-step' | 'rollout-blocked' | 'handover' | 'controller' | 'nothing';

export interface NextStep {
  cause: NextCause;
  /** When it happens or is looked at again; undefined: when something else happens (a pod turns Ready, a turn comes). */
  at?: Moment;
  text: string;
}

export interface PodRevision {
  revision: string;
  /** The template's own revision (the newest), which new pods get. */
  update: boolean;
  pods: { name: string; createdAt?: Moment; ready: boolean }[];
}

export type RestartCause =
  /** only rollguard's annotations changed: rollguard restarted it */
  | 'rollguard'
  /** the owner changed the template, and the webhook folded rollguard's bump into that write */
  | 'owner-and-rollguard'
  /** the owner changed the template; rollguard had no part */
  | 'owner'
  /** `kubectl rollout restart` */
  | 'rollout-restart'
  /** the first revision */
  | 'created';

export interface RestartRecord {
  revision: string;
  /** When the revision was made: when the rollout to it began. */
  at?: Moment;
  cause: RestartCause;
  /** What changed, in words: rollguard's Event when it is still there, else from the revisions' annotations. */
  reason: string;
  /** The owner's part of the change: the template fields that differ, at most a few. */
  ownerChanges?: string[];
  /** The pods of this revision that run now, with when each was made (replaced). */
  podsReplaced: { name: string; at?: Moment }[];
}

export interface EventLine {
  type: string;
  reason: string;
  message: string;
  count: number;
  first: Moment;
  last: Moment;
}

export interface Explanation {
  workload: { kind: WorkloadKind; namespace: string; name: string; generation?: number };
  at: string;
  managed: boolean;
  /** The dialect it is restarted in: `rollguard`, or `stackable` (honoured under --compat stackable). */
  dialect?: string;
  /** Why rollguard does not manage it, or why it has not acted on it yet. */
  notManaged?: string;
  state: WorkloadState;
  summary: string;
  /** The rules the deadlines come from: recorded on the workload by rollguard, else its defaults. */
  timing: { recorded: boolean; rules: Timing };
  references: ReferenceExplanation[];
  next: NextStep[];
  lastRestartAt?: Moment;
  restarts: RestartRecord[];
  pods: PodRevision[];
  events: EventLine[];
  notes: string[];
}

/** A time as a Moment seen from `now`. */
export function momentOf(at: Date, now: Date): Moment {
  return { at: at.toISOString(), inSeconds: Math.round((at.getTime() - now.getTime()) / 1000) };
}
