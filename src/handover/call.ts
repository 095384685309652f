import { X509Certificate } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import type { V1Pod } from '@kubernetes/client-node';
import { resolveTarget, type TargetLookups } from '../egress/resolve.js';
import { targetPod } from '../egress/target.js';
import type { HandoverCall } from './decision.js';
import { renderBody, type HandoverSettings } from './settings.js';
import { certificateProblem } from './tls-failure.js';

/** What the credentials Secret gave: a ready Authorization header and a CA for https. Never logged. */
export interface HandoverCredentials {
  authorization?: string;
  ca?: string;
}

/** The answer excerpt kept for Events: enough to tell 412 "no good candidates" from a proxy page. */
const ANSWER_EXCERPT_CHARS = 160;
const ANSWER_READ_BYTES = 4096;
const SERVICE_UNAVAILABLE = 503;

/** From a Secret's data: `token` (bearer) or `username` + `password` (basic); `ca.crt` (PEM certificates) for https. */
export function credentialsFrom(data: Record<string, string> | undefined): HandoverCredentials | string {
  const text = (key: string): string | undefined => (data?.[key] === undefined ? undefined : Buffer.from(data[key], 'base64').toString('utf8'));
  const token = text('token');
  const username = text('username');
  const password = text('password');
  const ca = text('ca.crt');
  let authorization: string | undefined;
  if (token !== undefined) authorization = `Bearer ${token.trim()}`;
  else if (username !== undefined && password !== undefined) authorization = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
  else if (ca === undefined) return 'it holds neither token nor username and password (nor ca.crt)';
  if (ca !== undefined) {
    const problem = caProblem(ca);
    if (problem) return problem;
  }
  return { ...(authorization ? { authorization } : {}), ...(ca ? { ca } : {}) };
}

/** Node drops what in `ca` is not a certificate without a word, and would then trust nothing: say so before any call. */
function caProblem(pem: string): string | undefined {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) return 'its ca.crt holds no PEM certificate';
  for (const block of blocks) {
    try {
      new X509Certificate(block);
    } catch {
      return 'its ca.crt holds a certificate that does not parse';
    }
  }
  return undefined;
}

function pinnedLookup(address: string): LookupFunction {
  const family = address.includes(':') ? 6 : 4;
  return (_host, options, callback) => {
    if (options.all) callback(null, [{ address, family }]);
    else callback(null, address, family);
  };
}

/**
 * Performs an http handover action on a pod of the set, connected to by its status IP as
 * src/egress checks it (never another host, no redirect followed). `failed` when the answer
 * says the handover did not start: no connection, or a 4xx/5xx other than 503, which Patroni
 * gives while a switchover may still be in progress. The labels decide success either way.
 */
export async function callHttpAction(
  call: HandoverCall,
  opts: {
    namespace: string;
    setName: string;
    /** spec.serviceName of the set */
    serviceName?: string;
    settings: HandoverSettings;
    pods: readonly V1Pod[];
    lookups: TargetLookups;
    credentials?: HandoverCredentials;
    timeoutMs: number;
    signal: AbortSignal;
  },
): Promise<{ failed: boolean; detail: string }> {
  const { action } = call;
  if (action.kind !== 'http') return { failed: true, detail: 'not an http action' };
  const pods = opts.pods.map(targetPod);
  // a name no pod has would be looked up as a Service: the target must be a pod of the set
  if (!pods.some((p) => p.name === call.target)) return { failed: true, detail: `refused: ${call.target} is not a pod of the set` };
  // the pod's DNS name under the set's headless Service, so an https certificate can name it; the address is still its status IP
  const host = opts.serviceName ? `${call.target}.${opts.serviceName}.${opts.namespace}.svc` : call.target;
  const url = `${action.scheme}://${host}:${action.port}${action.path}`;
  const target = await resolveTarget(url, { namespace: opts.namespace, allowedHosts: [] }, pods, opts.lookups);
  if (!target.ok) return { failed: true, detail: `refused: ${target.reason}` };
  const body =
    opts.settings.body === undefined
      ? undefined
      : renderBody(opts.settings.body, { primary: call.primary, candidate: call.candidate, namespace: opts.namespace, set: opts.setName });
  const headers: Record<string, string> = {};
  if (body !== undefined) {
    headers['content-type'] = body.trimStart().startsWith('{') ? 'application/json' : 'text/plain';
    headers['content-length'] = String(Buffer.byteLength(body));
  }
  if (opts.credentials?.authorization) headers.authorization = opts.credentials.authorization;
  const timeout = AbortSignal.timeout(opts.timeoutMs);
  const signal = AbortSignal.any([opts.signal, timeout]);
  const transport = action.scheme === 'https' ? https : http;
  const via = `${target.via} at ${target.address}`;
  return new Promise((resolve) => {
    const request = transport.request(
      target.url,
      {
        method: action.method,
        headers,
        signal,
        lookup: pinnedLookup(target.address),
        ...(action.scheme === 'https' && opts.credentials?.ca ? { ca: opts.credentials.ca } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          if (size < ANSWER_READ_BYTES) chunks.push(chunk);
          size += chunk.length;
        });
        res.on('error', () => undefined);
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          const text = Buffer.concat(chunks).toString('utf8').replace(/\s+/g, ' ').trim().slice(0, ANSWER_EXCERPT_CHARS);
          const failed = status >= 400 && status !== SERVICE_UNAVAILABLE;
          resolve({ failed, detail: `HTTP ${status}${text ? ` ${JSON.stringify(text)}` : ''} from ${via}` });
        });
      },
    );
    request.on('error', (err) => {
      if (timeout.aborted) resolve({ failed: false, detail: `no answer within ${opts.timeoutMs} ms from ${via}` });
      else if (opts.signal.aborted) resolve({ failed: false, detail: 'not awaited: rollguard is stopping' });
      else {
        const problem = certificateProblem(err, { pod: call.target, host, secret: opts.settings.credentials, hasCa: opts.credentials?.ca !== undefined });
        if (problem) resolve({ failed: true, detail: `nothing: ${problem}, so no request was sent (${via})` });
        else resolve({ failed: true, detail: `${action.method} failed: ${err.message} (${via})` });
      }
    });
    request.end(body);
  });
}
