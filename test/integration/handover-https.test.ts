import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeReplicatedApp } from '../../src/dev/fake-replicated-app.js';
import { HANDOVER_BODY_ANNOTATION, HANDOVER_CREDENTIALS_ANNOTATION, HANDOVER_RETRIES_ANNOTATION } from '../../src/handover/settings.js';
import { HANDOVER_REQUEST_ANNOTATION } from '../../src/handover/state.js';
import { createCertificateAuthority, type KeyPairPem } from '../../src/tls/certificates.js';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { handoverSet, HANDOVER_REASONS, rollguardEvents, setAtRest } from '../env/handover-sets.js';
import { freePort } from '../env/ports.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitUntil } from '../env/wait.js';

const ARGS = ['--rollout-min-step-interval=0s', '--rollout-min-ready=0s', '--debounce=0s', '--shutdown-delay=0s'];
const KEY_BITS = 2048;

// The handover call over https: the pod's server presents a certificate a test CA issued for
// <pod>.<serviceName>.<namespace>.svc, and rollguard trusts only the ca.crt of the credentials Secret.
describe('https handover calls (rollguard as a process, fake replicated application over TLS)', () => {
  const { kc, core, apps } = testCluster();
  let fixture: RollguardFixture;
  let ca: KeyPairPem;
  let otherCa: KeyPairPem;
  const running: FakeReplicatedApp[] = [];

  beforeAll(async () => {
    [ca, otherCa] = await Promise.all([
      createCertificateAuthority({ commonName: 'handover-test-ca', validitySeconds: 3600, keyBits: KEY_BITS }),
      createCertificateAuthority({ commonName: 'someone-elses-ca', validitySeconds: 3600, keyBits: KEY_BITS }),
    ]);
    fixture = await startRollguardFixture({ name: 'handover-https', webhook: 'registered', args: ARGS, kubelet: { podIps: 'distinct' } });
  });

  afterAll(async () => {
    for (const app of running) await app.stop();
    await fixture?.teardown();
  });

  /** The set, its ConfigMap and the https app, at rest with pod `primary` labelled primary and every pod's server listening. */
  async function httpsSet(name: string, primary: number, secret: string, authorization: string, annotations: Record<string, string> = {}): Promise<FakeReplicatedApp> {
    const port = await freePort();
    const app = await new FakeReplicatedApp(kc, fixture.ns, { setName: name, port, authorization, tls: { ca, serviceName: name } }).start();
    running.push(app);
    await core.createNamespacedConfigMap({ namespace: fixture.ns, body: { metadata: { name }, data: { v: '0' } } });
    const body = handoverSet(name, {
      port,
      scheme: 'https',
      annotations: { [HANDOVER_CREDENTIALS_ANNOTATION]: secret, [HANDOVER_BODY_ANNOTATION]: '{"candidate":"{candidate}"}', ...annotations },
    });
    await apps.createNamespacedStatefulSet({ namespace: fixture.ns, body });
    await setAtRest(apps, fixture.ns, name);
    await app.makePrimary(`${name}-${primary}`);
    const all = [0, 1, 2].map((i) => `${name}-${i}`).join(',');
    await waitUntil(`${name}-${primary} primary and every pod's server listening`, () => {
      const seen = `${app.primary()}; listening ${app.listening().join(',')}`;
      return seen === `${name}-${primary}; listening ${all}` || seen;
    });
    return app;
  }

  const logText = (): string => JSON.stringify(fixture.rollguard.logLines());

  it('hands over over https with a bearer token: the certificate is verified for the pod name, the app saw the token', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const token = `tok-${Math.random().toString(36).slice(2)}`;
    await core.createNamespacedSecret({ namespace: fixture.ns, body: { metadata: { name: 'bearer-api' }, stringData: { token, 'ca.crt': ca.certPem } } });
    const app = await httpsSet('bearer', 1, 'bearer-api', `Bearer ${token}`);
    await core.patchNamespacedPod({ name: 'bearer-1', namespace: fixture.ns, body: [{ op: 'add', path: '/metadata/annotations', value: { [HANDOVER_REQUEST_ANNOTATION]: 'requested' } }] });
    await waitUntil('the role to move off bearer-1', () => (app.primary() !== undefined && app.primary() !== 'bearer-1') || `${app.primary()}`, { timeoutMs: 30_000 });
    expect(app.calls.map((c) => [c.pod, c.authorization, c.answered])).toEqual([['bearer-1', `Bearer ${token}`, 200]]);
    expect(app.tlsFailures).toEqual([]);
    await waitUntil('HandoverSucceeded', async () => {
      const reasons = (await rollguardEvents(core, fixture.ns, 'bearer')).map((e) => e.reason).filter((r) => HANDOVER_REASONS.includes(r));
      return reasons.join(',') === 'HandoverStarted,HandoverSucceeded' || reasons.join(',');
    });
    const started = (await rollguardEvents(core, fixture.ns, 'bearer')).find((e) => e.reason === 'HandoverStarted')!;
    expect(started.message).toContain('POST https:');
    expect(logText()).not.toContain(token);
  });

  it('a ca.crt that did not issue the certificate: no request reaches the app, the rollout pauses with a Warning saying so; the right CA resumes it', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const password = `pw-${Math.random().toString(36).slice(2)}`;
    const secret = { metadata: { name: 'wrong-ca-api' }, stringData: { username: 'admin', password, 'ca.crt': otherCa.certPem } };
    await core.createNamespacedSecret({ namespace: fixture.ns, body: secret });
    const authorization = `Basic ${Buffer.from(`admin:${password}`).toString('base64')}`;
    const app = await httpsSet('untrusted', 0, 'wrong-ca-api', authorization, { [HANDOVER_RETRIES_ANNOTATION]: '2' });
    await core.patchNamespacedConfigMap({ name: 'untrusted', namespace: fixture.ns, body: [{ op: 'replace', path: '/data/v', value: 'v1' }] });
    let paused = '';
    await waitUntil('a Warning that the rollout is paused at untrusted-0', async () => {
      paused = (await rollguardEvents(core, fixture.ns, 'untrusted')).find((e) => e.type === 'Warning' && e.message.includes('the rollout is paused at pod untrusted-0'))?.message ?? '';
      return paused !== '' || 'not yet';
    }, { timeoutMs: 60_000 });
    const failed = (await rollguardEvents(core, fixture.ns, 'untrusted')).filter((e) => e.reason === 'HandoverFailed');
    // the TLS handshake reached the pod's server and went no further: no request, no credentials sent
    expect(app.calls).toEqual([]);
    expect(app.tlsFailures.length).toBeGreaterThanOrEqual(2);
    expect(app.tlsFailures.every((f) => f.pod === 'untrusted-0')).toBe(true);
    expect(paused).toContain(`the certificate of pod untrusted-0 (untrusted-0.untrusted.${fixture.ns}.svc) is not trusted by ca.crt of Secret wrong-ca-api (unable to verify the first certificate), so no request was sent (pod untrusted-0 at 127.0.0.`);
    expect(paused).not.toContain('--use-system-ca');
    for (const e of failed) {
      expect(e.message).not.toContain('BEGIN CERTIFICATE');
      expect(e.message).not.toContain(password);
    }
    expect((await apps.readNamespacedStatefulSet({ name: 'untrusted', namespace: fixture.ns })).spec?.updateStrategy?.rollingUpdate?.partition).toBe(1);
    expect(app.primaryDeletions).toEqual([]);

    // the Secret is read at each call: the right CA lets the next attempt through
    await core.replaceNamespacedSecret({ name: 'wrong-ca-api', namespace: fixture.ns, body: { ...secret, stringData: { ...secret.stringData, 'ca.crt': ca.certPem } } });
    await setAtRest(apps, fixture.ns, 'untrusted');
    expect(app.calls.map((c) => [c.pod, c.authorization, c.answered])).toEqual([['untrusted-0', authorization, 200]]);
    expect(app.primaryDeletions).toEqual([]);
    const log = logText();
    expect(log).not.toContain(password);
    expect(log).not.toContain(authorization.slice('Basic '.length));
    expect(log).not.toContain('BEGIN CERTIFICATE');
  });
});
