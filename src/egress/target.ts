import { BlockList, isIP } from 'node:net';
import type { V1Pod } from '@kubernetes/client-node';

/**
 * Where an outgoing call that a workload's own settings ask for (a health URL today, a
 * handover call later) may go: a Service of the workload's namespace, by its ClusterIP, or a
 * pod of the workload, by its recorded IP. Anything else would let whoever can annotate a
 * StatefulSet make rollguard reach from its network position (cloud metadata, other
 * namespaces' admin ports) and read the outcome back from an Event. Pure: the caller looks
 * the Service up through the API (never DNS) and connects to the address checked here.
 */

/** A pod of the workload: its name and the IPs in its status. */
export interface TargetPod {
  name: string;
  ips: readonly string[];
}

/** A pod of the set as a call target: its name and status IPs. */
export function targetPod(pod: V1Pod): TargetPod {
  const ips = [pod.status?.podIP, ...(pod.status?.podIPs ?? []).map((p) => p.ip)].filter((ip): ip is string => !!ip);
  return { name: pod.metadata?.name ?? '', ips: [...new Set(ips)] };
}

/** A Service as the API server holds it. */
export interface TargetService {
  name: string;
  type?: string;
  clusterIPs: readonly string[];
}

export interface TargetScope {
  /** the workload's namespace */
  namespace: string;
  /** hosts a cluster admin allows besides (--allowed-probe-hosts), resolved through DNS */
  allowedHosts: readonly string[];
}

/** What the host of a URL names. */
export type TargetHost =
  | { kind: 'service'; name: string }
  | { kind: 'pod'; name: string }
  /** a bare name: a pod of the workload when one has it, else a Service of the namespace */
  | { kind: 'pod-or-service'; name: string }
  | { kind: 'ip'; ip: string }
  | { kind: 'allowed'; host: string };

export type Refusal = { ok: false; reason: string };
export type ParsedTarget = { ok: true; url: URL; host: TargetHost } | Refusal;
export type CheckedAddress = { ok: true; address: string; via: string } | Refusal;

const CLUSTER_DOMAIN = 'cluster.local';
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** Addresses no call ever goes to: link-local (cloud metadata lives there) and the metadata servers outside it. */
const NEVER = new BlockList();
NEVER.addSubnet('169.254.0.0', 16, 'ipv4');
NEVER.addSubnet('fe80::', 10, 'ipv6');
NEVER.addAddress('fd00:ec2::254', 'ipv6'); // AWS instance metadata over IPv6
NEVER.addAddress('100.100.100.200', 'ipv4'); // Alibaba Cloud metadata
NEVER.addAddress('168.63.129.16', 'ipv4'); // Azure wire server
NEVER.addSubnet('0.0.0.0', 8, 'ipv4'); // "this host": reaches loopback
NEVER.addAddress('::', 'ipv6');
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

function family(ip: string): 'ipv4' | 'ipv6' {
  return isIP(ip) === 6 ? 'ipv6' : 'ipv4';
}

/** ::ffff:169.254.169.254 and ::ffff:a9fe:a9fe are 169.254.169.254. */
function canonicalIP(ip: string): string {
  const lower = ip.toLowerCase();
  const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
  if (dotted) return dotted[1]!;
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (!hex) return lower;
  const [hi, lo] = [parseInt(hex[1]!, 16), parseInt(hex[2]!, 16)];
  return [hi >> 8, hi & 0xff, lo >> 8, lo & 0xff].join('.');
}

/** Why `ip` may not be called; undefined when it may. Loopback only as the recorded IP of a pod of the workload. */
export function forbiddenAddress(ip: string, podIPs: readonly string[]): string | undefined {
  const addr = canonicalIP(ip);
  if (isIP(addr) === 0) return `${ip} is not an IP address`;
  if (NEVER.check(addr, family(addr))) return `${addr} is a link-local or cloud metadata address`;
  if (LOOPBACK.check(addr, family(addr)) && !podIPs.map(canonicalIP).includes(addr)) return `${addr} is a loopback address`;
  return undefined;
}

/** Reads the URL and says what its host names, or why it names nothing rollguard may call. */
export function parseTarget(raw: string, scope: TargetScope): ParsedTarget {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, reason: `${JSON.stringify(raw)} is not a URL` };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { ok: false, reason: `${url.protocol} is not http: or https:` };
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase().replace(/\.$/, '');
  if (scope.allowedHosts.map((h) => h.toLowerCase()).includes(host)) return { ok: true, url, host: { kind: 'allowed', host } };
  if (isIP(host) !== 0) return { ok: true, url, host: { kind: 'ip', ip: host } };

  const labels = host.split('.');
  if (!labels.every((l) => DNS_LABEL.test(l))) return { ok: false, reason: `${host} is not a DNS name` };
  const domain = CLUSTER_DOMAIN.split('.');
  const local = labels.slice(-domain.length).join('.') === CLUSTER_DOMAIN ? labels.slice(0, -domain.length) : labels;
  const inNamespace = (ns: string, host: TargetHost): ParsedTarget =>
    ns === scope.namespace
      ? { ok: true, url, host }
      : { ok: false, reason: `${url.hostname} is in namespace ${ns}, not ${scope.namespace}: only the workload's own namespace may be called` };
  // <name>
  if (local.length === 1) return { ok: true, url, host: { kind: 'pod-or-service', name: local[0]! } };
  // <service>.<namespace>[.svc]
  if (local.length === 2 || (local.length === 3 && local[2] === 'svc')) return inNamespace(local[1]!, { kind: 'service', name: local[0]! });
  // <pod>.<headless service>.<namespace>.svc
  if (local.length === 4 && local[3] === 'svc') return inNamespace(local[2]!, { kind: 'pod', name: local[0]! });
  return { ok: false, reason: `${url.hostname} names no Service or pod of namespace ${scope.namespace}` };
}

/**
 * The address to connect to for `host`. `service` is what the API server returned for a
 * service name (undefined: there is none), `resolved` what DNS returned for an allowed host.
 */
export function checkAddress(
  host: TargetHost,
  found: { pods: readonly TargetPod[]; service?: TargetService; resolved?: readonly string[] },
): CheckedAddress {
  const podIPs = found.pods.flatMap((p) => p.ips);
  const checked = (address: string, via: string): CheckedAddress => {
    const why = forbiddenAddress(address, podIPs);
    return why ? { ok: false, reason: why } : { ok: true, address: canonicalIP(address), via };
  };
  switch (host.kind) {
    case 'allowed': {
      const address = found.resolved?.[0];
      return address === undefined ? { ok: false, reason: `${host.host} did not resolve` } : checked(address, `allowed host ${host.host}`);
    }
    case 'ip': {
      const why = forbiddenAddress(host.ip, podIPs);
      if (why) return { ok: false, reason: why };
      const pod = found.pods.find((p) => p.ips.map(canonicalIP).includes(canonicalIP(host.ip)));
      if (!pod) return { ok: false, reason: `${host.ip} is not the IP of a pod of the workload` };
      return checked(host.ip, `pod ${pod.name}`);
    }
    case 'pod':
    case 'pod-or-service': {
      const pod = found.pods.find((p) => p.name === host.name);
      if (pod) {
        const ip = pod.ips[0];
        return ip === undefined ? { ok: false, reason: `pod ${pod.name} has no IP yet` } : checked(ip, `pod ${pod.name}`);
      }
      if (host.kind === 'pod') return { ok: false, reason: `${host.name} is not a pod of the workload` };
      return serviceAddress(host.name, found.service, checked);
    }
    case 'service':
      return serviceAddress(host.name, found.service, checked);
  }
}

function serviceAddress(name: string, service: TargetService | undefined, checked: (address: string, via: string) => CheckedAddress): CheckedAddress {
  if (!service) return { ok: false, reason: `no pod of the workload and no Service of its namespace is named ${name}` };
  if (service.type === 'ExternalName') return { ok: false, reason: `Service ${name} is of type ExternalName: it leads outside the namespace` };
  const ip = service.clusterIPs.find((a) => isIP(a) !== 0);
  if (ip === undefined) return { ok: false, reason: `Service ${name} has no ClusterIP (headless): name a pod of the workload instead` };
  return checked(ip, `Service ${name}`);
}

/** The Service a target host needs looked up, if any. */
export function serviceToLookUp(host: TargetHost, pods: readonly TargetPod[]): string | undefined {
  if (host.kind === 'service') return host.name;
  if (host.kind === 'pod-or-service' && !pods.some((p) => p.name === host.name)) return host.name;
  return undefined;
}
