import type { CacheStatus } from './kube/informer.js';
import type { LeaderStatus } from './kube/leader-election.js';
import type { RolloutSummary } from './rollout/controller.js';
import type { Readiness } from './server/readiness.js';

/** GET /status: what a person (or `rollguard status`) needs to see what this replica is doing. */
export interface RollguardStatus {
  version: string;
  identity: string;
  shutting_down: boolean;
  ready: boolean;
  not_ready_reasons: string[];
  admission: { in_flight: number };
  reconcile: { in_flight: number; queued: number };
  leader: { enabled: boolean; leader: boolean; holder?: string };
  caches: Record<string, CacheStatus>;
  certificate: { source: string; not_after?: string; ca_not_after?: string };
  /** health-gated rollouts in progress (known on the leader) */
  rollouts: PublicRollout[];
  /**
   * Entries of each per-object map this process keeps, by map name (a closed set, see
   * docs/troubleshooting.md): counts only, never a name. Each returns to its baseline once the
   * objects it is about are deleted.
   */
  memory: Record<string, number>;
}

/**
 * A rollout as /status tells it. /status is plain HTTP on the admin port, which a scraper or
 * anyone in the pod network may reach: it names what a person needs to look further (the set,
 * where it stands, the blocking pod) and nothing a user wrote into the set: no health URL, no
 * answer of one. The whole story is in the RolloutBlocked Event, behind the API server's RBAC.
 */
export interface PublicRollout {
  namespace: string;
  name: string;
  partition: number;
  replicas: number;
  update_revision: string;
  last_step_at?: string;
  /** e.g. "pod web-0" or "health check (pod web-1)"; the Event on the set says why. */
  blocked_by?: string;
  /** The primary handover in flight: pods, attempt, since when; what the endpoint answered is in the Events. */
  handover?: { from: string; to: string; attempt: number; fallback: boolean; started_at: string; paused: boolean; gave_up?: boolean };
  /** A scale-down held at `replicas` until the primary role has left the pods it removes. */
  wanted_replicas?: number;
}

export function publicRollout(r: RolloutSummary): PublicRollout {
  const blockedBy = r.blockedBy ? (r.blockedBy.healthCheck ? `health check (pod ${r.blockedBy.pod})` : `pod ${r.blockedBy.pod}`) : undefined;
  return {
    namespace: r.namespace,
    name: r.name,
    partition: r.partition,
    replicas: r.replicas,
    update_revision: r.updateRevision,
    ...(r.lastStepAt !== undefined ? { last_step_at: r.lastStepAt } : {}),
    ...(blockedBy !== undefined ? { blocked_by: blockedBy } : {}),
    ...(r.handover !== undefined
      ? { handover: { from: r.handover.from, to: r.handover.to, attempt: r.handover.attempt, fallback: r.handover.fallback, started_at: r.handover.startedAt, paused: r.handover.paused, ...(r.handover.gaveUp ? { gave_up: true } : {}) } }
      : {}),
    ...(r.wantedReplicas !== undefined ? { wanted_replicas: r.wantedReplicas } : {}),
  };
}

/** Where each part of the status comes from; every one is read when the status is asked for. */
export interface StatusSources {
  version: string;
  identity: string;
  shuttingDown(): boolean;
  readiness(): Readiness;
  admissionInFlight(): number;
  controllers(): { inFlight: number; queued: number }[];
  /** undefined: leader election off, this replica always leads. */
  leader(): LeaderStatus | undefined;
  caches(): Record<string, CacheStatus>;
  certificate(): { source: string; notAfter?: string; caNotAfter?: string };
  rollouts(): RolloutSummary[];
  memory(): Record<string, number>;
}

export function rollguardStatus(from: StatusSources): RollguardStatus {
  const { ready, reasons } = from.readiness();
  const leader = from.leader();
  const cert = from.certificate();
  const controllers = from.controllers();
  return {
    version: from.version,
    identity: from.identity,
    shutting_down: from.shuttingDown(),
    ready,
    not_ready_reasons: reasons,
    admission: { in_flight: from.admissionInFlight() },
    reconcile: {
      in_flight: controllers.reduce((sum, c) => sum + c.inFlight, 0),
      queued: controllers.reduce((sum, c) => sum + c.queued, 0),
    },
    leader: { enabled: leader !== undefined, leader: leader ? leader.leader : true, holder: leader ? leader.holder : from.identity },
    caches: from.caches(),
    certificate: { source: cert.source, not_after: cert.notAfter, ca_not_after: cert.caNotAfter },
    rollouts: from.rollouts().map(publicRollout),
    memory: from.memory(),
  };
}
