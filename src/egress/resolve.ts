import { checkAddress, parseTarget, serviceToLookUp, type Refusal, type TargetPod, type TargetScope, type TargetService } from './target.js';

/** The I/O a target check needs: the Service through the API server, an allowed host through DNS. */
export interface TargetLookups {
  /** undefined: the Service does not exist */
  readService(namespace: string, name: string): Promise<TargetService | undefined>;
  resolveHost(host: string): Promise<string[]>;
}

export type ResolvedTarget = { ok: true; url: URL; address: string; via: string } | Refusal;

/**
 * The checked address for `raw`, a URL from a workload's settings; a refusal says why there
 * is none. The caller connects to `address` and to nothing else: no second DNS answer can
 * move it (no rebinding), and it follows no redirect.
 */
export async function resolveTarget(raw: string, scope: TargetScope, pods: readonly TargetPod[], io: TargetLookups): Promise<ResolvedTarget> {
  const parsed = parseTarget(raw, scope);
  if (!parsed.ok) return parsed;
  const { host, url } = parsed;
  const serviceName = serviceToLookUp(host, pods);
  try {
    const service = serviceName === undefined ? undefined : await io.readService(scope.namespace, serviceName);
    const resolved = host.kind === 'allowed' ? await io.resolveHost(host.host) : undefined;
    const checked = checkAddress(host, { pods, service, resolved });
    return checked.ok ? { ...checked, url } : checked;
  } catch (err) {
    return { ok: false, reason: `looking up ${url.hostname}: ${err instanceof Error ? err.message : String(err)}` };
  }
}
