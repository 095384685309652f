import { PatchStrategy, setHeaderOptions, type V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { stackableContentDigest } from '../../src/compat/content-digest.js';
import { CHANGES_IGNORED, STACKABLE_ENABLED_LABEL, STACKABLE_FIELD_MANAGER, STACKABLE_IGNORE_LABEL } from '../../src/compat/stackable.js';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { rolloutCounts, rollguardEvents } from '../env/rollouts.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { registerWebhook, type WebhookRegistration } from '../env/webhook-registration.js';

const DEBOUNCE_MS = 500;
const CM = 'configmap.restarter.stackable.tech/';
const SECRET = 'secret.restarter.stackable.tech/';

// The test of record for `--compat stackable`: a set that commons-operator annotated is taken over
// with no write and no rollout; afterwards rollguard rolls it for a real change only.
describe('migration from commons-operator (--compat stackable)', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  let ns: string;
  let own: string;
  let kubelet: FakeKubelet;
  let webhook: WebhookRegistration | undefined;
  let rollguard: RollguardProcess | undefined;

  beforeAll(async () => {
    ns = await createNamespace(core, 'stackable-migration');
    own = await createNamespace(core, 'stackable-migration-rollguard');
    kubelet = new FakeKubelet(kc, ns).start();
  });
  afterAll(async () => {
    await rollguard?.kill();
    await webhook?.delete();
    await kubelet?.stop();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deleteNamespace({ name: own }).catch(() => undefined);
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(rollguard ? [rollguard] : []);
  });

  const read = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace: ns });
  const version = (o: { metadata?: { uid?: string; resourceVersion?: string } }): string => `${o.metadata!.uid}/${o.metadata!.resourceVersion}`;
  async function rollguardPatches(): Promise<number> {
    const text = await (await fetch(`${rollguard!.adminUrl}/metrics`)).text();
    return text
      .split('\n')
      .filter((l) => l.startsWith('rollguard_template_patches_total{'))
      .reduce((sum, l) => sum + Number(l.split(/\s+/).pop()), 0);
  }
  async function ready(name: string, replicas: number): Promise<V1StatefulSet> {
    return waitFor(`${name}: ${replicas} Ready on its current revision`, async () => {
      const s = await read(name);
      const st = s.status;
      if (st?.observedGeneration === s.metadata?.generation && st?.readyReplicas === replicas && st?.updatedReplicas === replicas && st?.currentRevision === st?.updateRevision) return s;
      throw new Error(`status ${JSON.stringify(st)}`);
    }, { timeoutMs: 90_000 });
  }
  async function idle(): Promise<void> {
    await waitUntil('rollguard idle after its first pass', async () => {
      const s = (await rollguard!.status()) as { reconcile: { queued: number; in_flight: number } };
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
  }

  it('takes over with zero patches and zero rollouts, then rolls once for a change, never for an ignored object', async () => {
    const app = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app' }, data: { v: '1' } } });
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'ignored-cm', labels: { [STACKABLE_IGNORE_LABEL]: 'true' } }, data: { v: '1' } } });
    const creds = await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'creds' }, stringData: { p: '1' } } });
    await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'ignored-secret' }, stringData: { p: '1' } } });
    const sentinel = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'sentinel' }, data: { v: '1' } } });

    // As commons-operator leaves it: its CREATE webhook wrote the annotations, its restarter owns them by server-side apply.
    const annotations = {
      [`${CM}app`]: version(app),
      [`${CM}ignored-cm`]: CHANGES_IGNORED,
      [`${CM}missing`]: CHANGES_IGNORED,
      [`${SECRET}creds`]: version(creds),
      [`${SECRET}ignored-secret`]: CHANGES_IGNORED,
    };
    const set = statefulSet('kafka', { replicas: 3, labels: { [STACKABLE_ENABLED_LABEL]: 'true' }, annotations: { 'restarter.stackable.tech/ignore-secret.0': 'ignored-secret' } });
    set.spec!.template.metadata!.annotations = annotations;
    set.spec!.template.spec!.volumes = [
      { name: 'app', configMap: { name: 'app' } },
      { name: 'ignored', configMap: { name: 'ignored-cm' } },
      { name: 'missing', configMap: { name: 'missing', optional: true } },
      { name: 'creds', secret: { secretName: 'creds' } },
      { name: 'other', secret: { secretName: 'ignored-secret' } },
    ];
    await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    await apps.patchNamespacedStatefulSet(
      {
        name: 'kafka',
        namespace: ns,
        fieldManager: STACKABLE_FIELD_MANAGER,
        force: true,
        body: { apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 'kafka', namespace: ns }, spec: { template: { metadata: { annotations } } } },
      },
      setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
    );
    // a second set that only the sentinel ConfigMap rolls: when it has rolled, rollguard has seen every change made before
    const probe = statefulSet('probe', { replicas: 1, labels: { [STACKABLE_ENABLED_LABEL]: 'true' } });
    probe.spec!.template.metadata!.annotations = { [`${CM}sentinel`]: version(sentinel) };
    probe.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'sentinel' } }];
    await apps.createNamespacedStatefulSet({ namespace: ns, body: probe });
    const before = await ready('kafka', 3);
    await ready('probe', 1);
    // as a newer commons-operator build leaves it: `<uid>/<content digest>` values
    const digestAnnotations = {
      [`${CM}app`]: `${app.metadata!.uid}/${stackableContentDigest('ConfigMap', app)}`,
      [`${SECRET}creds`]: `${creds.metadata!.uid}/${stackableContentDigest('Secret', creds)}`,
    };
    const digested = statefulSet('digested', { replicas: 1, labels: { [STACKABLE_ENABLED_LABEL]: 'true' } });
    digested.spec!.template.metadata!.annotations = digestAnnotations;
    digested.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'app' } }, { secretRef: { name: 'creds' } }];
    await apps.createNamespacedStatefulSet({ namespace: ns, body: digested });
    const digestedBefore = await ready('digested', 1);
    expect((await rolloutCounts(apps, ns, ['kafka'])).get('kafka')).toEqual({ generation: 1, revisions: 1 });

    rollguard = await startRollguardProcess({
      name: 'stackable',
      kubeconfigPath,
      args: [`--namespace=${own}`, `--watch-namespaces=${ns}`, `--webhook-configuration=${ns}`, '--compat=stackable', `--debounce=${DEBOUNCE_MS}ms`],
    });
    webhook = await registerWebhook(kc, { name: ns, port: rollguard.webhookPort, namespace: ns, compat: 'stackable' });
    await rollguard.waitReady();
    await waitUntil('the first pass reconciled both sets', async () => {
      const text = await (await fetch(`${rollguard!.adminUrl}/metrics`)).text();
      const count = text.split('\n').find((l) => l.startsWith('rollguard_reconcile_duration_seconds_count'));
      return Number(count?.split(/\s+/).pop() ?? 0) >= 3 || `reconciles: ${count}`;
    });
    await idle();

    // zero patches: rollguard made none, and the set is the very object it was (same resourceVersion, generation 1)
    expect(await rollguardPatches()).toBe(0);
    const after = await read('kafka');
    expect(after.metadata?.resourceVersion, JSON.stringify({ before: [before.metadata?.managedFields, before.status], after: [after.metadata?.managedFields, after.status] })).toBe(before.metadata?.resourceVersion);
    expect((await rolloutCounts(apps, ns, ['kafka'])).get('kafka')).toEqual({ generation: 1, revisions: 1 });
    // the digest form costs one read per object, no write: the data still has the digest it names
    expect((await read('digested')).metadata?.resourceVersion).toBe(digestedBefore.metadata?.resourceVersion);
    expect((await rolloutCounts(apps, ns, ['digested'])).get('digested')).toEqual({ generation: 1, revisions: 1 });
    const managers = (after.metadata?.managedFields ?? []).map((m) => `${m.manager}:${m.operation}`);
    expect(managers).toContain(`${STACKABLE_FIELD_MANAGER}:Apply`);

    // ignored objects change (one by label, one by the set's annotation), then the sentinel: only the probe rolls
    await core.patchNamespacedConfigMap({ name: 'ignored-cm', namespace: ns, body: [{ op: 'replace', path: '/data/v', value: '2' }] });
    await core.patchNamespacedSecret({ name: 'ignored-secret', namespace: ns, body: [{ op: 'replace', path: '/data/p', value: Buffer.from('2').toString('base64') }] });
    await core.patchNamespacedConfigMap({ name: 'sentinel', namespace: ns, body: [{ op: 'replace', path: '/data/v', value: '2' }] });
    await waitFor('probe rolled for the sentinel', async () => ((await read('probe')).metadata?.generation === 2 ? true : undefined));
    await idle();
    expect((await rolloutCounts(apps, ns, ['kafka'])).get('kafka')).toEqual({ generation: 1, revisions: 1 });
    expect((await read('kafka')).spec?.template.metadata?.annotations).toEqual(annotations);

    // a real change of a tracked ConfigMap: one rollout, one Event naming it and both versions
    const changed = await core.patchNamespacedConfigMap({ name: 'app', namespace: ns, body: [{ op: 'replace', path: '/data/v', value: '2' }] });
    await waitFor('kafka annotated with the new version', async () => ((await read('kafka')).spec?.template.metadata?.annotations?.[`${CM}app`] === version(changed) ? true : undefined));
    await ready('kafka', 3);
    await idle();
    expect((await rolloutCounts(apps, ns, ['kafka'])).get('kafka')).toEqual({ generation: 2, revisions: 2 });
    // the counter read above as 0 does count: the probe's and kafka's patches at least
    expect(await rollguardPatches()).toBeGreaterThanOrEqual(2);
    // the digest-form set rolls once too, its value now rollguard's
    await waitFor('digested annotated with the new version', async () => ((await read('digested')).spec?.template.metadata?.annotations?.[`${CM}app`] === version(changed) ? true : undefined));
    await ready('digested', 1);
    expect((await rolloutCounts(apps, ns, ['digested'])).get('digested')).toEqual({ generation: 2, revisions: 2 });
    expect((await read('digested')).spec?.template.metadata?.annotations?.[`${SECRET}creds`]).toBe(digestAnnotations[`${SECRET}creds`]);
    const events = (await rollguardEvents(core, ns)).filter((e) => e.set === 'kafka');
    expect(events.map((e) => e.reason)).toEqual(['ConfigChanged']);
    expect(events[0]!.message).toContain(`ConfigMap app changed (resourceVersion ${app.metadata!.resourceVersion} → ${changed.metadata!.resourceVersion})`);
    const annotationsNow = (await read('kafka')).spec?.template.metadata?.annotations;
    expect(annotationsNow).toEqual({ ...annotations, [`${CM}app`]: version(changed) });
    // who owns what after the migration: commons-operator's apply keeps the keys rollguard never changed; the changed one moved to rollguard
    const applied = (await read('kafka')).metadata?.managedFields?.find((m) => m.manager === STACKABLE_FIELD_MANAGER && m.operation === 'Apply');
    const owned = Object.keys((applied?.fieldsV1 as { 'f:spec': { 'f:template': { 'f:metadata': { 'f:annotations': Record<string, unknown> } } } })['f:spec']['f:template']['f:metadata']['f:annotations']);
    expect(owned.sort()).toEqual(Object.keys(annotations).filter((k) => k !== `${CM}app`).map((k) => `f:${k}`).sort());
  }, 240_000);
});
