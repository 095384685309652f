import { AdmissionregistrationV1Api } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics.js';
import { createCertificateSource, type CertificateSource } from '../../src/tls/certificate-source.js';
import { secretContents } from '../../src/tls/secret-store.js';
import { createNamespace, printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';

const KEY_BITS = 2048;

describe('certificate sources of several replicas sharing one Secret', () => {
  const { kc, core } = testCluster();
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const configName = `rollguard-race-${Math.random().toString(36).slice(2, 8)}`;
  let namespace: string;
  const stops: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    namespace = await createNamespace(core, 'tls-race');
    // never called (no object matches), only here to have its caBundle injected by two replicas at once
    await admission.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: configName },
        webhooks: ['a', 'b'].map((w) => ({
          name: `${w}.${configName}.rollguard.io`,
          clientConfig: { url: 'https://127.0.0.1:1/mutate' },
          failurePolicy: 'Ignore',
          objectSelector: { matchLabels: { 'rollguard.io/never': 'true' } },
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } },
          rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['statefulsets'] }],
          sideEffects: 'None',
          admissionReviewVersions: ['v1'],
        })),
      },
    });
  });
  afterAll(async () => {
    for (const stop of stops.splice(0).reverse()) await stop();
    await admission.deleteMutatingWebhookConfiguration({ name: configName }).catch(() => undefined);
    if (namespace) await core.deleteNamespace({ name: namespace });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  /** A replica's certificate source; started by the test, stopped in afterAll. */
  function replica(
    secretName: string,
    servingValiditySeconds: number,
    webhookConfigurationName?: string,
  ): { source: CertificateSource; start(): Promise<void> } {
    const source = createCertificateSource({
      kubeConfig: kc,
      namespace,
      secretName,
      serviceName: 'rollguard',
      webhookConfigurationName,
      extraIpAddresses: ['127.0.0.1'],
      servingValiditySeconds,
      renewBeforeFraction: 0.5,
      caPropagationSeconds: 1,
      keyBits: KEY_BITS,
      caKeyBits: KEY_BITS,
      logger: pino({ level: process.env.ROLLGUARD_TEST_LOG ?? 'silent' }),
      metrics: createMetrics(),
    });
    const controller = new AbortController();
    stops.push(async () => {
      controller.abort();
      await source.stopped();
    });
    return { source, start: () => source.start(controller.signal) };
  }

  it('two replicas started at once end with one Secret and the same certificate, and follow its renewals together', async () => {
    const secretName = 'rollguard-tls-race';
    const started = [replica(secretName, 8, configName), replica(secretName, 8, configName)];
    await Promise.all(started.map((r) => r.start()));
    const replicas = started.map((r) => r.source);

    const stored = secretContents(await core.readNamespacedSecret({ name: secretName, namespace }));
    if (stored.kind !== 'valid') throw new Error(`Secret ${stored.kind}`);
    for (const r of replicas) expect(r.current()?.certPem).toBe(stored.bundle.serving.certPem);
    const secrets = await core.listNamespacedSecret({ namespace, fieldSelector: `metadata.name=${secretName}` });
    expect(secrets.items).toHaveLength(1);
    await waitUntil('both replicas ready (the caBundle of both webhooks holds the CA)', () => replicas.every((r) => r.ready()), {
      timeoutMs: 15_000,
    });

    // serving lives 8 s, renewed at 4 s: both rotators find it due at the same moment, one write wins
    const first = stored.bundle.serving.certPem;
    await waitUntil(
      'both replicas to serve one renewed certificate',
      () => {
        const [a, b] = replicas.map((r) => r.current()?.certPem);
        return (a !== first && a === b) || `a ${a === first ? 'old' : 'new'}, b ${b === first ? 'old' : 'new'}, same ${a === b}`;
      },
      { timeoutMs: 15_000 },
    );
  });

  it('writes back the same certificates when the Secret is deleted', async () => {
    const secretName = 'rollguard-tls-deleted';
    const { source: r, start } = replica(secretName, 3600);
    await start();
    const served = r.current()!.certPem;
    await core.deleteNamespacedSecret({ name: secretName, namespace });
    const restored = await waitFor('the Secret to be back', async () => {
      const contents = secretContents(await core.readNamespacedSecret({ name: secretName, namespace }));
      return contents.kind === 'valid' ? contents : undefined;
    }, { timeoutMs: 15_000 });
    expect(restored.bundle.serving.certPem).toBe(served);
    expect(r.current()!.certPem).toBe(served);
  });

  it('replaces a Secret someone spoiled, keeping the served certificate meanwhile', async () => {
    const secretName = 'rollguard-tls-spoiled';
    const { source: r, start } = replica(secretName, 3600);
    await start();
    const served = r.current()!.certPem;
    await core.patchNamespacedSecret({
      name: secretName,
      namespace,
      body: [{ op: 'replace', path: '/data/tls.key', value: Buffer.from('garbage').toString('base64') }],
    });
    await waitUntil('the Secret to be valid again', async () => {
      const contents = secretContents(await core.readNamespacedSecret({ name: secretName, namespace }));
      return contents.kind === 'valid' || contents.kind;
    }, { timeoutMs: 15_000 });
    expect(r.current()!.certPem).toBe(served);
  });
});
