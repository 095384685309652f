import fs from 'node:fs';
import os from 'node:os';
import { pino, type Logger } from 'pino';
import type { Config } from './config.js';
import { loadClusterAccess } from './kube/cluster-access.js';
import type { KubeAccess } from './kube/kube-client.js';
import { ownServiceAccount } from './kube/identity.js';
import { errorText } from './kube/api-status.js';
import { LeaderElector } from './kube/leader-election.js';
import { createLogger } from './logger.js';
import { Manager, type Runnable } from './manager.js';
import { createMetrics } from './metrics.js';
import { createAdmissionHandler } from './restarter/admission-handler.js';
import { handoverGraceCheck } from './handover/grace-check.js';
import { holdPartitionMutator } from './rollout/partition-hold-mutator.js';
import { holdScaleDownMutator } from './handover/scale-hold-mutator.js';
import { scaleGuard } from './handover/scale-handler.js';
import { EventRecorder } from './kube/events.js';
import { enabledWorkloadKinds } from './kube/workloads.js';
import { createRestarterController } from './restarter/controller.js';
import { compatDialects, dialectFor, type CompatMode } from './compat/stackable.js';
import { createPodRestarter } from './compat/pod-restarter.js';
import { createRolloutController, rolloutHolds } from './rollout/controller.js';
import { evictionGuard } from './handover/eviction-handler.js';
import { handoverGates } from './handover/gate.js';
import { PRIMARY_HANDOVER } from './handover/settings.js';
import { HEALTH_GATED_ROLLOUTS } from './rollout/decision.js';
import { AdminServer } from './server/admin-server.js';
import { readiness, type Readiness } from './server/readiness.js';
import { rollguardStatus, type RollguardStatus } from './status.js';
import { createWebhookServer } from './server/webhook-server.js';
import { createCertificateSource } from './tls/certificate-source.js';
import { VERSION } from './version.js';
import { TrimAfterBursts, trimHeap } from './heap.js';
import { formatTiming, timingOf } from './restarter/timing.js';

const SERVICE_ACCOUNT_NAMESPACE_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';
const FALLBACK_NAMESPACE = 'rollguard-system';
const STDOUT_FD = 1;
/** How long after the first ready the heap is trimmed (heap.ts): start-up's last allocations are garbage by then. */
const TRIM_AFTER_READY_MS = 5_000;
const TRIM_POLL_MS = 1_000;
const MIB = 1024 * 1024;

export interface RunningRollguard {
  webhookPort(): number;
  adminPort(): number;
  /** certificate loaded, caBundle holds its CA, caches synced, not shutting down */
  ready(): boolean;
  /** The leader's reconciles: how many have finished, and whether any waits or runs now (0 and false on a follower). */
  work(): { reconciled: number; busy: boolean };
  status(): RollguardStatus;
  /** The one shutdown path: readiness off, drain delay, then every part stopped in reverse order. */
  shutdown(): Promise<void>;
  /** Stops at once, without the drain delay (tests, dev mode). */
  stop(): Promise<void>;
}

/** rollguard's own namespace: the flag, else the pod's (downward API or service account), else rollguard-system. */
function ownNamespace(config: Config): string {
  if (config.namespace) return config.namespace;
  if (process.env.POD_NAMESPACE) return process.env.POD_NAMESPACE;
  try {
    return fs.readFileSync(SERVICE_ACCOUNT_NAMESPACE_FILE, 'utf8').trim();
  } catch {
    return FALLBACK_NAMESPACE;
  }
}

/** Starts every part of rollguard in dependency order; the caller owns signals. */
/** The first wait between attempts to learn rollguard's own identity while the API server does not answer; doubled up to the longest. */
const IDENTITY_FIRST_RETRY_MS = 2_000;
const IDENTITY_LONGEST_RETRY_MS = 5 * 60_000;

/** Asks the API server who rollguard is, again (backing off) until it answers; a person's credentials are no identity of rollguard's alone. */
function learnOwnServiceAccount(kubeConfig: KubeAccess, logger: Logger, learned: (user: string) => void): void {
  const attempt = (waitMs: number): void => {
    ownServiceAccount(kubeConfig).then(
      (user) => {
        if (user) learned(user);
        logger.info(
          { serviceAccount: user ?? null },
          user
            ? `running as ${user}: the webhook takes that user's writes as the loop's, and keeps rollguard's records through anyone else's`
            : "not running as a ServiceAccount: the webhook tells the loop's writes by rollguard.io/last-restart-at, and a user's replace may drop rollguard's records",
        );
      },
      (err: unknown) => {
        logger.warn({ err: errorText(err) }, `who am I (SelfSubjectReview) failed: ${errorText(err)}; until it answers, the loop's writes are told by rollguard.io/last-restart-at; trying again in ${waitMs / 1000} s`);
        setTimeout(() => attempt(Math.min(waitMs * 2, IDENTITY_LONGEST_RETRY_MS)), waitMs).unref();
      },
    );
  };
  attempt(IDENTITY_FIRST_RETRY_MS);
}

export async function startRollguard(config: Config, kubeConfig: KubeAccess, logger: Logger): Promise<RunningRollguard> {
  const namespace = ownNamespace(config);
  const identity = `${os.hostname()}_${process.pid}`;
  const metrics = createMetrics();
  let shuttingDown = false;
  // The admin server answers /readyz from the start, the webhook listens last: until it does, a
  // Service that trusted /readyz would send reviews to a closed port (refused, the review fails).
  let started = false;
  const namespaces = config.watchNamespaces.length > 0 ? config.watchNamespaces : undefined;
  const compat = config.compat as CompatMode;
  // Rollout joins the watched, admitted and written kinds only with --argo-rollouts
  const kinds = enabledWorkloadKinds({ argoRollouts: config.argoRollouts });
  // the rules every deadline of a workload is counted with, on the workload for `rollguard why`
  const timing = formatTiming(timingOf(config));

  // rollguard's own ServiceAccount: the webhook tells the loop's writes from a user's by it
  let ownUser: string | undefined;
  learnOwnServiceAccount(kubeConfig, logger, (user) => (ownUser = user));

  // one recorder: one aggregation of repeated Events, one retry queue, one reporting instance
  const events = new EventRecorder({ kubeConfig, component: 'rollguard', instance: identity, logger });

  const restarter = createRestarterController({
    kubeConfig,
    namespaces,
    debounceMs: config.debounce,
    maxRestartsPerSecond: config.maxRestartsPerSecond,
    minRestartIntervalMs: config.minRestartInterval,
    watchIdleTimeoutMs: config.watchIdleTimeout,
    workers: config.workers,
    maxWorkers: config.maxWorkers,
    resyncPeriodMs: config.resyncPeriod,
    logger,
    metrics,
    events,
    ownNamespace: namespace,
    compatDialects: compatDialects(compat),
    statefulSetOnly: [HEALTH_GATED_ROLLOUTS, PRIMARY_HANDOVER],
    timing,
    kinds,
  });

  const rollouts = createRolloutController({
    kubeConfig,
    namespaces,
    statefulSets: restarter.statefulSets,
    minStepIntervalMs: config.rolloutMinStepInterval,
    defaultMinReadySeconds: config.rolloutMinReady / 1000,
    allowedProbeHosts: config.allowedProbeHosts,
    logger,
    metrics,
    events,
    // a write that stops a primary's pod waits for the role to move
    gate: handoverGates({ kubeConfig, metrics, logger }),
  });

  const certificates = createCertificateSource({
    logger,
    metrics,
    ...(config.tlsCertFile ? { tlsCertFile: config.tlsCertFile, tlsKeyFile: config.tlsKeyFile } : {}),
    kubeConfig,
    namespace,
    secretName: config.tlsSecret,
    serviceName: config.serviceName,
    webhookConfigurationName: config.webhookConfiguration || undefined,
    evictionWebhookConfigurationName: config.evictionWebhookConfiguration || undefined,
    extraDnsNames: config.tlsExtraDnsNames,
    extraIpAddresses: config.tlsExtraIps,
    caValiditySeconds: config.caValidity / 1000,
    servingValiditySeconds: config.certValidity / 1000,
    renewBeforeSeconds: config.certRenewBefore / 1000,
    keyBits: config.keyBits,
    events,
  });

  const currentReadiness = (): Readiness =>
    readiness({ listening: started, shuttingDown, certificateReady: certificates.ready(), cachesSynced: restarter.cachesSynced() });
  const ready = (): boolean => currentReadiness().ready;
  metrics.watchReady(ready);
  metrics.watchHolds(() => rolloutHolds(rollouts.status().rollouts));

  const webhook = createWebhookServer({
    host: config.webhookHost,
    port: config.webhookPort,
    certificates,
    routes: [
      {
        path: '/mutate',
        ...createAdmissionHandler({
          cachesSynced: restarter.cachesSynced,
          lookup: restarter.lookup,
          cacheProgress: restarter.cacheProgress,
          referenceWaitMs: config.referenceWait,
          inScope: restarter.covers,
          timing,
          ownUser: () => ownUser,
          mutators: [holdScaleDownMutator, holdPartitionMutator],
          checks: [handoverGraceCheck],
          dialectOf: (labels) => dialectFor(labels, compat),
          kinds,
          metrics,
          logger: logger.child({ component: 'admission' }),
        }),
      },
      {
        path: '/validate-eviction',
        handle: evictionGuard({
          kubeConfig,
          statefulSets: restarter.statefulSets.store,
          maxDeferMs: config.evictionDeferMax,
          metrics,
          events,
          logger,
        }),
      },
      { path: '/mutate-scale', handle: scaleGuard({ kubeConfig, statefulSets: restarter.statefulSets.store, logger }) },
    ],
    readiness: currentReadiness,
    logger: logger.child({ server: 'webhook' }),
  });

  // --compat stackable: pods are evicted at their restarter.stackable.tech/expires-at.* times
  const podRestarter =
    compat === 'stackable'
      ? createPodRestarter({ kubeConfig, namespaces, events, logger, metrics, watchIdleTimeoutMs: config.watchIdleTimeout })
      : undefined;

  // the controllers run only while this replica leads; each term starts them in order, stops them in reverse
  const leaderRunnables: Runnable[] = [restarter.workers, rollouts, ...(podRestarter ? [podRestarter] : [])];
  let term: Manager | undefined;
  const elector = config.leaderElection
    ? new LeaderElector({
        kubeConfig,
        namespace,
        leaseName: config.leaseName,
        identity,
        leaseDurationMs: config.leaseDuration,
        renewDeadlineMs: config.renewDeadline,
        retryPeriodMs: config.retryPeriod,
        logger,
        onStartedLeading: async (signal) => {
          metrics.leader.set(1);
          const current = new Manager(leaderRunnables, logger);
          term = current;
          signal.addEventListener('abort', () => void current.stop(), { once: true });
          await current.start();
        },
        onStoppedLeading: async () => {
          await term?.stop();
          metrics.leader.set(0);
        },
      })
    : undefined;

  const status = (): RollguardStatus =>
    rollguardStatus({
      version: VERSION,
      identity,
      shuttingDown: () => shuttingDown,
      readiness: currentReadiness,
      admissionInFlight: () => webhook.inFlight(),
      controllers: () => [restarter.workers.status(), rollouts.controllerStatus(), ...(podRestarter ? [podRestarter.controller.status()] : [])],
      leader: () => elector?.status(),
      caches: () => restarter.status().cache,
      certificate: () => certificates.status(),
      rollouts: () => rollouts.status().rollouts,
      memory: () => ({ ...restarter.status().memory, ...(podRestarter ? podRestarter.memory() : {}), 'events.aggregation': events.aggregatedCount(), 'events.pending': events.pendingCount() }),
    });

  const admin = new AdminServer({
    host: config.adminHost,
    port: config.adminPort,
    logger,
    registry: metrics.registry,
    status,
    live: () => true,
    ready: currentReadiness,
  });

  // started in this order, stopped in reverse: the webhook stops first, the admin server last
  const manager = new Manager(
    [admin, restarter.caches, ...(elector ? [elector] : leaderRunnables), certificates, webhook],
    logger,
  );
  // a part that fails to start stops the parts started before it, so nothing is left running
  await manager.start();
  started = true;
  if (!elector) metrics.leader.set(1);

  let shutdownPromise: Promise<void> | undefined;
  return {
    webhookPort: () => webhook.address().port,
    adminPort: () => admin.address().port,
    ready,
    work: () => {
      const { queued, inFlight } = restarter.workers.status();
      return { reconciled: restarter.workers.reconciledTotal(), busy: queued + inFlight > 0 };
    },
    status,
    shutdown: () => {
      shutdownPromise ??= (async () => {
        shuttingDown = true;
        webhook.drain();
        logger.info({ delayMs: config.shutdownDelay }, 'shutdown: not ready any more; serving on while endpoints move');
        await new Promise((r) => setTimeout(r, config.shutdownDelay));
        logger.info({ inFlight: webhook.inFlight() }, 'shutdown: stopping every part');
        await manager.stop();
        logger.info('shutdown: done');
      })();
      return shutdownPromise;
    },
    stop: () => {
      shuttingDown = true;
      return manager.stop();
    },
  };
}

/**
 * Gives back what start-up grew (heap.ts): once `running` is first ready (caches synced), and
 * TRIM_AFTER_READY_MS later; then after each burst of the leader's reconciles (its first pass
 * over every set, a storm), once they have stopped (TrimAfterBursts).
 */
function trimAfterStartAndBursts(running: RunningRollguard, logger: Logger): void {
  const trim = (why: string): void => {
    const { beforeBytes, afterBytes, pauseMs } = trimHeap();
    logger.info({ rssBeforeMiB: Math.round(beforeBytes / MIB), rssAfterMiB: Math.round(afterBytes / MIB), pauseMs: Math.round(pauseMs) }, why);
  };
  const bursts = new TrimAfterBursts();
  let readyAt: number | undefined;
  let startTrimmed = false;
  const poll = setInterval(() => {
    const now = Date.now();
    if (readyAt === undefined) {
      if (running.ready()) readyAt = now;
      return;
    }
    if (!startTrimmed) {
      if (now - readyAt < TRIM_AFTER_READY_MS) return;
      startTrimmed = true;
      trim('start-up done: gave back the heap start-up grew');
      return;
    }
    const { reconciled, busy } = running.work();
    if (bursts.due(now, reconciled, busy)) trim(`reconciles done (${reconciled} so far): gave back the heap they grew`);
  }, TRIM_POLL_MS);
  poll.unref();
}

/** `rollguard serve`: runs until SIGTERM/SIGINT; a second signal exits at once. */
export async function serve(config: Config): Promise<number> {
  // Synchronous: every way out ends in process.exit (cli.ts), which does not wait for an asynchronous
  // write still in flight, so the last lines of a shutdown came out of order or not at all.
  const logger = createLogger(config.logLevel, pino.destination({ dest: STDOUT_FD, sync: true }));
  logger.info({ version: VERSION, pid: process.pid }, 'rollguard starting');
  const kubeConfig = await loadClusterAccess(config.kubeconfig);
  const running = await startRollguard(config, kubeConfig, logger);
  logger.info({ webhookPort: running.webhookPort(), adminPort: running.adminPort() }, 'rollguard started');
  trimAfterStartAndBursts(running, logger);

  return new Promise<number>((resolve) => {
    let signalled = false;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (signalled) {
        logger.warn({ signal }, 'second signal: exiting at once');
        process.exit(1);
      }
      signalled = true;
      logger.info({ signal, timeoutMs: config.shutdownTimeout }, 'shutdown: signal received');
      const timer = setTimeout(() => {
        logger.error({ timeoutMs: config.shutdownTimeout }, 'shutdown: timed out; exiting with work unfinished');
        process.exit(1);
      }, config.shutdownTimeout);
      timer.unref();
      running.shutdown().then(
        () => resolve(0),
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          resolve(1);
        },
      );
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}
