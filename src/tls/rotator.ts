import type { Logger } from 'pino';
import type { EventRecorder } from '../kube/events.js';
import type { Runnable } from '../manager.js';
import type { Metrics } from '../metrics.js';
import { isSignedBy } from './certificates.js';
import { decideRotation, nextBundle, type RenewalPolicy, type RotationAction } from './renewal.js';
import { annotationsAfter, isCompromiseUnderWay, rotationRequest } from './rotation-request.js';
import { SingleFlight } from './single-flight.js';
import type { CertificateBundle, SecretContents, SecretStore } from './secret-store.js';

/**
 * Longest wait between two looks at the Secret: a timer cannot span a serving certificate's lifetime
 * (setTimeout caps at about 24 days), and an hourly look also notices a jump of the wall clock.
 */
const MAX_RECHECK_INTERVAL_MS = 3600_000;
const INITIAL_RETRY_MS = 500;
/** Reason of the Event on the TLS Secret that records a rotation. */
export const ROTATION_EVENT_REASON = 'CertificatesRotated';
/** A failing rotation is retried at least this often, well inside any sensible renew-before window. */
const MAX_RETRY_MS = 60_000;

export interface RotatorOptions {
  store: SecretStore;
  policy: RenewalPolicy;
  logger: Logger;
  metrics: Metrics;
  bundleHolds?: (caPem: string) => boolean;
  /** whether every replica serves this certificate (asked only while a compromised CA is replaced) */
  servedEverywhere?: (servingCertPem: string) => Promise<boolean>;
  /** rotations are recorded as Events on the Secret */
  events?: Pick<EventRecorder, 'record'>;
  now?: () => Date;
}

/**
 * Renews what `decideRotation` says, writing to the Secret at the resourceVersion it read; a lost race
 * is not an error (the winner's certificate reaches us by the Secret watch). Every replica runs one.
 */
export class CertificateRotator implements Runnable {
  readonly name = 'certificate-rotator';
  private readonly log: Logger;
  private readonly now: () => Date;
  private remembered: CertificateBundle | undefined;
  private readonly passes: SingleFlight;
  private loopStopped: Promise<void> = Promise.resolve();

  constructor(private readonly opts: RotatorOptions) {
    this.log = opts.logger.child({ component: 'certificate-rotator', secret: opts.store.describe() });
    this.now = opts.now ?? (() => new Date());
    this.passes = new SingleFlight({
      run: async () => void (await this.reconcile()),
      failed: (err, retryInMs) => this.log.error({ err, retryInMs }, 'certificate rotation failed'),
      initialRetryMs: INITIAL_RETRY_MS,
      maxRetryMs: MAX_RETRY_MS,
      maxDelayMs: MAX_RECHECK_INTERVAL_MS,
    });
  }

  /** One decision and its action, against a fresh read of the Secret. Resolves with the contents after it. */
  async reconcile(): Promise<SecretContents> {
    let stored = await this.opts.store.read();
    // a renewal can be followed by another step (e.g. create after an expired CA): a few passes, never a loop
    for (let step = 0; step < 3; step++) {
      if (stored.kind === 'valid') this.remembered = stored.bundle;
      const request = stored.kind === 'absent' ? {} : rotationRequest(stored.annotations);
      if (request.problem) this.log.warn({ problem: request.problem }, 'ignoring a rotation request');
      const decision = decideRotation({
        stored,
        remembered: this.remembered,
        bundleHolds: this.opts.bundleHolds,
        servedEverywhere: await this.servedEverywhere(stored),
        now: this.now(),
        policy: this.opts.policy,
      });
      if (decision.action === 'none') {
        this.schedule(decision.nextCheck.getTime() - this.now().getTime());
        return stored;
      }
      this.log.info({ action: decision.action, reason: decision.reason }, 'rotating certificates');
      const bundle = await nextBundle(decision.action, {
        stored,
        remembered: this.remembered,
        policy: this.opts.policy,
        now: this.now(),
      });
      const annotations =
        stored.kind === 'absent'
          ? undefined
          : annotationsAfter(stored.annotations, {
              consumedRequest: decision.requested !== undefined,
              compromise:
                decision.requested === 'ca-compromised' ? 'start' : decision.action === 'drop-previous-ca' || decision.action === 'create' ? 'end' : 'keep',
            });
      const result = await this.opts.store.write(bundle, stored, annotations);
      if (result.outcome === 'conflict') {
        this.log.info({ action: decision.action }, 'another replica wrote the Secret first; adopting its certificates');
      } else {
        if (decision.action === 'rotate-ca') this.opts.metrics.certificateRotations.inc({ certificate: 'ca' });
        if (decision.action === 'renew-serving') this.opts.metrics.certificateRotations.inc({ certificate: 'serving' });
        await this.record(decision.action, decision.reason, result.contents);
      }
      stored = result.contents;
    }
    // still not settled after a few steps: look again shortly rather than spin
    this.schedule(INITIAL_RETRY_MS);
    return stored;
  }

  /** Asked only while a compromised CA is replaced and its successor signs the serving certificate. */
  private async servedEverywhere(stored: SecretContents): Promise<boolean | undefined> {
    if (stored.kind !== 'valid' || !isCompromiseUnderWay(stored.annotations) || stored.bundle.previousCaPem === undefined) return undefined;
    if (!this.opts.servedEverywhere || !isSignedBy(stored.bundle.serving.certPem, stored.bundle.ca.certPem)) return false;
    try {
      return await this.opts.servedEverywhere(stored.bundle.serving.certPem);
    } catch (err) {
      this.log.warn({ err }, 'could not tell which certificate every replica serves; keeping the previous CA');
      return false;
    }
  }

  private async record(action: RotationAction, reason: string, written: SecretContents): Promise<void> {
    if (!this.opts.events || written.kind === 'absent' || !written.uid) return;
    const what: Record<RotationAction, string> = {
      create: 'Issued a new CA and serving certificate',
      restore: 'Wrote back the certificates this replica serves',
      'rotate-ca': 'Issued a new CA, in the caBundle beside the previous one',
      'renew-serving': 'Issued a new serving certificate',
      'drop-previous-ca': 'Dropped the previous CA from the caBundle',
    };
    await this.opts.events.record(
      { apiVersion: 'v1', kind: 'Secret', namespace: this.opts.store.namespace, name: this.opts.store.name, uid: written.uid, resourceVersion: written.resourceVersion },
      { type: 'Normal', reason: ROTATION_EVENT_REASON, message: `${what[action]}: ${reason}`, action: 'RotateCertificates' },
    );
  }

  async start(signal: AbortSignal): Promise<void> {
    this.passes.start(signal);
    this.loopStopped = new Promise((resolve) => {
      signal.addEventListener('abort', () => void this.passes.idle().finally(resolve), { once: true });
    });
    this.trigger();
  }

  stopped(): Promise<void> {
    return this.loopStopped;
  }

  /** Asks for a pass soon: the Secret or the caBundle changed. Passes never overlap. */
  trigger(): void {
    this.passes.trigger();
  }

  private schedule(delayMs: number): void {
    this.passes.schedule(delayMs);
  }
}
