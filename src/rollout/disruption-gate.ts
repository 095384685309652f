import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import type { EventSpec } from '../kube/events.js';
import type { HeldScaleDownOf } from './scale-down-hold.js';

/*
 * The one question the rollout asks before a write that stops pods: may they go now? The rollout
 * owns this interface and knows nothing of what answers it; src/handover implements it (a
 * primary's pod goes once the role has moved), and main.ts hands it in.
 */

/** One write of the rollout that would stop pods, as the gate is asked about it. */
export interface GateRequest {
  /** `namespace/name` of the set. */
  key: string;
  set: V1StatefulSet;
  /** The set's pods, from the cache. */
  pods: readonly V1Pod[];
  /** The pods the write stops: those a partition step replaces, a forced rollback deletes, or a held scale-down removes. */
  stopping: readonly string[];
  /** The write applies this held scale-down: the pods that stay are all there is to hand work to. */
  scaleDown?: HeldScaleDownOf<'held'>;
  /** Patches the set behind its resourceVersion; a conflict throws, and the set is decided again on the fresh one. */
  write(ops: Operation[]): Promise<void>;
  /** Records an Event on the set. */
  record(spec: EventSpec): Promise<void>;
  now: Date;
}

export type GateVerdict =
  /** The pods may go. `why` says so in the Event of a held scale-down; `warning`: that Event is a Warning. */
  | { open: true; why?: string; warning?: boolean }
  /** Not yet: look again after `requeueAfterMs` (or when a watch event wakes the set); `blocked`: report a block about `pod`. */
  | { open: false; requeueAfterMs?: number; blocked?: { pod: string; cause: string; message: string } };

/** One leadership term's gate; its memory starts empty, and what must outlive a term is written on the set. */
export interface DisruptionGate {
  mayStop(request: GateRequest): Promise<GateVerdict>;
  /** Told of every change of a set, before it is reconciled: a scale-down is seen here in the instant the StatefulSet controller sees it. */
  noteSetChange(previous: V1StatefulSet | undefined, current: V1StatefulSet, pods: () => readonly V1Pod[], record: (spec: EventSpec) => Promise<void>): void;
  /** The pods a held scale-down is about to remove, after the gate let them go. */
  removing(set: V1StatefulSet, pods: readonly V1Pod[]): void;
  /** The set is gone or no longer gated. */
  forget(key: string): void;
  /** Resolves once the gate's work off the queue (calls in flight) has ended. */
  settled(): Promise<void>;
}

/** What the gate is doing on a set, for /status: the move of a role in flight, from which pod to which. */
export interface GateProgress {
  from: string;
  to: string;
  attempt: number;
  fallback: boolean;
  startedAt: string;
  paused: boolean;
  /** Paused past its timeout: no more attempts, held for a person. */
  gaveUp?: boolean;
}

/** What main.ts hands the rollout controller. */
export interface DisruptionGates {
  /** The pod annotations the gate reads; the slim pod cache keeps these and drops every other. */
  podAnnotations: readonly string[];
  /** The gate's progress on a set, read from the set alone; undefined when there is none. */
  progress(set: V1StatefulSet): GateProgress | undefined;
  /** A gate for one term: `enqueue` wakes a set when work off the queue ends, `signal` ends the term. */
  forTerm(term: { enqueue(key: string): void; signal: AbortSignal }): DisruptionGate;
}
