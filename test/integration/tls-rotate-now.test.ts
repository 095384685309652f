import { X509Certificate } from 'node:crypto';
import os from 'node:os';
import tls from 'node:tls';
import { AdmissionregistrationV1Api, DiscoveryV1Api, PatchStrategy, setHeaderOptions, type V1Secret } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMPROMISED_CA_ANNOTATION, ROTATE_ANNOTATION } from '../../src/tls/rotation-request.js';
import { ROTATION_EVENT_REASON } from '../../src/tls/rotator.js';
import { createNamespace, printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { registerWebhook, type WebhookRegistration } from '../env/webhook-registration.js';
import { waitFor, waitUntil } from '../env/wait.js';

const SECRET = 'rollguard-webhook-tls';
const SERVICE = 'rollguard-webhook';
const ROTATION_TIMEOUT_MS = 30_000;

const { kc, core, kubeconfigPath } = testCluster();
const admission = kc.makeApiClient(AdmissionregistrationV1Api);
const discovery = kc.makeApiClient(DiscoveryV1Api);

const pemOf = (secret: V1Secret, key: string): string | undefined => {
  const b64 = secret.data?.[key];
  return b64 === undefined ? undefined : Buffer.from(b64, 'base64').toString('utf8');
};
const fingerprint = (pem: string): string => new X509Certificate(pem).fingerprint256;

/** An EndpointSlice may not hold a loopback address: the replicas listen on this host's first other IPv4 address too. */
function hostAddress(): string {
  const address = Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a?.family === 'IPv4' && !a.internal)?.address;
  if (!address) throw new Error('this test needs a non-loopback IPv4 address for the EndpointSlices');
  return address;
}

/** The certificate a replica presents in a TLS handshake, as the API server would see it. */
function presented(port: number): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: hostAddress(), port, servername: `${SERVICE}.svc`, rejectUnauthorized: false }, () => {
      const cert = socket.getPeerX509Certificate();
      socket.destroy();
      if (cert) resolve(cert);
      else reject(new Error(`no certificate from port ${port}`));
    });
    socket.on('error', reject);
  });
}

// Rotation now, asked for on the TLS Secret, end to end: two rollguard replicas behind the
// webhook Service's EndpointSlices (written by hand: no endpoint controller runs here), a real
// webhook configuration whose caBundle they keep, and what each replica presents in a handshake.
describe('rotation asked for by rollguard.io/rotate on the TLS Secret', () => {
  let own: string;
  let workloads: string;
  let webhook: WebhookRegistration | undefined;
  const replicas: RollguardProcess[] = [];

  beforeAll(async () => {
    own = await createNamespace(core, 'rotate');
    workloads = await createNamespace(core, 'rotate-workloads');
    await core.createNamespacedService({ namespace: own, body: { metadata: { name: SERVICE }, spec: { ports: [{ port: 443, targetPort: 9443 }] } } });
    for (const name of ['rotate-a', 'rotate-b']) {
      replicas.push(
        await startRollguardProcess({
          name,
          kubeconfigPath,
          args: [
            `--namespace=${own}`,
            `--watch-namespaces=${workloads}`,
            `--webhook-configuration=${own}`,
            `--eviction-webhook-configuration=${own}`,
            `--service-name=${SERVICE}`,
            '--webhook-host=0.0.0.0',
            `--tls-extra-ips=127.0.0.1,${hostAddress()}`,
          ],
        }),
      );
    }
    webhook = await registerWebhook(kc, { name: own, port: replicas[0]!.webhookPort, namespace: workloads, evictionGuard: true });
    for (const [i, r] of replicas.entries()) {
      await discovery.createNamespacedEndpointSlice({
        namespace: own,
        body: {
          metadata: { name: `${SERVICE}-${i}`, labels: { 'kubernetes.io/service-name': SERVICE } },
          addressType: 'IPv4',
          endpoints: [{ addresses: [hostAddress()], conditions: { ready: true } }],
          ports: [{ name: 'webhook', port: r.webhookPort, protocol: 'TCP' }],
        },
      });
    }
    for (const r of replicas) await r.waitReady();
  });

  afterAll(async () => {
    for (const r of replicas) await r.kill();
    await webhook?.delete();
    for (const name of [own, workloads]) if (name) await core.deleteNamespace({ name }).catch(() => undefined);
  });

  const readSecret = (): Promise<V1Secret> => core.readNamespacedSecret({ name: SECRET, namespace: own });
  const fingerprints = (caBundle: string | undefined): string[] => {
    const pem = Buffer.from(caBundle ?? '', 'base64').toString('utf8');
    return (pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? []).map(fingerprint);
  };
  /** The CAs of the admission webhook's caBundle; undefined while the eviction guard's holds other ones. */
  async function caBundle(): Promise<string[] | undefined> {
    const mutating = fingerprints((await admission.readMutatingWebhookConfiguration({ name: own })).webhooks?.[0]?.clientConfig.caBundle);
    const validating = fingerprints((await admission.readValidatingWebhookConfiguration({ name: own })).webhooks?.[0]?.clientConfig.caBundle);
    return mutating.join() === validating.join() ? mutating : undefined;
  }
  /** Evictions the first replica's guard answered: the API server reaches it only through a caBundle it trusts. */
  async function evictionReviews(): Promise<number> {
    const text = await (await fetch(`${replicas[0]!.adminUrl}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
    return [...text.matchAll(/^rollguard_eviction_reviews_total\{[^}]*\} (\S+)$/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
  }
  /**
   * Evicts pods of its own through the API server until rollguard's guard is asked about one (the
   * API server picks up a new caBundle through its own watch, a moment after it is written).
   */
  async function evictionReachesTheGuard(prefix: string): Promise<void> {
    let attempt = 0;
    await waitUntil(`an eviction (${prefix}-N) reaching the eviction guard`, async () => {
      const name = `${prefix}-${attempt++}`;
      await core.createNamespacedPod({ namespace: workloads, body: { metadata: { name }, spec: { containers: [{ name: 'c', image: 'busybox' }] } } });
      const before = await evictionReviews();
      await core.createNamespacedPodEviction({ name, namespace: workloads, body: { metadata: { name, namespace: workloads } } });
      return (await evictionReviews()) === before + 1 || `attempt ${attempt}: failed open`;
    }, { timeoutMs: ROTATION_TIMEOUT_MS, intervalMs: 1_000 });
  }
  async function ask(request: string): Promise<V1Secret> {
    const before = await readSecret();
    await core.patchNamespacedSecret(
      { name: SECRET, namespace: own, body: { metadata: { annotations: { [ROTATE_ANNOTATION]: request } } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    return before;
  }
  async function rotationEvents(): Promise<string[]> {
    const list = await core.listNamespacedEvent({ namespace: own, fieldSelector: `involvedObject.name=${SECRET}` });
    return list.items
      .filter((e) => e.reason === ROTATION_EVENT_REASON)
      .sort((a, b) => Number(a.metadata?.resourceVersion) - Number(b.metadata?.resourceVersion))
      .map((e) => e.message ?? '');
  }
  /** Every replica presents `certPem`. */
  async function everyReplicaServes(certPem: string): Promise<boolean | string> {
    const seen = await Promise.all(replicas.map((r) => presented(r.webhookPort)));
    return seen.every((c) => c.fingerprint256 === fingerprint(certPem)) || `replicas present ${seen.map((c) => c.subject.split('\n')[0]).join(', ')}`;
  }

  it('at start: the caBundle of the webhook and of the eviction guard hold the CA, and the API server reaches the guard', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(replicas);
    const ca = fingerprint(pemOf(await readSecret(), 'ca.crt')!);
    expect(await caBundle()).toEqual([ca]);
    await evictionReachesTheGuard('evicted-at-start');
  });

  it('serving: a new serving certificate from the same CA, on every replica, with an Event', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(replicas);
    const before = await ask('serving');
    const after = await waitFor('a new tls.crt and the request removed', async () => {
      const s = await readSecret();
      return pemOf(s, 'tls.crt') !== pemOf(before, 'tls.crt') && s.metadata?.annotations?.[ROTATE_ANNOTATION] === undefined ? s : undefined;
    }, { timeoutMs: ROTATION_TIMEOUT_MS });
    expect(pemOf(after, 'ca.crt')).toBe(pemOf(before, 'ca.crt'));
    await waitUntil('every replica serving the new certificate', () => everyReplicaServes(pemOf(after, 'tls.crt')!), { timeoutMs: ROTATION_TIMEOUT_MS });
    await waitUntil('the rotation Event', async () => (await rotationEvents()).some((m) => m === 'Issued a new serving certificate: asked for by rollguard.io/rotate: serving') || (await rotationEvents()).join(' | '));
  });

  it('ca-compromised: a new CA serving at once, and the old CA out of the caBundle once every replica serves from the new one', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(replicas);
    const before = await ask('ca-compromised');
    const oldCa = pemOf(before, 'ca.crt')!;
    const after = await waitFor('a new CA, the previous one dropped, no request or marker left', async () => {
      const s = await readSecret();
      const a = s.metadata?.annotations ?? {};
      const done =
        pemOf(s, 'ca.crt') !== oldCa && pemOf(s, 'ca-previous.crt') === undefined && a[ROTATE_ANNOTATION] === undefined && a[COMPROMISED_CA_ANNOTATION] === undefined;
      return done ? s : undefined;
    }, { timeoutMs: ROTATION_TIMEOUT_MS });
    const newCa = new X509Certificate(pemOf(after, 'ca.crt')!);
    expect(new X509Certificate(pemOf(after, 'tls.crt')!).checkIssued(newCa)).toBe(true);
    await waitUntil('both caBundles holding the new CA only', async () => {
      const bundle = await caBundle();
      return (bundle?.length === 1 && bundle[0] === newCa.fingerprint256) || (bundle ? `caBundle of ${bundle.length} certificates` : 'the two caBundles differ');
    }, { timeoutMs: ROTATION_TIMEOUT_MS });
    expect(await everyReplicaServes(pemOf(after, 'tls.crt')!)).toBe(true);
    // failurePolicy Ignore would let the evictions through unseen if the API server distrusted the new certificate
    await evictionReachesTheGuard('evicted-after-ca-compromised');
    const events = await rotationEvents();
    expect(events).toEqual(
      expect.arrayContaining([
        'Issued a new CA, in the caBundle beside the previous one: asked for by rollguard.io/rotate: ca-compromised',
        expect.stringMatching(/^Issued a new serving certificate: moving the serving certificate to the CA issued at /),
        'Dropped the previous CA from the caBundle: every replica serves the certificate from the new CA; the compromised CA leaves the caBundle',
      ]),
    );
  });

  it('ca: a planned rotation keeps the old CA in the caBundle beside the new one', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(replicas);
    const before = await ask('ca');
    const oldCa = pemOf(before, 'ca.crt')!;
    const after = await waitFor('a new CA with the old one kept as previous', async () => {
      const s = await readSecret();
      return pemOf(s, 'ca.crt') !== oldCa && s.metadata?.annotations?.[ROTATE_ANNOTATION] === undefined ? s : undefined;
    }, { timeoutMs: ROTATION_TIMEOUT_MS });
    expect(pemOf(after, 'ca-previous.crt')).toBe(oldCa);
    // the serving certificate stays on the old CA for the propagation period (two minutes by default)
    expect(new X509Certificate(pemOf(after, 'tls.crt')!).checkIssued(new X509Certificate(oldCa))).toBe(true);
    await waitUntil('both caBundles holding both CAs', async () => {
      const bundle = await caBundle();
      return (bundle !== undefined && bundle.includes(fingerprint(oldCa)) && bundle.includes(fingerprint(pemOf(after, 'ca.crt')!))) || (bundle ? `caBundle of ${bundle.length}` : 'the two caBundles differ');
    }, { timeoutMs: ROTATION_TIMEOUT_MS });
    expect(after.metadata?.annotations?.[COMPROMISED_CA_ANNOTATION]).toBeUndefined();
  });
});
