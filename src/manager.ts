import type { Logger } from 'pino';

/**
 * A long-running part of rollguard: servers, caches, workers, the cert rotator,
 * the leader elector. One shape for all, so shutdown is one code path.
 */
export interface Runnable {
  readonly name: string;
  /** Starts the part and resolves once it runs; it keeps working until `signal` aborts. */
  start(signal: AbortSignal): Promise<void>;
  /** Resolves once the part has stopped after its signal fired, in-flight work finished. */
  stopped(): Promise<void>;
}

/** Starts runnables in the order given and stops them in reverse. */
export class Manager {
  private readonly started: { runnable: Runnable; controller: AbortController }[] = [];
  private stopping: Promise<void> | undefined;

  constructor(
    private readonly runnables: Runnable[],
    private readonly log: Logger,
  ) {}

  /**
   * When a part fails to start, or stop() is called meanwhile, every part started so far (the
   * failing one too: it may have started pieces of itself) is stopped before this rejects.
   */
  async start(): Promise<void> {
    for (const runnable of this.runnables) {
      // stop() only stops what had started when it was called; nothing may start after it
      if (this.stopping) throw new Error(`stopped while starting; ${runnable.name} and the parts after it were not started`);
      const controller = new AbortController();
      this.log.info({ runnable: runnable.name }, 'starting');
      this.started.push({ runnable, controller });
      try {
        await runnable.start(controller.signal);
      } catch (err) {
        this.log.error({ runnable: runnable.name, err }, 'start failed; stopping what started');
        await this.stop();
        throw err;
      }
      this.log.info({ runnable: runnable.name }, 'started');
    }
  }

  /** Idempotent: a second call returns the same promise. */
  stop(): Promise<void> {
    this.stopping ??= this.stopAll();
    return this.stopping;
  }

  private async stopAll(): Promise<void> {
    for (const { runnable, controller } of [...this.started].reverse()) {
      this.log.info({ runnable: runnable.name }, 'stopping');
      controller.abort();
      try {
        await runnable.stopped();
        this.log.info({ runnable: runnable.name }, 'stopped');
      } catch (err) {
        this.log.error({ runnable: runnable.name, err }, 'stopped with an error');
      }
    }
  }
}
