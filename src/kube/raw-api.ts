import http from 'node:http';
import https from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';

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
}

/**
 * Plain GETs against the API server with the kubeconfig's TLS, proxy and credentials, but an
 * Accept header of our choosing: client-node's Watch and ListWatch cannot send one, and the
 * metadata-only (PartialObjectMetadata) representation is asked for with it.
 */
export class RawApi {
  constructor(private readonly kubeConfig: KubeConfig) {}

  /** Resolves with the response once its headers arrived; rejects with ApiStatusError on a non-2xx status. */
  async open({ path, accept, signal }: RawGet): Promise<http.IncomingMessage> {
    const cluster = this.kubeConfig.getCurrentCluster();
    if (!cluster) throw new Error(`GET ${path}: the kubeconfig has no current cluster`);
    const url = new URL(cluster.server.replace(/\/+$/, '') + path);
    // Asked for on every request: exec plugins and projected service account tokens rotate.
    const options: https.RequestOptions = {};
    await this.kubeConfig.applyToHTTPSOptions(options);
    const given = options.headers;
    const headers: http.OutgoingHttpHeaders = { ...(isHeaderRecord(given) ? given : {}), Accept: accept };
    const transport = url.protocol === 'http:' ? http : https;
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
  async getJson({ path, accept, signal }: RawGet): Promise<unknown> {
    const res = await this.open({ path, accept, signal });
    const body = await readBody(res, Infinity);
    try {
      return JSON.parse(body);
    } catch (err) {
      throw new Error(`GET ${path}: the response is not JSON (${body.length} bytes)`, { cause: err });
    }
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
