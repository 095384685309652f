import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import { listNamespacedEndpointSlice } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';

/** A replica that does not finish the handshake within this counts as not serving the certificate yet. */
const HANDSHAKE_TIMEOUT_MS = 2_000;
const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
const WEBHOOK_PORT_NAME = 'webhook';

/**
 * How rollguard knows that every replica serves a certificate: it lists the EndpointSlices of
 * the webhook Service, the addresses the API server itself calls, and makes a TLS handshake with
 * each ready one, comparing the certificate presented with `certPem`. No endpoint at all is
 * "not known", never "all".
 */
export function servedByEveryEndpoint(opts: {
  kubeConfig: KubeAccess;
  namespace: string;
  serviceName: string;
  /** the name the API server verifies: <service>.<namespace>.svc */
  serverName: string;
}): (certPem: string) => Promise<boolean> {
    return async (certPem) => {
    const want = new X509Certificate(certPem).fingerprint256;
    const slices = await listNamespacedEndpointSlice(opts.kubeConfig, { namespace: opts.namespace, labelSelector: `${SERVICE_NAME_LABEL}=${opts.serviceName}` });
    const targets = slices.items.flatMap((slice) => {
      const port = (slice.ports ?? []).find((p) => p.name === WEBHOOK_PORT_NAME)?.port ?? slice.ports?.[0]?.port;
      if (port === undefined) return [];
      return (slice.endpoints ?? []).filter((e) => e.conditions?.ready !== false).flatMap((e) => e.addresses.map((address) => ({ address, port })));
    });
    if (targets.length === 0) return false;
    const served = await Promise.all(targets.map((t) => presentedFingerprint(t.address, t.port, opts.serverName)));
    return served.every((fingerprint) => fingerprint === want);
  };
}

function presentedFingerprint(host: string, port: number, servername: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    // only the certificate is read, nothing is sent: verification is not the point here
    const socket = tls.connect({ host, port, servername, rejectUnauthorized: false, timeout: HANDSHAKE_TIMEOUT_MS }, () => {
      const raw = socket.getPeerX509Certificate();
      socket.destroy();
      resolve(raw?.fingerprint256);
    });
    socket.on('timeout', () => {
      socket.destroy();
      resolve(undefined);
    });
    socket.on('error', () => resolve(undefined));
  });
}
