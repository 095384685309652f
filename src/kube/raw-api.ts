import http from 'node:http';
import https from 'node:https';
import { USER_AGENT, type KubeAccess } from './kube-client.js';

/** Longest error body kept for a message; a Status is far smaller, an HTML proxy page is not. */
const ERROR_BODY_LIMIT = 4096;

/** A non-2xx answer of the API server: what was asked, and the Status it sent back. */
export class ApiStatusError extends Error {
  constructor(
    readonly method: string,
    readonly path: string,
    readonly statusCode: number,
    readonly reason: string,
    detail: string,
  ) {
    super(`${method} ${path}: HTTP ${statusCode}${reason ? ` ${reason}` : ''}${detail ? `: ${detail}` : ''}`);
    this.name = 'ApiStatusError';
  }
}

/** True for "410 Gone": the resourceVersion (or continue token) is older than the API server keeps. */
export function isResourceExpired(err: unknown): boolean {
  return err instanceof ApiStatusError && err.statusCode === 410;
}

export interface RawGet {
  /** Path and query below the cluster's server URL, e.g. `/api/v1/configmaps?limit=500`. */
  path: string;
  accept: string;
  signal?: AbortSignal;
  /**
   * The whole request, answer and body, must be done within this: a short GET. Such a request
   * may ride a kept-alive connection (one that went half-open costs it this long, then fails).
   */
  timeoutMs?: number;
}

/** A kubeconfig that can lend a keep-alive agent to requests with a deadline (PooledKubeConfig). */
interface KeptAliveAgents {
  keptAliveAgent(opts: https.RequestOptions): https.Agent | undefined;
}

function lendsAgents(kc: KubeAccess): kc is KubeAccess & KeptAliveAgents {
  return typeof (kc as Partial<KeptAliveAgents>).keptAliveAgent === 'function';
}

/**
 * Plain GETs against the API server with the kubeconfig's TLS, proxy and credentials, but an
 * Accept header of our choosing: client-node's Watch and ListWatch cannot send one, and the
 * metadata-only (PartialObjectMetadata) representation is asked for with it.
 */
export class RawApi {
  constructor(private readonly kubeConfig: KubeAccess) {}

  /** Resolves with the response once its headers arrived; rejects with ApiStatusError on a non-2xx status. */
  async open({ path, accept, signal, timeoutMs }: RawGet): Promise<http.IncomingMessage> {
    const cluster = this.kubeConfig.getCurrentCluster();
    if (!cluster) throw new Error(`GET ${path}: the kubeconfig has no current cluster`);
    const url = new URL(cluster.server.replace(/\/+$/, '') + path);
    // Asked for on every request: exec plugins and projected service account tokens rotate.
    const options: https.RequestOptions = {};
    await this.kubeConfig.applyToHTTPSOptions(options);
    const given = options.headers;
    const headers: http.OutgoingHttpHeaders = { ...(isHeaderRecord(given) ? given : {}), Accept: accept, 'User-Agent': USER_AGENT };
    const transport = url.protocol === 'http:' ? http : https;
    if (timeoutMs !== undefined && lendsAgents(this.kubeConfig)) {
      const agent = this.kubeConfig.keptAliveAgent(options);
      if (agent) options.agent = agent;
    }
    return new Promise((resolve, reject) => {
      const request = transport.request(url, { ...options, method: 'GET', headers, signal }, (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) {
          resolve(res);
          return;
        }
        readBody(res, ERROR_BODY_LIMIT).then(
          (body) => reject(statusError(path, status, body)),
          () => reject(statusError(path, status, '')),
        );
      });
      request.on('error', (err) => reject(err instanceof Error && err.name === 'AbortError' ? err : new Error(`GET ${path}: ${err.message}`, { cause: err })));
      request.end();
    });
  }

  /** GETs and parses a JSON body. */
  async getJson({ path, accept, signal, timeoutMs }: RawGet): Promise<unknown> {
    if (timeoutMs === undefined) return parseJson(path, await readBody(await this.open({ path, accept, signal }), Infinity));
    const deadline = AbortSignal.timeout(timeoutMs);
    try {
      const res = await this.open({ path, accept, signal: signal ? AbortSignal.any([signal, deadline]) : deadline, timeoutMs });
      return parseJson(path, await readBody(res, Infinity));
    } catch (err) {
      if (deadline.aborted && !signal?.aborted) throw new Error(`GET ${path}: no answer within ${timeoutMs} ms`, { cause: err });
      throw err;
    }
  }
}

function parseJson(path: string, body: string): unknown {
  try {
    return JSON.parse(body);
  } catch (err) {
    throw new Error(`GET ${path}: the response is not JSON (${body.length} bytes)`, { cause: err });
  }
}

function isHeaderRecord(headers: https.RequestOptions['headers']): headers is http.OutgoingHttpHeaders {
  return headers !== undefined && !Array.isArray(headers);
}

async function readBody(res: http.IncomingMessage, limit: number): Promise<string> {
  res.setEncoding('utf8');
  let body = '';
  for await (const chunk of res as AsyncIterable<string>) {
    if (body.length < limit) body += chunk;
  }
  return body.length > limit ? body.slice(0, limit) : body;
}

function statusError(path: string, status: number, body: string): ApiStatusError {
  let reason = '';
  let message = body.trim();
  try {
    const parsed = JSON.parse(body) as { reason?: unknown; message?: unknown };
    if (typeof parsed.reason === 'string') reason = parsed.reason;
    if (typeof parsed.message === 'string') message = parsed.message;
  } catch {
    // not a Status: keep the raw text
  }
  return new ApiStatusError('GET', path, status, reason, message);
}

/** True for "404 Not Found". */
export function isNotFound(err: unknown): boolean {
  return err instanceof ApiStatusError && err.statusCode === 404;
}
