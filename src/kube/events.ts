import os from 'node:os';
import { CoreV1Api, type CoreV1Event, type KubeConfig, type V1ObjectReference } from '@kubernetes/client-node';
import type { Logger } from 'pino';

/** The API server stores longer messages, but `kubectl describe` and events.k8s.io cap notes at 1 KB. */
const MESSAGE_MAX_LENGTH = 1024;
/** The same event again within this window bumps the count of the first instead of adding one (as client-go does). */
const AGGREGATION_WINDOW_MS = 10 * 60_000;
/** Events remembered for aggregation; the oldest is forgotten first. */
const AGGREGATION_CACHE_SIZE = 4096;
/** Event names are `<object>.<hex time>`; an object name is cut so the whole stays a valid name. */
const OBJECT_NAME_MAX_LENGTH = 200;
const NANOS_PER_MILLI = 1_000_000n;

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
  kubeConfig: KubeConfig;
  /** The reporting controller, shown as the event's source: "rollguard". */
  component: string;
  /** This replica, e.g. the pod name; the host name by default. */
  instance?: string;
  logger: Logger;
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
  private readonly core: CoreV1Api;
  private readonly instance: string;
  private readonly recent = new Map<string, Recorded>();

  constructor(private readonly opts: EventRecorderOptions) {
    this.core = opts.kubeConfig.makeApiClient(CoreV1Api);
    this.instance = opts.instance ?? os.hostname();
  }

  async record(subject: EventSubject, spec: EventSpec): Promise<void> {
    const message = spec.message.length > MESSAGE_MAX_LENGTH ? `${spec.message.slice(0, MESSAGE_MAX_LENGTH - 1)}…` : spec.message;
    const aggregationKey = [subject.uid, spec.type, spec.reason, spec.action ?? '', message].join('\u0000');
    const now = new Date();
    try {
      const seen = this.recent.get(aggregationKey);
      if (seen && now.getTime() - seen.lastSeen < AGGREGATION_WINDOW_MS && (await this.bump(seen, now))) return;
      const created = await this.core.createNamespacedEvent({
        namespace: subject.namespace,
        body: this.newEvent(subject, spec, message, now),
      });
      this.remember(aggregationKey, {
        namespace: subject.namespace,
        name: created.metadata?.name ?? '',
        count: 1,
        firstTimestamp: now,
        lastSeen: now.getTime(),
      });
    } catch (err) {
      this.opts.logger.warn(
        { err, object: `${subject.kind} ${subject.namespace}/${subject.name}`, reason: spec.reason, eventMessage: message },
        'could not record an event',
      );
    }
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
