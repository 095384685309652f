import type { Server as HttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import Fastify, { LogController, type FastifyError } from 'fastify';
import type { Logger } from 'pino';
import type { Runnable } from '../manager.js';
import { ADMISSION_REVIEW_SCHEMA, envelopeIssues, type ReviewHandler } from '../admission/review.js';
import type { CertificateSource } from '../tls/certificate-source.js';
import type { ServingKeyPair } from '../tls/certificates.js';
import type { Readiness } from './readiness.js';

const MIB = 1024 * 1024;
/**
 * An UPDATE review carries object and oldObject, each up to the API server's 3 MiB request limit,
 * plus the request envelope: 7 MiB takes any review the API server can send, and nothing much larger.
 */
export const DEFAULT_BODY_LIMIT_BYTES = 7 * MIB;
/**
 * The API server's webhook client is a Go transport that drops idle connections after 90 s. If we closed
 * first, a review sent on a connection we are closing would fail with EOF, so we keep idle connections longer.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 120_000;
/** timeoutSeconds of a webhook is at most 30: after that nobody waits for the answer, so the request is dropped. */
export const REQUEST_TIMEOUT_MS = 30_000;
/** The API server completes a handshake in milliseconds; a peer that has not in 10 s only holds a socket. */
export const TLS_HANDSHAKE_TIMEOUT_MS = 10_000;
/**
 * A Go client dials spare connections it may never send a request on, and no keep-alive timer runs on
 * those. A socket silent this long is dropped; it is longer than KEEP_ALIVE_TIMEOUT_MS, so on a used
 * connection the keep-alive timer (and before it the client's own 90 s) always closes first.
 */
export const IDLE_SOCKET_TIMEOUT_MS = KEEP_ALIVE_TIMEOUT_MS + 10_000;
/**
 * Behind a Service the API server's keep-alive connection pins all its reviews to one replica; asking it
 * to reconnect every so many requests spreads reviews over replicas and picks up a swapped certificate,
 * for the price of one handshake (about a millisecond) per thousand reviews.
 */
export const DEFAULT_MAX_REQUESTS_PER_CONNECTION = 1000;

const HTTP_BAD_REQUEST = 400;
const HTTP_INTERNAL_ERROR = 500;
const HTTP_SERVICE_UNAVAILABLE = 503;

/** One POST route of the server: the path, and what answers its reviews. */
export interface WebhookRoute {
  path: string;
  handle: ReviewHandler;
  /** Told of every request of this route answered without `handle` (a body the server refused) or whose `handle` threw. */
  rejected?(): void;
}

export interface WebhookServerOptions {
  host: string;
  /** 0 picks a free port */
  port: number;
  certificates: Pick<CertificateSource, 'current' | 'onChange'>;
  /** The admission routes, each a POST of an AdmissionReview; main.ts says which path does what. */
  routes: readonly WebhookRoute[];
  readiness: () => Readiness;
  logger: Logger;
  bodyLimitBytes?: number;
  /** 0: never ask a client to reconnect */
  maxRequestsPerConnection?: number;
}

export interface WebhookServer extends Runnable {
  address(): { port: number };
  /** requests being answered now, on every route */
  inFlight(): number;
  /** From now on every response carries Connection: close and /readyz fails; for shutdown. */
  drain(): void;
}

interface SchemaIssue {
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
}

/** One line per schema violation, naming the field as a dotted path: `body.request.uid: is required`. */
export function schemaReason(issues: readonly SchemaIssue[], dataVar: string): string {
  return issues
    .map((issue) => {
      const missing = issue.params.missingProperty;
      const field = `${dataVar}${issue.instancePath.replaceAll('/', '.')}`;
      if (typeof missing === 'string') return `${field}.${missing}: is required`;
      const allowed = issue.params.allowedValue;
      if (allowed !== undefined) return `${field}: must be ${JSON.stringify(allowed)}`;
      return `${field}: ${issue.message ?? 'is invalid'}`;
    })
    .join('; ');
}

/** What the client gets for an error before or in a route: a status and a reason it can act on. */
export function errorReply(err: FastifyError, bodyLimitBytes: number): { status: number; reason: string } {
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return { status: 415, reason: `unsupported content type; send application/json (${err.message})` };
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { status: 413, reason: `body larger than the limit of ${bodyLimitBytes} bytes` };
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return { status: HTTP_BAD_REQUEST, reason: `body is not valid JSON: ${err.message}` };
  }
  if (err.validation) return { status: HTTP_BAD_REQUEST, reason: err.message };
  const status = err.statusCode ?? HTTP_INTERNAL_ERROR;
  if (status >= HTTP_INTERNAL_ERROR) return { status, reason: 'internal error answering the request; see the rollguard log' };
  return { status, reason: err.message };
}

interface ServerState {
  draining: boolean;
  inFlight: number;
  /** every TLS connection, and those of them answering a request now */
  sockets: Set<Socket>;
  busy: Set<Socket>;
}

function buildApp(opts: WebhookServerOptions, state: ServerState) {
  const bodyLimit = opts.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES;
  const routes = new Map(opts.routes.map((route) => [route.path, route]));
  const app = Fastify<HttpsServer>({
    // no key or certificate yet: start() sets the secure context, and every swap replaces it
    https: { minVersion: 'TLSv1.2', ALPNProtocols: ['http/1.1'], handshakeTimeout: TLS_HANDSHAKE_TIMEOUT_MS },
    // HTTP/2 stays off: its rapid-reset flood (CVE-2023-44487) needs no credentials
    http2: false,
    loggerInstance: opts.logger,
    // one line per review would drown the log; rejections and errors are logged below
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    connectionTimeout: IDLE_SOCKET_TIMEOUT_MS,
    requestTimeout: REQUEST_TIMEOUT_MS,
    maxRequestsPerSocket: opts.maxRequestsPerConnection ?? DEFAULT_MAX_REQUESTS_PER_CONNECTION,
    // a request already on a kept-alive connection when we stop is answered, not turned away with 503
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    schemaErrorFormatter: (errors, dataVar) => new Error(schemaReason(errors, dataVar)),
  });
  // The one schema is checked by hand (envelopeIssues), as Ajv would with no coercion (a uid of 42
  // is not a string) and nothing removed: Fastify then never loads Ajv (about 3 MB of RSS).
  app.setValidatorCompiler(({ schema }) => {
    if (schema !== ADMISSION_REVIEW_SCHEMA) throw new Error('webhook server: a route with a schema other than ADMISSION_REVIEW_SCHEMA');
    const validate = (body: unknown): boolean => {
      validate.errors = envelopeIssues(body);
      return validate.errors.length === 0;
    };
    validate.errors = [] as ReturnType<typeof envelopeIssues>;
    return validate;
  });

  // reviews are JSON; without this, a text/plain body would reach the schema as a string and get 400 instead of 415
  app.removeContentTypeParser('text/plain');
  app.server.on('secureConnection', (socket: Socket) => {
    state.sockets.add(socket);
    socket.once('close', () => {
      state.sockets.delete(socket);
      state.busy.delete(socket);
    });
  });
  app.addHook('onRequest', (request, reply, done) => {
    state.inFlight++;
    const socket = request.raw.socket;
    state.busy.add(socket);
    reply.raw.once('close', () => {
      state.inFlight--;
      state.busy.delete(socket);
    });
    done();
  });
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (state.draining) reply.header('connection', 'close');
    done(null, payload);
  });
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const { status, reason } = errorReply(err, bodyLimit);
    if (status >= HTTP_INTERNAL_ERROR) request.log.error({ err, url: request.url }, 'request failed');
    else request.log.info({ status, reason, url: request.url }, 'request rejected');
    const route = request.routeOptions.url === undefined ? undefined : routes.get(request.routeOptions.url);
    route?.rejected?.();
    void reply.code(status).send({ reason });
  });
  const paths = opts.routes.map((route) => `POST ${route.path}`).join(', ');
  const known = opts.routes.length === 1 ? `the webhook path is ${paths}` : `the webhook paths are ${paths}`;
  app.setNotFoundHandler((request, reply) => {
    void reply.code(404).send({ reason: `no route ${request.method} ${request.url}; ${known}` });
  });

  for (const route of opts.routes) {
    app.post(route.path, { schema: { body: ADMISSION_REVIEW_SCHEMA } }, async (request, reply) => {
      const result = await route.handle(request.body);
      return reply.code(result.status).send(result.body);
    });
  }
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const { ready, reasons } = state.draining ? { ready: false, reasons: ['shutting down'] } : opts.readiness();
    if (!ready) return reply.code(HTTP_SERVICE_UNAVAILABLE).send({ reason: `not ready: ${reasons.join('; ')}` });
    return { status: 'ready' };
  });
  return app;
}

/** The HTTPS admission server: HTTP/1.1 only, TLS ≥ 1.2, certificate swapped in place when the source changes. */
export function createWebhookServer(opts: WebhookServerOptions): WebhookServer {
  const state: ServerState = { draining: false, inFlight: 0, sockets: new Set(), busy: new Set() };
  const app = buildApp(opts, state);
  const log = opts.logger.child({ component: 'webhook-server' });
  let closed: Promise<void> = Promise.resolve();

  const swap = (pair: ServingKeyPair): void => {
    try {
      // new handshakes get the new pair; established connections keep theirs and finish
      app.server.setSecureContext({ cert: pair.certPem, key: pair.keyPem });
      log.info('serving certificate swapped');
    } catch (err) {
      log.error({ err }, 'the new certificate could not be loaded; still serving the previous one');
    }
  };

  app.server.on('tlsClientError', (err, socket) => {
    log.debug({ err: err.message, remote: socket.remoteAddress }, 'TLS handshake failed');
  });

  return {
    name: 'webhook-server',
    async start(signal: AbortSignal): Promise<void> {
      const pair = opts.certificates.current();
      if (!pair) throw new Error('webhook server: no certificate to serve; start the certificate source first');
      app.server.setSecureContext({ cert: pair.certPem, key: pair.keyPem });
      const unsubscribe = opts.certificates.onChange(swap);
      try {
        await app.listen({ host: opts.host, port: opts.port });
      } catch (err) {
        unsubscribe();
        throw new Error(`webhook server: cannot listen on ${opts.host}:${opts.port}: ${err instanceof Error ? err.message : String(err)}`, {
          cause: err,
        });
      }
      log.info({ host: opts.host, port: app.server.address() }, 'webhook server listening');
      closed = new Promise((resolve, reject) => {
        const stop = (): void => {
          state.draining = true;
          unsubscribe();
          // stops accepting, closes idle connections, lets in-flight requests finish
          app.close().then(resolve, reject);
          // Node counts a connection that never carried a request as neither idle nor active, so close
          // leaves it open until the client drops it (90 s for the API server): drop it here
          for (const socket of state.sockets) if (!state.busy.has(socket)) socket.destroy();
        };
        // a stop that came while listen() was under way has already fired its event
        if (signal.aborted) stop();
        else signal.addEventListener('abort', stop, { once: true });
      });
    },
    stopped(): Promise<void> {
      return closed;
    },
    address(): { port: number } {
      const address = app.server.address();
      if (address === null || typeof address === 'string') throw new Error('webhook server: not listening on a TCP port');
      return { port: address.port };
    },
    inFlight(): number {
      return state.inFlight;
    },
    drain(): void {
      state.draining = true;
    },
  };
}
