import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { WorkloadKind } from './kube/workloads.js';

/** Sub-millisecond buckets: an admission review is expected to take well under 1 ms. */
const ADMISSION_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
/** A handover takes a call and a label change: seconds, up to retries × (timeout + interval). */
const HANDOVER_BUCKETS = [0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300];
const RECONCILE_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Why a health-gated rollout is held: a closed set, so the label's series are bounded. */
export const HOLD_REASONS = ['unhealthy_pod', 'health_check', 'handover_paused', 'handover_gave_up', 'scale_down'] as const;
export type HoldReason = (typeof HOLD_REASONS)[number];

/** One set's rollout held now, and since when (ms since the epoch) where that is known. */
export interface Hold {
  reason: HoldReason;
  sinceMs?: number;
}

/** Why a data check could not be made (the bump then rolls without one): no digest key, or the GET failed. */
export const DATA_CHECK_FAILURES = ['key', 'read'] as const;
export type DataCheckFailure = (typeof DATA_CHECK_FAILURES)[number];

/** Every metric rollguard exports, on one registry; each part is handed the ones it moves. */
export function createMetrics(registry = new Registry()) {
  // read when scraped: how long ago each cache last heard from the API server
  const cacheAges = new Map<string, () => number | undefined>();
  // read when scraped: the rollouts held now (the leader knows them; other replicas report none)
  let holds: () => readonly Hold[] = () => [];
  let ready: () => boolean = () => false;
  const dataCheckFailures = new Counter({
    name: 'rollguard_data_check_failures_total',
    help: 'Data checks that could not be made, so the version bump rolled without one, by reason (key: no digest key; read: the GET of the object failed)',
    labelNames: ['reason'],
    registers: [registry],
  });
  // every reason from the start: increase() over a series that appears at its first failure misses that failure
  for (const reason of DATA_CHECK_FAILURES) dataCheckFailures.inc({ reason }, 0);
  const admissionReferenceWaits = new Counter({
    name: 'rollguard_admission_reference_waits_total',
    help: 'Admission reviews that waited (--reference-wait) for the caches to bring a referenced ConfigMap or Secret they did not know, by result (appeared: it came and its version was written; absent: none came in time, written absent)',
    labelNames: ['result'],
    registers: [registry],
  });
  for (const result of ['appeared', 'absent']) admissionReferenceWaits.inc({ result }, 0);
  // process_cpu_seconds_total becomes rollguard_process_cpu_seconds_total, and so on
  collectDefaultMetrics({ register: registry, prefix: 'rollguard_' });
  const r = [registry];
  return {
    registry,
    admissionDuration: new Histogram({
      name: 'rollguard_admission_duration_seconds',
      help: 'Time to answer one admission review, from parsed body to response, by operation (CREATE, UPDATE, DELETE, CONNECT, invalid)',
      labelNames: ['operation'],
      buckets: ADMISSION_BUCKETS,
      registers: r,
    }),
    admissionReviews: new Counter({
      name: 'rollguard_admission_reviews_total',
      help: 'Admission reviews answered, by result (patched, unchanged, not_synced, out_of_scope, invalid, error) and kind (StatefulSet, Deployment, DaemonSet, Rollout, other; none for an invalid review)',
      labelNames: ['result', 'kind'],
      registers: r,
    }),
    admissionInFlight: new Gauge({
      name: 'rollguard_admission_in_flight',
      help: 'Admission reviews being answered now',
      registers: r,
    }),
    patches: new Counter({
      name: 'rollguard_template_patches_total',
      help: 'Pod template annotation patches written by the reconcile loop, by reason and kind of workload (StatefulSet, Deployment, DaemonSet, Rollout)',
      labelNames: ['reason', 'kind'],
      registers: r,
    }),
    restarts: new Counter({
      name: 'rollguard_restarts_total',
      help: 'Rollouts triggered because a referenced object changed, by kind of object (ConfigMap, Secret) and of workload (StatefulSet, Deployment, DaemonSet, Rollout)',
      labelNames: ['kind', 'workload_kind'],
      registers: r,
    }),
    restartsDeferred: new Counter({
      name: 'rollguard_restarts_deferred_total',
      help: 'Restarts held back by the per-set restart floor (--min-restart-interval); the last change still rolls when it passes',
      registers: r,
    }),
    restarterWarnings: new Counter({
      name: 'rollguard_restarter_warnings_total',
      help:
        'Workloads the restarter could not bring up to date as it is, each told with a Warning Event, by reason: cache_lag (a stored version newer than the cache for long), foreign_version (the template named another object\'s version: a copy, a restore; rewritten), invalid (the API server refused the write as invalid; not retried until the workload changes), reference_missing (a required ConfigMap, Secret or key is gone; the set is held at the version its pods run with)',
      labelNames: ['reason'],
      registers: r,
    }),
    dataReads: new Counter({
      name: 'rollguard_data_reads_total',
      help: 'Reads of a referenced object to digest its data (a GET per changed object, shared by the sets that reference it; a LIST at the exact version a template names when no record covers it), by kind',
      labelNames: ['kind'],
      registers: r,
    }),
    metadataOnlyChanges: new Counter({
      name: 'rollguard_metadata_only_changes_total',
      help: 'Version bumps not rolled because the data digest was unchanged (labels, annotations, a change and its revert)',
      registers: r,
    }),
    updatedInPlace: new Counter({
      name: 'rollguard_updated_in_place_total',
      help: 'Data changes the running pods read from their mounted files (rollguard.io/reload: files), recorded without a restart, by kind of object and of workload',
      labelNames: ['kind', 'workload_kind'],
      registers: r,
    }),
    reconcileDuration: new Histogram({
      name: 'rollguard_reconcile_duration_seconds',
      help: 'Time of one reconcile, by controller (restarter, rollout, pod-restarter)',
      labelNames: ['controller'],
      buckets: RECONCILE_BUCKETS,
      registers: r,
    }),
    reconcileErrors: new Counter({
      name: 'rollguard_reconcile_errors_total',
      help: 'Reconciles that failed and were requeued, by controller (write conflicts excluded)',
      labelNames: ['controller'],
      registers: r,
    }),
    queueDepth: new Gauge({
      name: 'rollguard_workqueue_depth',
      help: 'Keys waiting in the work queue, by controller',
      labelNames: ['controller'],
      registers: r,
    }),
    workers: new Gauge({
      name: 'rollguard_controller_workers',
      help: 'Reconciles the controller may have in flight now, by controller (the restarter sizes them to keep its pace)',
      labelNames: ['controller'],
      registers: r,
    }),
    cachedObjects: new Gauge({
      name: 'rollguard_cached_objects',
      help: 'Objects held in the in-memory caches, by kind',
      labelNames: ['kind'],
      registers: r,
    }),
    cacheLastEventAge: new Gauge({
      name: 'rollguard_cache_last_event_age_seconds',
      help: 'Seconds since each cache last heard from the API server (list, event or bookmark); a watch silent for two bookmark intervals is restarted',
      labelNames: ['kind'],
      registers: r,
      collect() {
        for (const [kind, age] of cacheAges) {
          const seconds = age();
          if (seconds !== undefined) this.set({ kind }, seconds);
        }
      },
    }),
    /** Registers the age source of one cache, by kind (a closed set: ConfigMap, Secret, the workload kinds, Pod). */
    watchCacheAge(kind: 'ConfigMap' | 'Secret' | WorkloadKind | 'Pod', age: () => number | undefined): void {
      cacheAges.set(kind, age);
    },
    leader: new Gauge({
      name: 'rollguard_leader',
      help: '1 while this replica holds the leader lease',
      registers: r,
    }),
    ready: new Gauge({
      name: 'rollguard_ready',
      help: '1 while this replica is ready (GET /readyz answers 200): listening, certificate loaded with its CA in the caBundle, caches synced, not shutting down',
      registers: r,
      collect() {
        this.set(ready() ? 1 : 0);
      },
    }),
    /** Registers what rollguard_ready reports. */
    watchReady(source: () => boolean): void {
      ready = source;
    },
    rolloutsHeld: new Gauge({
      name: 'rollguard_rollouts_held',
      help: 'Health-gated rollouts held now, by reason (unhealthy_pod, health_check, handover_paused, handover_gave_up, scale_down); reported by the leader, 0 on the other replicas',
      labelNames: ['reason'],
      registers: r,
      collect() {
        const now = holds();
        for (const reason of HOLD_REASONS) this.set({ reason }, now.filter((h) => h.reason === reason).length);
      },
    }),
    rolloutHeldLongest: new Gauge({
      name: 'rollguard_rollout_held_longest_seconds',
      help: 'How long the longest-held rollout of each reason has been held (unhealthy_pod, health_check: since the block was first seen; handover_paused, handover_gave_up: since the handover started); 0 when none is',
      labelNames: ['reason'],
      registers: r,
      collect() {
        const at = Date.now();
        const now = holds();
        for (const reason of HOLD_REASONS) {
          if (reason === 'scale_down') continue; // a held scale-down waits on the handover, which has its own reason
          const since = now.filter((h) => h.reason === reason && h.sinceMs !== undefined).map((h) => h.sinceMs!);
          this.set({ reason }, since.length > 0 ? Math.max(0, (at - Math.min(...since)) / 1000) : 0);
        }
      },
    }),
    /** Registers the source of the held rollouts (the rollout controller's, read at each scrape). */
    watchHolds(source: () => readonly Hold[]): void {
      holds = source;
    },
    dataCheckFailures,
    admissionReferenceWaits,
    certificateExpiry: new Gauge({
      name: 'rollguard_certificate_expiry_timestamp_seconds',
      help: 'notAfter of the certificate in use, by certificate (serving, ca)',
      labelNames: ['certificate'],
      registers: r,
    }),
    certificateRotations: new Counter({
      name: 'rollguard_certificate_rotations_total',
      help: 'Certificates renewed by this replica, by certificate (serving, ca)',
      labelNames: ['certificate'],
      registers: r,
    }),
    rolloutSteps: new Counter({
      name: 'rollguard_rollout_steps_total',
      help: 'Partition steps of health-gated rollouts',
      registers: r,
    }),
    rolloutBlockedSeconds: new Counter({
      name: 'rollguard_rollout_blocked_seconds_total',
      help: 'Time health-gated rollouts spent blocked on an unhealthy pod',
      registers: r,
    }),
    rolloutLastStep: new Gauge({
      name: 'rollguard_rollout_last_step_timestamp_seconds',
      help: 'When the last partition step was written',
      registers: r,
    }),
    handovers: new Counter({
      name: 'rollguard_handovers_total',
      help: 'Primary handovers ended, by result (succeeded, paused, proceeded, abandoned, cancelled, gave_up)',
      labelNames: ['result'],
      registers: r,
    }),
    evictionReviews: new Counter({
      name: 'rollguard_eviction_reviews_total',
      help: 'Evictions the eviction guard answered, by result (allowed, deferred, allowed_unguarded, error, invalid)',
      labelNames: ['result'],
      registers: r,
    }),
    handoverDuration: new Histogram({
      name: 'rollguard_handover_duration_seconds',
      help: 'Time from the start of a primary handover to the label moving, for those that succeeded',
      buckets: HANDOVER_BUCKETS,
      registers: r,
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
