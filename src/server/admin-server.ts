import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Runnable } from '../manager.js';

export interface AdminServerOptions {
  host: string;
  port: number;
  logger: Logger;
  registry: Registry;
  /** JSON for GET /status; read-only */
  status: () => unknown;
  /** process is up and its loops are not wedged */
  live: () => boolean;
  /** may receive admission traffic */
  ready: () => { ready: boolean; reasons: string[] };
}

/**
 * Plain HTTP for Prometheus and people (/metrics, /status) beside the probes: scraping
 * needs no TLS set-up and keeps working while the webhook certificate is being rotated.
 * Nothing here changes state: a drain starts only from a signal.
 */
export class AdminServer implements Runnable {
  readonly name = 'admin-server';
  private readonly app: FastifyInstance;
  private closed: Promise<void> = Promise.resolve();
  private port = 0;

  constructor(private readonly opts: AdminServerOptions) {
    this.app = Fastify({
      loggerInstance: opts.logger.child({ server: 'admin' }) as FastifyBaseLogger,
      // probes and scrapes every few seconds would drown the log
      logController: new LogController({ disableRequestLogging: true }),
    });
    this.app.get('/metrics', async (_req, reply) => {
      reply.header('content-type', opts.registry.contentType);
      return opts.registry.metrics();
    });
    this.app.get('/status', async () => opts.status());
    this.app.get('/healthz', async (_req, reply) => (opts.live() ? { ok: true } : reply.code(500).send({ ok: false })));
    this.app.get('/readyz', async (_req, reply) => {
      const r = opts.ready();
      return reply.code(r.ready ? 200 : 503).send(r);
    });
  }

  address(): { port: number } {
    return { port: this.port };
  }

  async start(signal: AbortSignal): Promise<void> {
    await this.app.listen({ host: this.opts.host, port: this.opts.port });
    const addr = this.app.server.address();
    this.port = typeof addr === 'object' && addr ? addr.port : this.opts.port;
    this.closed = new Promise((resolve) => {
      const stop = (): void => void this.app.close().then(() => resolve());
      // a stop that came while listen() was under way has already fired its event
      if (signal.aborted) stop();
      else signal.addEventListener('abort', stop, { once: true });
    });
  }

  stopped(): Promise<void> {
    return this.closed;
  }
}
