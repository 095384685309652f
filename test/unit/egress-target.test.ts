import { describe, expect, it } from 'vitest';
import { resolveTarget, type TargetLookups } from '../../src/egress/resolve.js';
import { checkAddress, forbiddenAddress, parseTarget, type TargetPod, type TargetService } from '../../src/egress/target.js';

const NS = 'shop';
const PODS: TargetPod[] = [
  { name: 'web-0', ips: ['10.1.0.5'] },
  { name: 'web-1', ips: ['127.0.0.1'] },
];
const SERVICES: Record<string, TargetService> = {
  web: { name: 'web', type: 'ClusterIP', clusterIPs: ['10.0.0.17'] },
  outside: { name: 'outside', type: 'ExternalName', clusterIPs: [] },
  headless: { name: 'headless', type: 'ClusterIP', clusterIPs: [] },
};

/** Lookups that record what was asked: a Service GET only in the set's namespace, DNS only for allowed hosts. */
function lookups(dns: Record<string, string[]> = {}): TargetLookups & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    readService(namespace, name) {
      asked.push(`service ${namespace}/${name}`);
      return Promise.resolve(namespace === NS ? SERVICES[name] : undefined);
    },
    resolveHost(host) {
      asked.push(`dns ${host}`);
      return Promise.resolve(dns[host] ?? []);
    },
  };
}

async function resolve(url: string, allowedHosts: string[] = [], dns: Record<string, string[]> = {}) {
  const io = lookups(dns);
  const result = await resolveTarget(url, { namespace: NS, allowedHosts }, PODS, io);
  return { result: result.ok ? { address: result.address, via: result.via } : { refused: result.reason }, asked: io.asked };
}

describe('resolveTarget: where a workload-named URL may lead', () => {
  it.each([
    // the set's own Services, by the ClusterIP the API server holds
    ['http://web.shop.svc:8080/healthz', { address: '10.0.0.17', via: 'Service web' }, ['service shop/web']],
    ['http://web.shop.svc.cluster.local/healthz', { address: '10.0.0.17', via: 'Service web' }, ['service shop/web']],
    ['https://web.shop/healthz', { address: '10.0.0.17', via: 'Service web' }, ['service shop/web']],
    ['http://web/healthz', { address: '10.0.0.17', via: 'Service web' }, ['service shop/web']],
    // pods of the set, by name, stable DNS name or recorded IP; no lookup at all
    ['http://web-0:9000/', { address: '10.1.0.5', via: 'pod web-0' }, []],
    ['http://web-0.web.shop.svc.cluster.local:9000/', { address: '10.1.0.5', via: 'pod web-0' }, []],
    ['http://10.1.0.5:9000/', { address: '10.1.0.5', via: 'pod web-0' }, []],
    // loopback only because it is web-1's recorded IP (as in tests)
    ['http://127.0.0.1:9000/', { address: '127.0.0.1', via: 'pod web-1' }, []],
  ])('allows %s', async (url, expected, asked) => {
    expect(await resolve(url)).toEqual({ result: expected, asked });
  });

  it.each([
    ['http://169.254.169.254/latest/meta-data/', '169.254.169.254 is a link-local or cloud metadata address'],
    ['http://[::ffff:169.254.169.254]/', '169.254.169.254 is a link-local or cloud metadata address'],
    ['http://admin.kube-system.svc:8080/', 'admin.kube-system.svc is in namespace kube-system, not shop: only the workload\'s own namespace may be called'],
    ['http://web-0.web.other.svc.cluster.local/', 'web-0.web.other.svc.cluster.local is in namespace other, not shop: only the workload\'s own namespace may be called'],
    ['http://example.com/', 'example.com is in namespace com, not shop: only the workload\'s own namespace may be called'],
    ['http://metadata.google.internal/', 'metadata.google.internal names no Service or pod of namespace shop'],
    ['http://outside.shop.svc/', 'Service outside is of type ExternalName: it leads outside the namespace'],
    ['http://headless.shop.svc/', 'Service headless has no ClusterIP (headless): name a pod of the workload instead'],
    ['http://missing/', 'no pod of the workload and no Service of its namespace is named missing'],
    ['http://web-7.web.shop.svc/', 'web-7 is not a pod of the workload'],
    ['http://10.9.9.9/', '10.9.9.9 is not the IP of a pod of the workload'],
    ['http://[::1]:8080/', '::1 is a loopback address'],
    ['ftp://web/', 'ftp: is not http: or https:'],
    ['not a url', '"not a url" is not a URL'],
  ])('refuses %s', async (url, reason) => {
    const { result, asked } = await resolve(url);
    expect(result).toEqual({ refused: reason });
    // nothing outside the namespace was ever looked up
    expect(asked.filter((a) => !a.startsWith(`service ${NS}/`))).toEqual([]);
  });

  it('goes to an allowed host only at the address it checked, and never to a metadata address', async () => {
    expect(await resolve('http://status.example.com/', ['status.example.com'], { 'status.example.com': ['192.0.2.10'] })).toEqual({
      result: { address: '192.0.2.10', via: 'allowed host status.example.com' },
      asked: ['dns status.example.com'],
    });
    // an allowed name that resolves to the metadata server (DNS rebinding) stays refused
    expect((await resolve('http://status.example.com/', ['status.example.com'], { 'status.example.com': ['169.254.169.254'] })).result).toEqual({
      refused: '169.254.169.254 is a link-local or cloud metadata address',
    });
    expect((await resolve('http://169.254.169.254/', ['169.254.169.254'], { '169.254.169.254': ['169.254.169.254'] })).result).toEqual({
      refused: '169.254.169.254 is a link-local or cloud metadata address',
    });
  });
});

describe('forbiddenAddress', () => {
  it.each([
    ['169.254.169.254', [], '169.254.169.254 is a link-local or cloud metadata address'],
    ['169.254.169.254', ['169.254.169.254'], '169.254.169.254 is a link-local or cloud metadata address'],
    ['fe80::1', [], 'fe80::1 is a link-local or cloud metadata address'],
    ['fd00:ec2::254', [], 'fd00:ec2::254 is a link-local or cloud metadata address'],
    ['::ffff:169.254.169.254', [], '169.254.169.254 is a link-local or cloud metadata address'],
    ['100.100.100.200', [], '100.100.100.200 is a link-local or cloud metadata address'],
    ['0.0.0.0', [], '0.0.0.0 is a link-local or cloud metadata address'],
    ['127.0.0.1', [], '127.0.0.1 is a loopback address'],
    ['127.0.0.1', ['127.0.0.1'], undefined],
    ['10.0.0.17', [], undefined],
  ])('%s (pod IPs %j)', (ip, podIPs, expected) => {
    expect(forbiddenAddress(ip, podIPs)).toBe(expected);
  });

  it('refuses a Service whose ClusterIP is loopback or link-local', () => {
    const parsed = parseTarget('http://web.shop.svc/', { namespace: NS, allowedHosts: [] });
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(checkAddress(parsed.host, { pods: [], service: { name: 'web', clusterIPs: ['169.254.0.1'] } })).toEqual({
      ok: false,
      reason: '169.254.0.1 is a link-local or cloud metadata address',
    });
  });
});
