import { createHash } from 'node:crypto';
import { isJsonObject } from '../kube/json.js';

/**
 * Annotation on a workload (outside its pod template, so writing it rolls nothing): the Event
 * due for the template write it rode in with, as JSON. The loop writes it in the same PATCH
 * that rolls the template, so a process that dies after that write landed and before its Event
 * did leaves the Event to the next leader: a set that carries it gets its Event, under a name
 * made from the mark (`dueEventName`), so that telling it twice (two replicas, a restart) finds
 * it there (409) and adds nothing. Once told it is removed where that is free (a StatefulSet's or
 * a DaemonSet's annotations are no part of its generation); a Deployment keeps it until its next
 * template write replaces it.
 */
export const EVENT_DUE_ANNOTATION = 'rollguard.io/event-due';

/**
 * A mark older than this is not told any more: the API server keeps Events this long by default
 * (`--event-ttl`), so an Event told in time would be gone by now too, and a Deployment's mark,
 * which stays, is not told again each time a new leader finds it after its Event expired.
 */
export const EVENT_DUE_MAX_AGE_MS = 60 * 60_000;

/** The Event one template write is due: of which set (its uid), when, and what it says. */
export interface EventDue {
  uid: string;
  /** RFC 3339, the write's `rollguard.io/last-restart-at` */
  at: string;
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export function formatEventDue(due: EventDue): string {
  return JSON.stringify({ uid: due.uid, at: due.at, type: due.type, reason: due.reason, message: due.message });
}

/** The mark, or undefined when absent or not one rollguard wrote (a wrong shape, a time that does not parse). */
export function parseEventDue(value: string | undefined): EventDue | undefined {
  if (value === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return undefined;
  }
  if (!isJsonObject(parsed)) return undefined;
  const { uid, at, type, reason, message } = parsed;
  if (typeof uid !== 'string' || typeof at !== 'string' || typeof reason !== 'string' || typeof message !== 'string') return undefined;
  if (type !== 'Normal' && type !== 'Warning') return undefined;
  if (Number.isNaN(Date.parse(at)) || reason === '') return undefined;
  return { uid, at, type, reason, message };
}

/** Event names are `<object>.<hex>`, as client-go makes them; an object name is cut so the whole stays a valid name. */
const OBJECT_NAME_MAX_LENGTH = 200;
const NANOS_PER_MILLI = 1_000_000n;

/**
 * The name of the Event a mark is due, the same for every replica and every try: the set's name
 * and the write's time in nanoseconds, as client-go names Events, the sub-millisecond part taken
 * from a hash of the whole mark (two marks of one millisecond get two names).
 */
export function dueEventName(setName: string, due: EventDue): string {
  const nanos = createHash('sha256').update(formatEventDue(due)).digest().readUInt32BE(0) % 1_000_000;
  return `${setName.slice(0, OBJECT_NAME_MAX_LENGTH)}.${(BigInt(Date.parse(due.at)) * NANOS_PER_MILLI + BigInt(nanos)).toString(16)}`;
}

/** What to do with a set's mark: tell its Event, or nothing (told already, another set's, too old). */
export function dueToTell(due: EventDue | undefined, setUid: string | undefined, nowMs: number): boolean {
  if (!due || due.uid !== setUid) return false;
  return nowMs - Date.parse(due.at) <= EVENT_DUE_MAX_AGE_MS;
}
