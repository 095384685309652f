import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { resolveTarget, type TargetLookups } from '../egress/resolve.js';
import { targetPod } from '../egress/target.js';

/** What the health URL answered: ok only for a 2xx status; detail for Events and logs. */
export interface HealthResult {
  ok: boolean;
  detail: string;
}

/**
 * A health endpoint slower than this counts as failing: the step waits for the next look
 * rather than holding a worker, and a hung endpoint is as bad as a failing one.
 */
export const HEALTH_CHECK_TIMEOUT_MS = 2_000;

/**
 * GETs `url` and reports whether it answered 2xx within `timeoutMs`; a redirect is an answer
 * too, and not a 2xx. Never throws: every failure (bad URL, refused, timed out, aborted) is a
 * result that blocks the step. node:http rather than fetch, which refuses whole port ranges
 * (6000, 6665-6669, 10080, ...) that an in-cluster endpoint may well use.
 */
export async function probeHealth(
  url: string,
  { timeoutMs = HEALTH_CHECK_TIMEOUT_MS, signal, address }: { timeoutMs?: number; signal?: AbortSignal; address?: string } = {},
): Promise<HealthResult> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { ok: false, detail: `${JSON.stringify(url)} is not a URL` };
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    return { ok: false, detail: `${parsed.protocol} is not http: or https:` };
  }
  const timeout = AbortSignal.timeout(timeoutMs);
  const transport = parsed.protocol === 'https:' ? https : http;
  return new Promise((resolve) => {
    // the name stays in the Host header and TLS server name; the connection goes to the checked address
    const lookup = address === undefined ? undefined : pinnedLookup(address);
    const request = transport.get(parsed, { signal: signal ? AbortSignal.any([signal, timeout]) : timeout, lookup }, (res) => {
      const status = res.statusCode ?? 0;
      // only the status matters; draining the body frees the connection
      res.resume();
      resolve({ ok: status >= 200 && status < 300, detail: `HTTP ${status}${res.statusMessage ? ` ${res.statusMessage}` : ''}` });
    });
    request.on('error', (err) => {
      if (timeout.aborted) resolve({ ok: false, detail: `no answer within ${timeoutMs} ms` });
      else if (signal?.aborted) resolve({ ok: false, detail: 'aborted: rollguard is stopping' });
      else resolve({ ok: false, detail: `GET failed: ${err.message}` });
    });
  });
}

function pinnedLookup(address: string): LookupFunction {
  const family = address.includes(':') ? 6 : 4;
  return (_host, options, callback) => {
    if (options.all) callback(null, [{ address, family }]);
    else callback(null, address, family);
  };
}

/**
 * The health check of a gated set: only a Service of its namespace or a pod of the set
 * (src/egress), connected to by the address checked; a refusal blocks the step like a
 * failing endpoint and its reason reaches the RolloutBlocked Event.
 */
export async function probeSetHealth(
  set: V1StatefulSet,
  url: string,
  pods: readonly V1Pod[],
  opts: { lookups: TargetLookups; allowedHosts: readonly string[]; timeoutMs?: number; signal?: AbortSignal },
): Promise<HealthResult> {
  const namespace = set.metadata?.namespace ?? '';
  const target = await resolveTarget(url, { namespace, allowedHosts: opts.allowedHosts }, pods.map(targetPod), opts.lookups);
  if (!target.ok) return { ok: false, detail: `refused: ${target.reason}` };
  const result = await probeHealth(url, { timeoutMs: opts.timeoutMs, signal: opts.signal, address: target.address });
  return { ok: result.ok, detail: `${result.detail} from ${target.via} at ${target.address}` };
}
