import type { V1Lease } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Runnable } from '../manager.js';
import { abortableDelay } from './abortable-delay.js';
import { errorText, statusCode } from './api-status.js';
import { coordinationV1, type CoordinationV1 } from './api-clients.js';
import { microTime, type KubeAccess } from './kube-client.js';

export interface LeaderElectionOptions {
  kubeConfig: KubeAccess;
  namespace: string;
  leaseName: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  logger: Logger;
  /** Called on becoming leader; `signal` aborts the moment leadership ends. */
  onStartedLeading(signal: AbortSignal): void | Promise<void>;
  /** Resolves once whatever onStartedLeading started has stopped (before the lease is released). */
  onStoppedLeading(): Promise<void>;
}

export interface LeaderStatus {
  leader: boolean;
  holder: string | undefined;
  identity: string;
}

/**
 * Lease-based election, the client-go way: a lease is free once its holder has not
 * renewed it for leaseDuration, measured on our own clock from when we last saw it
 * change (so clock skew between replicas does not matter). Writes carry the
 * resourceVersion they read, so two candidates can never both win.
 */
export class LeaderElector implements Runnable {
  readonly name = 'leader-election';
  private readonly api: CoordinationV1;
  private leading: AbortController | undefined;
  private observed: { record: string; at: number } | undefined;
  private currentHolder: string | undefined;
  private loop: Promise<void> = Promise.resolve();

  constructor(private readonly opts: LeaderElectionOptions) {
    this.api = coordinationV1(opts.kubeConfig);
  }

  status(): LeaderStatus {
    return { leader: this.leading !== undefined, holder: this.currentHolder, identity: this.opts.identity };
  }

  async start(signal: AbortSignal): Promise<void> {
    this.loop = this.run(signal);
  }

  stopped(): Promise<void> {
    return this.loop;
  }

  private async run(signal: AbortSignal): Promise<void> {
    const { retryPeriodMs, renewDeadlineMs, logger } = this.opts;
    let lastRenew = 0;
    while (!signal.aborted) {
      let ok = false;
      // A leader must know by its renew deadline whether it still leads: a request that hangs
      // (API server unreachable, packets dropped) must not keep it leading after its lease ran out.
      const attemptMs = this.leading ? Math.max(retryPeriodMs, lastRenew + renewDeadlineMs - Date.now()) : renewDeadlineMs;
      try {
        ok = await this.tryAcquireOrRenew(requestOptions(attemptMs));
      } catch (err) {
        logger.warn({ err: errorText(err), lease: this.opts.leaseName }, 'leader election: lease request failed');
      }
      if (ok) {
        lastRenew = Date.now();
        if (!this.leading) await this.becomeLeader();
      } else if (this.leading && Date.now() - lastRenew > renewDeadlineMs) {
        logger.warn({ lease: this.opts.leaseName }, 'leader election: could not renew within the renew deadline; stepping down');
        await this.stepDown();
      } else if (this.leading && !ok && this.currentHolder !== this.opts.identity) {
        logger.warn({ lease: this.opts.leaseName, holder: this.currentHolder }, 'leader election: lease taken by another replica; stepping down');
        await this.stepDown();
      }
      await abortableDelay(retryPeriodMs, signal);
    }
    if (this.leading) {
      await this.stepDown();
      await this.release();
    }
  }

  private async becomeLeader(): Promise<void> {
    this.leading = new AbortController();
    this.opts.logger.info({ lease: this.opts.leaseName, identity: this.opts.identity }, 'leader election: became leader');
    await this.opts.onStartedLeading(this.leading.signal);
  }

  private async stepDown(): Promise<void> {
    const leading = this.leading;
    if (!leading) return;
    leading.abort();
    await this.opts.onStoppedLeading();
    this.leading = undefined;
    this.opts.logger.info({ lease: this.opts.leaseName }, 'leader election: stopped leading');
  }

  /** Returns true when we hold the lease after this call. */
  private async tryAcquireOrRenew(options: { signal: AbortSignal }): Promise<boolean> {
    const { namespace, leaseName: name, identity, leaseDurationMs } = this.opts;
    // a MicroTime on the wire; V1Lease types it Date, JSON carries the string
    const now = microTime(Date.now()) as unknown as Date;
    const durationSeconds = Math.max(1, Math.ceil(leaseDurationMs / 1000));
    let lease: V1Lease;
    try {
      lease = await this.api.readNamespacedLease({ name, namespace, ...options });
    } catch (err) {
      if (statusCode(err) !== 404) throw err;
      try {
        await this.api.createNamespacedLease({
          namespace,
          body: {
            metadata: { name, namespace },
            spec: { holderIdentity: identity, leaseDurationSeconds: durationSeconds, acquireTime: now, renewTime: now, leaseTransitions: 0 },
          },
          ...options,
        });
        this.currentHolder = identity;
        return true;
      } catch (createErr) {
        if (statusCode(createErr) === 409) return false;
        throw createErr;
      }
    }
    const spec = lease.spec ?? {};
    // renewTime may arrive as a string: only its identity matters here
    const record = `${spec.holderIdentity ?? ''}|${String(spec.renewTime ?? '')}|${lease.metadata?.resourceVersion}`;
    if (this.observed?.record !== record) this.observed = { record, at: Date.now() };
    this.currentHolder = spec.holderIdentity || undefined;
    const heldByOther = !!spec.holderIdentity && spec.holderIdentity !== identity;
    const expired = this.observed.at + (spec.leaseDurationSeconds ?? durationSeconds) * 1000 < Date.now();
    if (heldByOther && !expired) return false;

    const taking = spec.holderIdentity !== identity;
    const body: V1Lease = {
      ...lease,
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: durationSeconds,
        renewTime: now,
        acquireTime: taking ? now : spec.acquireTime,
        // a lease released on shutdown has no holder, and taking it is a change of leader all the same (as in client-go)
        leaseTransitions: (spec.leaseTransitions ?? 0) + (taking ? 1 : 0),
      },
    };
    try {
      await this.api.replaceNamespacedLease({ name, namespace, body, ...options });
    } catch (err) {
      if (statusCode(err) === 409) return false;
      throw err;
    }
    this.currentHolder = identity;
    return true;
  }

  /** Hands the lease back so another replica takes over at once instead of after leaseDuration. */
  private async release(): Promise<void> {
    const { namespace, leaseName: name, identity, renewDeadlineMs } = this.opts;
    // shutdown waits for this; the lease runs out by itself if the API server does not answer
    const options = requestOptions(renewDeadlineMs);
    try {
      const lease = await this.api.readNamespacedLease({ name, namespace, ...options });
      if (lease.spec?.holderIdentity !== identity) return;
      await this.api.replaceNamespacedLease({
        name,
        namespace,
        body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: microTime(Date.now()) as unknown as Date } },
        ...options,
      });
      this.currentHolder = undefined;
      this.opts.logger.info({ lease: name }, 'leader election: released the lease');
    } catch (err) {
      this.opts.logger.warn({ err: errorText(err), lease: name }, 'leader election: could not release the lease');
    }
  }
}

/** Options for lease requests that give up after `timeoutMs`, all of them together. */
function requestOptions(timeoutMs: number): { signal: AbortSignal } {
  return { signal: AbortSignal.timeout(timeoutMs) };
}

