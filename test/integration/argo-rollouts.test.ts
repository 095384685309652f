import { CustomObjectsApi, type CoreV1Event, type V1Deployment } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { installArgoRolloutsCrd } from '../../src/dev/argo-rollouts.js';
import { WORKLOAD_RESOURCES, type ArgoRollout } from '../../src/kube/workloads.js';
import { ENABLED_LABEL, LAST_RESTART_ANNOTATION, annotationKey } from '../../src/restarter/annotations.js';
import { REASON_TEMPLATE_IN_WORKLOAD_REF } from '../../src/restarter/kind-features.js';
import { deployment, printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { endsWithVersion } from '../env/event-text.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

// The test of record of issue 26 item 3: an opted-in Argo Rollouts Rollout against the real API
// server with the Rollout CRD from the argo-rollouts Go module. The Argo controller does not run
// (it is not built: docs/argo-rollouts.md): what rollguard controls is the Rollout's template,
// and each template change is a new generation (a custom resource with a status subresource
// bumps its generation for spec changes only), so generations count rollguard's restarts.

const CM_KEY = annotationKey('ConfigMap', 'app-config');
const { group, version, plural } = WORKLOAD_RESOURCES.Rollout;

function rolloutManifest(name: string, opts: { labelled?: boolean } = {}): ArgoRollout {
  return {
    apiVersion: `${group}/${version}`,
    kind: 'Rollout',
    metadata: { name, labels: opts.labelled === false ? {} : { [ENABLED_LABEL]: 'true' } },
    spec: {
      replicas: 2,
      // the selector and strategy are Argo's; rollguard reads neither
      ...({ selector: { matchLabels: { app: name } }, strategy: { canary: { steps: [{ setWeight: 50 }, { pause: { duration: '10s' } }] } } } as object),
      template: {
        metadata: { labels: { app: name } },
        spec: {
          containers: [{ name: 'app', image: 'registry.invalid/app:1', volumeMounts: [{ name: 'config', mountPath: '/etc/app' }] }],
          volumes: [{ name: 'config', configMap: { name: 'app-config' } }],
        },
      },
    },
  };
}

interface Rollouts {
  create(namespace: string, body: unknown): Promise<ArgoRollout>;
  read(namespace: string, name: string): Promise<ArgoRollout>;
}

function rollouts(): Rollouts {
  const custom = testCluster().kc.makeApiClient(CustomObjectsApi);
  return {
    create: async (namespace, body) => (await custom.createNamespacedCustomObject({ group, version, namespace, plural, body })) as ArgoRollout,
    read: async (namespace, name) => (await custom.getNamespacedCustomObject({ group, version, namespace, plural, name })) as ArgoRollout,
  };
}

async function rollguardEventsAbout(namespace: string, kind: string, name: string): Promise<CoreV1Event[]> {
  const { core } = testCluster();
  return (await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}` })).items.filter(
    (e) => e.source?.component === 'rollguard',
  );
}

async function loopIdle(rollguard: RollguardProcess): Promise<void> {
  await waitUntil('the loop idle', async () => {
    const r = (await rollguard.status()).reconcile as { queued: number; in_flight: number };
    return (r.queued === 0 && r.in_flight === 0) || JSON.stringify(r);
  });
}

async function setConfig(namespace: string, value: string): Promise<string> {
  const { core } = testCluster();
  const cm = await core.replaceNamespacedConfigMap({ name: 'app-config', namespace, body: { metadata: { name: 'app-config' }, data: { a: value } } });
  return cm.metadata!.resourceVersion!;
}

const templateValue = (r: ArgoRollout): string | undefined => r.spec?.template?.metadata?.annotations?.[CM_KEY];

describe('an opted-in Rollout with --argo-rollouts', () => {
  const { core } = testCluster();
  const api = rollouts();
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    // cluster-wide and shared by the files that need it: installed if absent, never deleted
    await installArgoRolloutsCrd(testCluster().kc);
    fixture = await startRollguardFixture({ name: 'argo', webhook: 'registered', argoRollouts: true, args: ['--argo-rollouts', '--debounce=1s', '--min-restart-interval=0s'] });
    ns = fixture.ns;
  }, 120_000);
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(fixture ? [fixture.rollguard] : []);
  });

  it('created after its ConfigMap: stored with its annotations at generation 1, and the loop writes no second template', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1' } } });
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns });
    const created = await api.create(ns, rolloutManifest('web'));
    expect(templateValue(created)).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    expect(created.metadata!.generation).toBe(1);
    await loopIdle(fixture.rollguard);
    // the loop's first pass records the data digests on the Rollout itself: no new generation
    const after = await waitFor('the digest record', async () => {
      const r = await api.read(ns, 'web');
      return r.metadata?.annotations?.['rollguard.io/digests'] ? r : undefined;
    });
    expect(after.metadata!.generation).toBe(1);
    expect(templateValue(after)).toBe(templateValue(created));
    expect(await rollguardEventsAbout(ns, 'Rollout', 'web')).toEqual([]);
    const status = (await fixture.rollguard.status()) as { caches?: Record<string, unknown> };
    expect(Object.keys(status.caches ?? {})).toContain('Rollout');
  });

  it('a ConfigMap data change: one template change (one generation), and an Event on the Rollout naming the object and both versions', async () => {
    const before = await api.read(ns, 'web');
    const rv = await setConfig(ns, '2');
    const after = await waitFor('the template at the new version', async () => {
      const r = await api.read(ns, 'web');
      return templateValue(r)?.endsWith(`/${rv}`) ? r : undefined;
    });
    await loopIdle(fixture.rollguard);
    expect((await api.read(ns, 'web')).metadata!.generation).toBe(2);
    expect(after.metadata!.annotations![LAST_RESTART_ANNOTATION]).toBeDefined();
    const events = await waitFor('the ConfigChanged Event', async () => {
      const found = (await rollguardEventsAbout(ns, 'Rollout', 'web')).filter((e) => e.reason === 'ConfigChanged');
      return found.length > 0 ? found : undefined;
    });
    expect(events).toHaveLength(1);
    expect(events[0]!.involvedObject).toMatchObject({ kind: 'Rollout', apiVersion: 'argoproj.io/v1alpha1', uid: before.metadata!.uid });
    expect(events[0]!.message).toContain('ConfigMap app-config');
    expect(endsWithVersion(events[0]!.message!, rv), events[0]!.message).toBe(true);
    expect(events[0]!.count ?? 1).toBe(1);
  });

  it('a metadata-only change of the ConfigMap (a label) rolls nothing; a second data change rolls once more', async () => {
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns });
    cm.metadata!.labels = { touched: 'yes' };
    await core.replaceNamespacedConfigMap({ name: 'app-config', namespace: ns, body: cm });
    await loopIdle(fixture.rollguard);
    // the debounce is 1 s: past it and idle, nothing was written to the template
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await loopIdle(fixture.rollguard);
    expect((await api.read(ns, 'web')).metadata!.generation).toBe(2);
    const rv = await setConfig(ns, '3');
    await waitUntil('the second change rolled', async () => {
      const r = await api.read(ns, 'web');
      return templateValue(r)?.endsWith(`/${rv}`) || `template at ${templateValue(r)}`;
    });
    await loopIdle(fixture.rollguard);
    expect((await api.read(ns, 'web')).metadata!.generation).toBe(3);
    const changed = (await rollguardEventsAbout(ns, 'Rollout', 'web')).filter((e) => e.reason === 'ConfigChanged');
    expect(changed.reduce((n, e) => n + (e.count ?? 1), 0)).toBe(2);
  });

  it('a Rollout with spec.workloadRef: one TemplateInWorkloadRef Warning naming the Deployment, nothing written; the Deployment opted in is handled as a Deployment', async () => {
    const { apps } = testCluster();
    const base = deployment('web-base', { replicas: 0 });
    const pod = base.spec!.template.spec!;
    pod.volumes = [{ name: 'config', configMap: { name: 'app-config' } }];
    pod.containers[0]!.volumeMounts = [{ name: 'config', mountPath: '/etc/app' }];
    await apps.createNamespacedDeployment({ namespace: ns, body: base });
    const created = await api.create(ns, {
      apiVersion: `${group}/${version}`,
      kind: 'Rollout',
      metadata: { name: 'by-ref', labels: { [ENABLED_LABEL]: 'true' } },
      spec: { replicas: 2, selector: { matchLabels: { app: 'web-base' } }, workloadRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'web-base', scaleDown: 'onsuccess' } },
    });
    expect(created.spec?.template).toBeUndefined();
    const warning = await waitFor('the TemplateInWorkloadRef Warning', async () => {
      const found = (await rollguardEventsAbout(ns, 'Rollout', 'by-ref')).filter((e) => e.reason === REASON_TEMPLATE_IN_WORKLOAD_REF);
      return found.length > 0 ? found : undefined;
    });
    expect(warning[0]!.type).toBe('Warning');
    expect(warning[0]!.message).toContain('Deployment web-base (spec.workloadRef)');
    expect(warning[0]!.message).toContain(`Label Deployment web-base ${ENABLED_LABEL}=true`);
    expect(warning[0]!.message).toContain('scaleDown: onsuccess');

    // the Deployment, opted in, gets its template annotations: the template Argo runs for the Rollout
    const labelled: V1Deployment = await apps.readNamespacedDeployment({ namespace: ns, name: 'web-base' });
    labelled.metadata!.labels = { ...labelled.metadata!.labels, [ENABLED_LABEL]: 'true' };
    await apps.replaceNamespacedDeployment({ namespace: ns, name: 'web-base', body: labelled });
    const cm = await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns });
    await waitUntil('the Deployment annotated', async () => {
      const d = await apps.readNamespacedDeployment({ namespace: ns, name: 'web-base' });
      const value = d.spec?.template.metadata?.annotations?.[CM_KEY];
      return value === `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}` || `template at ${value}`;
    });

    // a data change: the Deployment's template changes; the Rollout is never written, and told once
    const rv = await setConfig(ns, '4');
    await waitUntil('the Deployment rolled', async () => {
      const d = await apps.readNamespacedDeployment({ namespace: ns, name: 'web-base' });
      return d.spec?.template.metadata?.annotations?.[CM_KEY]?.endsWith(`/${rv}`) || 'not yet';
    });
    await loopIdle(fixture.rollguard);
    const rollout = await api.read(ns, 'by-ref');
    expect(rollout.metadata!.generation).toBe(1);
    expect(rollout.spec?.template).toBeUndefined();
    expect(rollout.metadata!.annotations?.[LAST_RESTART_ANNOTATION]).toBeUndefined();
    const told = (await rollguardEventsAbout(ns, 'Rollout', 'by-ref')).filter((e) => e.reason === REASON_TEMPLATE_IN_WORKLOAD_REF);
    expect(told.map((e) => e.count ?? 1)).toEqual([1]);
  });
});

describe('a Rollout under the restart floor', () => {
  const { core } = testCluster();
  const api = rollouts();
  let fixture: RollguardFixture;
  let ns: string;
  const FLOOR_S = 6;

  beforeAll(async () => {
    await installArgoRolloutsCrd(testCluster().kc);
    fixture = await startRollguardFixture({ name: 'argo-floor', webhook: 'registered', argoRollouts: true, args: ['--argo-rollouts', '--debounce=0s', `--min-restart-interval=${FLOOR_S}s`] });
    ns = fixture.ns;
  }, 120_000);
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(fixture ? [fixture.rollguard] : []);
  });

  it('a change right after a restart waits out the floor with a RestartsDeferred Event, then rolls once with the last version', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1' } } });
    await api.create(ns, rolloutManifest('web'));
    await loopIdle(fixture.rollguard);
    const first = await setConfig(ns, '2');
    await waitUntil('the first change rolled', async () => templateValue(await api.read(ns, 'web'))?.endsWith(`/${first}`) || 'not yet');
    const restartedAt = Date.now();
    await setConfig(ns, '3');
    const last = await setConfig(ns, '4');
    await waitFor('the RestartsDeferred Event', async () => {
      const found = (await rollguardEventsAbout(ns, 'Rollout', 'web')).filter((e) => e.reason === 'RestartsDeferred');
      return found.length > 0 ? found : undefined;
    });
    expect((await api.read(ns, 'web')).metadata!.generation, 'held by the floor').toBe(2);
    await waitUntil('the deferred change rolled', async () => templateValue(await api.read(ns, 'web'))?.endsWith(`/${last}`) || 'not yet', { timeoutMs: (FLOOR_S + 20) * 1000 });
    expect(Date.now() - restartedAt, 'not before the floor').toBeGreaterThanOrEqual((FLOOR_S - 1) * 1000);
    await loopIdle(fixture.rollguard);
    // two changes in the floor: one template change, with the last version
    expect((await api.read(ns, 'web')).metadata!.generation).toBe(3);
    const changed = (await rollguardEventsAbout(ns, 'Rollout', 'web')).filter((e) => e.reason === 'ConfigChanged');
    expect(changed.reduce((n, e) => n + (e.count ?? 1), 0)).toBe(2);
  });
});

describe('without --argo-rollouts', () => {
  const { core } = testCluster();
  const api = rollouts();
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    await installArgoRolloutsCrd(testCluster().kc);
    // the webhook names rollouts all the same (a configuration that widened while the flag stayed off)
    fixture = await startRollguardFixture({ name: 'argo-off', webhook: 'registered', argoRollouts: true, args: ['--debounce=1s', '--min-restart-interval=0s'] });
    ns = fixture.ns;
  }, 120_000);
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(fixture ? [fixture.rollguard] : []);
  });

  it('rollguard ignores Rollouts: no annotations at admission, no write on a data change, no Event, no Rollout cache', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1' } } });
    const created = await api.create(ns, rolloutManifest('web'));
    expect(templateValue(created)).toBeUndefined();
    expect(created.metadata!.annotations ?? {}).toEqual({});
    await setConfig(ns, '2');
    await loopIdle(fixture.rollguard);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await loopIdle(fixture.rollguard);
    const after = await api.read(ns, 'web');
    expect(after.metadata!.generation).toBe(1);
    expect(templateValue(after)).toBeUndefined();
    expect(after.metadata!.annotations ?? {}).toEqual({});
    expect(await rollguardEventsAbout(ns, 'Rollout', 'web')).toEqual([]);
    const status = (await fixture.rollguard.status()) as { caches?: Record<string, unknown> };
    expect(Object.keys(status.caches ?? {})).not.toContain('Rollout');
  });
});
