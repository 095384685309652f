import os from 'node:os';
import type { CoreV1Event, V1ObjectReference } from '@kubernetes/client-node';
import { coreV1, type CoreV1 } from './api-clients.js';
import type { KubeAccess } from './kube-client.js';
import type { Logger } from 'pino';
import { isOutcomeUnknown, statusCode } from './api-status.js';

/** The API server stores longer messages, but `kubectl describe` and events.k8s.io cap notes at 1 KB. */
const MESSAGE_MAX_LENGTH = 1024;
/** The same event again within this window bumps the count of the first instead of adding one (as client-go does). */
const AGGREGATION_WINDOW_MS = 10 * 60_000;
/** Events remembered for aggregation; the oldest is forgotten first. */
const AGGREGATION_CACHE_SIZE = 4096;
/** Event names are `<object>.<hex time>`; an object name is cut so the whole stays a valid name. */
const OBJECT_NAME_MAX_LENGTH = 200;
const NANOS_PER_MILLI = 1_000_000n;
/**
 * An Event whose write failed with no answer (the API server unreachable, a broken connection,
 * a 5xx) is written again after these delays: the restart it tells of has happened. The same
 * body each time, so a retry after a lost answer finds it there (409) and stops.
 */
export const EVENT_RETRY_DELAYS_MS = [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 60_000, 60_000, 120_000, 120_000, 300_000];
/** Events waiting for a retry; beyond it the oldest is given up (and logged). */
const PENDING_MAX = 1000;

export type EventType = 'Normal' | 'Warning';

export interface EventSpec {
  type: EventType;
  /** UpperCamelCase, machine-readable: ConfigChanged, PartitionUpdate, RolloutBlocked. */
  reason: string;
  message: string;
  /** What was done, e.g. "PatchPodTemplate". */
  action?: string;
}

/** The object an event is about; namespace, name and uid are required. */
export type EventSubject = Required<Pick<V1ObjectReference, 'apiVersion' | 'kind' | 'namespace' | 'name' | 'uid'>> &
  Pick<V1ObjectReference, 'resourceVersion' | 'fieldPath'>;

export interface EventRecorderOptions {
  kubeConfig: KubeAccess;
  /** The reporting controller, shown as the event's source: "rollguard". */
  component: string;
  /** This replica, e.g. the pod name; the host name by default. */
  instance?: string;
  logger: Logger;
  /** The two calls it makes; from kubeConfig by default. */
  api?: Pick<CoreV1, 'createNamespacedEvent' | 'patchNamespacedEvent'>;
  retryDelaysMs?: readonly number[];
}

interface Pending {
  aggregationKey: string;
  body: CoreV1Event;
  namespace: string;
  attempt: number;
}

interface Recorded {
  namespace: string;
  name: string;
  count: number;
  firstTimestamp: Date;
  lastSeen: number;
}

/**
 * Records core/v1 Events about objects. Never throws: an event that cannot be written is
 * logged, since the action it reports has already happened.
 */
export class EventRecorder {
  private readonly core: Pick<CoreV1, 'createNamespacedEvent' | 'patchNamespacedEvent'>;
  private readonly instance: string;
  private readonly recent = new Map<string, Recorded>();
  private readonly pending = new Set<Pending>();

  constructor(private readonly opts: EventRecorderOptions) {
    this.core = opts.api ?? coreV1(opts.kubeConfig);
    this.instance = opts.instance ?? os.hostname();
  }

  async record(subject: EventSubject, spec: EventSpec): Promise<void> {
    const message = spec.message.length > MESSAGE_MAX_LENGTH ? `${spec.message.slice(0, MESSAGE_MAX_LENGTH - 1)}…` : spec.message;
    const aggregationKey = [subject.uid, spec.type, spec.reason, spec.action ?? '', message].join('\u0000');
    const now = new Date();
    const seen = this.recent.get(aggregationKey);
    try {
      if (seen && now.getTime() - seen.lastSeen < AGGREGATION_WINDOW_MS && (await this.bump(seen, now))) return;
    } catch (err) {
      this.warn(err, subject, spec, message);
      return;
    }
    const body = this.newEvent(subject, spec, message, now);
    await this.create({ aggregationKey, body, namespace: subject.namespace, attempt: 0 });
  }

  /**
   * Writes one Event under a name the caller chose (the same on every try, by every replica),
   * its timestamps at `at`: 'created' by this call, 'found' when an earlier one stored it (409),
   * 'failed' when it could not be written (logged; the caller, which holds the record that it is
   * due, tries again). Not aggregated, no retries of its own.
   */
  async recordOnce(subject: EventSubject, spec: EventSpec, opts: { name: string; at: Date }): Promise<'created' | 'found' | 'failed'> {
    const message = spec.message.length > MESSAGE_MAX_LENGTH ? `${spec.message.slice(0, MESSAGE_MAX_LENGTH - 1)}…` : spec.message;
    const body = this.newEvent(subject, spec, message, opts.at);
    body.metadata = { ...body.metadata, name: opts.name };
    try {
      await this.core.createNamespacedEvent({ namespace: subject.namespace, body });
      return 'created';
    } catch (err) {
      if (statusCode(err) === 409) return 'found';
      this.warn(err, subject, spec, message);
      return 'failed';
    }
  }

  /**
   * Drops the aggregation records of an object that is gone (by uid): a new object of the same
   * name has another uid, so they could never count again.
   */
  forget(uid: string): void {
    const prefix = `${uid}\u0000`;
    for (const key of this.recent.keys()) if (key.startsWith(prefix)) this.recent.delete(key);
  }

  /** Events remembered for aggregation; for /status. */
  aggregatedCount(): number {
    return this.recent.size;
  }

  /** Events written again later because their write failed with no answer; for /status and tests. */
  pendingCount(): number {
    return this.pending.size;
  }

  private async create(item: Pending): Promise<void> {
    try {
      const created = await this.core.createNamespacedEvent({ namespace: item.namespace, body: item.body });
      this.created(item, created.metadata?.name ?? '');
    } catch (err) {
      // A retry whose first try landed after all: it is there.
      if (item.attempt > 0 && statusCode(err) === 409) return this.created(item, item.body.metadata?.name ?? '');
      const delays = this.opts.retryDelaysMs ?? EVENT_RETRY_DELAYS_MS;
      const subject = item.body.involvedObject as EventSubject;
      const spec = { type: item.body.type as EventType, reason: item.body.reason ?? '', message: item.body.message ?? '' };
      if (!isOutcomeUnknown(err) || item.attempt >= delays.length) return this.warn(err, subject, spec, spec.message);
      this.retryLater(item, delays[item.attempt]!);
    }
  }

  private retryLater(item: Pending, delayMs: number): void {
    if (!this.pending.has(item) && this.pending.size >= PENDING_MAX) {
      const oldest = this.pending.values().next().value!;
      this.pending.delete(oldest);
      this.opts.logger.warn({ reason: oldest.body.reason, eventMessage: oldest.body.message }, 'could not record an event: too many waiting for a retry');
    }
    this.pending.add(item);
    const timer = setTimeout(() => {
      this.pending.delete(item);
      void this.create({ ...item, attempt: item.attempt + 1 });
    }, delayMs);
    timer.unref();
  }

  private created(item: Pending, name: string): void {
    const at = item.body.firstTimestamp ? new Date(item.body.firstTimestamp) : new Date();
    this.remember(item.aggregationKey, { namespace: item.namespace, name, count: 1, firstTimestamp: at, lastSeen: at.getTime() });
  }

  private warn(err: unknown, subject: EventSubject, spec: EventSpec, message: string): void {
    this.opts.logger.warn(
      { err, object: `${subject.kind} ${subject.namespace}/${subject.name}`, reason: spec.reason, eventMessage: message },
      'could not record an event',
    );
  }

  /** Counts one more occurrence on the recorded event; false when it is gone and a new one is needed. */
  private async bump(seen: Recorded, now: Date): Promise<boolean> {
    try {
      await this.core.patchNamespacedEvent({
        name: seen.name,
        namespace: seen.namespace,
        body: [
          { op: 'replace', path: '/count', value: seen.count + 1 },
          { op: 'replace', path: '/lastTimestamp', value: now.toISOString() },
        ],
      });
    } catch (err) {
      if ((err as { code?: unknown }).code === 404) return false;
      throw err;
    }
    seen.count++;
    seen.lastSeen = now.getTime();
    return true;
  }

  private newEvent(subject: EventSubject, spec: EventSpec, message: string, now: Date): CoreV1Event {
    const objectName = subject.name.slice(0, OBJECT_NAME_MAX_LENGTH);
    return {
      metadata: {
        // The same scheme as client-go: unique per object and instant, readable in `kubectl get events`.
        name: `${objectName}.${(BigInt(now.getTime()) * NANOS_PER_MILLI + BigInt(Math.floor(Math.random() * 1e6))).toString(16)}`,
        namespace: subject.namespace,
      },
      involvedObject: { ...subject },
      type: spec.type,
      reason: spec.reason,
      message,
      action: spec.action,
      count: 1,
      firstTimestamp: now,
      lastTimestamp: now,
      source: { component: this.opts.component },
      reportingComponent: this.opts.component,
      reportingInstance: this.instance,
    };
  }

  private remember(key: string, recorded: Recorded): void {
    this.recent.delete(key);
    this.recent.set(key, recorded);
    if (this.recent.size > AGGREGATION_CACHE_SIZE) {
      const oldest = this.recent.keys().next();
      if (!oldest.done) this.recent.delete(oldest.value);
    }
  }
}
