import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { AdmissionregistrationV1Api } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics.js';
import { ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND } from '../../src/admission/review.js';
import type { ReviewHandler } from '../../src/admission/review.js';
import { createWebhookServer, type WebhookServer } from '../../src/server/webhook-server.js';
import { createCertificateSource, type CertificateSource } from '../../src/tls/certificate-source.js';
import {
  certificateFingerprint,
  createCertificateAuthority,
  createSignedCertificate,
  type KeyPairPem,
} from '../../src/tls/certificates.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor } from '../env/wait.js';

const KEY_BITS = 2048;
const VALIDITY_SECONDS = 3600;
const ENABLED = { 'rollguard.io/enabled': 'true' };

function servedFingerprint(port: number, caPem: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: caPem }, () => {
      resolve(socket.getPeerCertificate().fingerprint256);
      socket.end();
    });
    socket.on('error', reject);
  });
}

function writeAtomically(file: string, text: string): void {
  fs.writeFileSync(`${file}.tmp`, text, { mode: 0o600 });
  fs.renameSync(`${file}.tmp`, file);
}

// cert-manager (or anyone) owns the key pair and the caBundle; rollguard only serves the files and follows them
describe('bring-your-own certificate files, called by the real API server', () => {
  const { kc, core, apps } = testCluster();
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const suffix = Math.random().toString(36).slice(2, 8);
  const configName = `rollguard-byo-${suffix}`;
  let namespace: string;
  let dir: string;
  let ca: KeyPairPem;
  let pairs: KeyPairPem[];
  let source: CertificateSource;
  let server: WebhookServer;
  const sourceStop = new AbortController();
  const serverStop = new AbortController();
  let reviews = 0;

  const handler: ReviewHandler = (body) => {
    reviews++;
    const uid = (body as { request: { uid: string } }).request.uid;
    return { status: 200, body: { apiVersion: ADMISSION_API_VERSION, kind: ADMISSION_REVIEW_KIND, response: { uid, allowed: true } } };
  };

  beforeAll(async () => {
    namespace = await createNamespace(core, 'tls-files');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-byo-'));
    ca = await createCertificateAuthority({ commonName: 'byo-ca', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS });
    const leaf = { commonName: 'byo', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS, usage: 'server' as const, ipAddresses: ['127.0.0.1'] };
    pairs = await Promise.all([createSignedCertificate(ca, leaf), createSignedCertificate(ca, leaf)]);
    fs.writeFileSync(path.join(dir, 'tls.crt'), pairs[0]!.certPem);
    fs.writeFileSync(path.join(dir, 'tls.key'), pairs[0]!.keyPem, { mode: 0o600 });

    const logger = pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'silent' });
    const metrics = createMetrics();
    source = createCertificateSource({
      tlsCertFile: path.join(dir, 'tls.crt'),
      tlsKeyFile: path.join(dir, 'tls.key'),
      logger,
      metrics,
    });
    await source.start(sourceStop.signal);
    server = createWebhookServer({ host: '127.0.0.1', port: 0, certificates: source, routes: [{ path: '/mutate', handle: handler }], readiness: () => ({ ready: source.ready(), reasons: source.ready() ? [] : ['certificate not loaded'] }), logger });
    await server.start(serverStop.signal);
    await admission.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: configName },
        webhooks: [
          {
            name: `byo-${suffix}.rollguard.io`,
            clientConfig: { url: `https://127.0.0.1:${server.address().port}/mutate`, caBundle: Buffer.from(ca.certPem).toString('base64') },
            failurePolicy: 'Fail',
            objectSelector: { matchLabels: ENABLED },
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } },
            rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['statefulsets'] }],
            sideEffects: 'None',
            admissionReviewVersions: ['v1'],
            timeoutSeconds: 5,
          },
        ],
      },
    });
  });
  afterAll(async () => {
    serverStop.abort();
    await server?.stopped();
    sourceStop.abort();
    await source?.stopped();
    await admission.deleteMutatingWebhookConfiguration({ name: configName }).catch(() => undefined);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    if (namespace) await core.deleteNamespace({ name: namespace });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('serves the files, then the replaced files, to new handshakes and to the API server', async () => {
    const port = server.address().port;
    expect(await servedFingerprint(port, ca.certPem)).toBe(certificateFingerprint(pairs[0]!.certPem));
    expect(source.ready()).toBe(true);
    expect(source.status()).toMatchObject({ source: 'files' });
    // the configuration can take a moment to reach the API server's webhook informer
    await waitFor('a labelled StatefulSet to go through the webhook', async () => {
      await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('byo-before', { replicas: 0, labels: ENABLED }) });
      return true;
    }, { timeoutMs: 15_000 });
    const before = reviews;
    expect(before).toBeGreaterThan(0);

    writeAtomically(path.join(dir, 'tls.crt'), pairs[1]!.certPem);
    writeAtomically(path.join(dir, 'tls.key'), pairs[1]!.keyPem);
    const wanted = certificateFingerprint(pairs[1]!.certPem);
    await waitFor('the replaced certificate to be served', async () => ((await servedFingerprint(port, ca.certPem)) === wanted ? true : undefined), {
      timeoutMs: 15_000,
    });

    await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('byo-after', { replicas: 0, labels: ENABLED }) });
    expect(reviews).toBe(before + 1);
  });
});
