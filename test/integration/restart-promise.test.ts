import type { CoreV1Event, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, FROZEN_ANNOTATION, IGNORE_LABEL, LAST_RESTART_ANNOTATION, annotationKey } from '../../src/restarter/annotations.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure, startRollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const { core, apps, kubeconfigPath } = testCluster();

/** A labelled set with no pods (nothing to play kubelet for) that reads `configMap` through envFrom. */
function setReading(name: string, configMap: string, annotations?: Record<string, string>): V1StatefulSet {
  const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' }, annotations });
  set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: configMap } }];
  return set;
}

async function changeConfigMap(namespace: string, name: string, value: string): Promise<string> {
  const cm = await core.patchNamespacedConfigMap({ name, namespace, body: [{ op: 'replace', path: '/data/v', value }] });
  return cm.metadata!.resourceVersion!;
}

const read = (namespace: string, name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace });

async function eventsOf(namespace: string, name: string, reason: string): Promise<CoreV1Event[]> {
  const events = await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name},reason=${reason}` });
  return events.items;
}

const count = (events: CoreV1Event[]): number => events.reduce((sum, e) => sum + (e.count ?? 1), 0);

async function idle(fixture: RollguardFixture): Promise<void> {
  await waitUntil('rollguard idle', async () => {
    const s = (await fixture.rollguard.status()) as { reconcile: { queued: number; in_flight: number } };
    return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
  });
}

describe('the UPDATE rule: no restart is silent', () => {
  let fixture: RollguardFixture;
  let ns: string;
  const DEBOUNCE_MS = 6_000;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'promise-update', webhook: 'registered', args: [`--debounce=${DEBOUNCE_MS}ms`] });
    ns = fixture.ns;
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it('an annotate after a ConfigMap change rolls nothing itself; the loop rolls once, debounced, with its Event', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cfg-a' }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({ namespace: ns, body: setReading('annotated', 'cfg-a') });
    const changedTo = await changeConfigMap(ns, 'cfg-a', '1');
    // kubectl annotate sts annotated x=y, inside the debounce window
    const annotated = await apps.patchNamespacedStatefulSet({ name: 'annotated', namespace: ns, body: [{ op: 'add', path: '/metadata/annotations', value: { x: 'y' } }] });
    expect(annotated.metadata?.generation).toBe(1);
    expect(annotated.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'cfg-a')]).not.toMatch(new RegExp(`/${changedTo}$`));
    // the loop does it, once, and says so
    const rolled = await waitFor('the loop to roll the set', async () => {
      const s = await read(ns, 'annotated');
      return s.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'cfg-a')]?.endsWith(`/${changedTo}`) ? s : undefined;
    });
    expect(rolled.metadata?.generation).toBe(2);
    await waitUntil('its Event', async () => (await eventsOf(ns, 'annotated', 'ConfigChanged')).some((e) => e.message?.includes(`→ ${changedTo})`)) || 'none yet');
    expect(count(await eventsOf(ns, 'annotated', 'ConfigChanged'))).toBe(1);
  });

  it('a bump folded into an owner\'s template change is one rollout, with exactly one Event', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cfg-b' }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({ namespace: ns, body: setReading('upgraded', 'cfg-b') });
    const changedTo = await changeConfigMap(ns, 'cfg-b', '1');
    // helm upgrade: the ConfigMap, then the set's own template
    const upgraded = await apps.patchNamespacedStatefulSet({
      name: 'upgraded',
      namespace: ns,
      body: [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'registry.example/app:2' }],
    });
    expect(upgraded.metadata?.generation).toBe(2);
    expect(upgraded.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'cfg-b')]).toMatch(new RegExp(`/${changedTo}$`));
    await waitUntil('the Event of the folded restart', async () =>
      (await eventsOf(ns, 'upgraded', 'ConfigChanged')).some((e) => e.message?.includes('applied at admission')) || 'none yet',
    );
    await waitUntil('the restart reason consumed', async () => (await read(ns, 'upgraded')).metadata?.annotations?.['rollguard.io/restart-reason'] === undefined);
    await idle(fixture);
    const after = await read(ns, 'upgraded');
    expect(after.metadata?.generation).toBe(2);
    expect(count(await eventsOf(ns, 'upgraded', 'ConfigChanged'))).toBe(1);
  });
});

describe('the restart floor', () => {
  let fixture: RollguardFixture;
  let ns: string;
  const FLOOR_MS = 5_000;
  const args = ['--debounce=0s', `--min-restart-interval=${FLOOR_MS}ms`];

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'promise-floor', webhook: 'registered', args });
    ns = fixture.ns;
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it('rolls a flapping ConfigMap\'s set at most once per interval, the last change last, and keeps the floor across a restart of rollguard', async () => {
    const key = annotationKey('ConfigMap', 'flap');
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'flap' }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({ namespace: ns, body: setReading('flapping', 'flap') });
    const first = await changeConfigMap(ns, 'flap', '1');
    const once = await waitFor('the first change rolled', async () => {
      const s = await read(ns, 'flapping');
      return s.spec?.template.metadata?.annotations?.[key]?.endsWith(`/${first}`) ? s : undefined;
    });
    const firstAt = Date.parse(once.metadata!.annotations![LAST_RESTART_ANNOTATION]!);
    let last = '';
    for (let i = 2; i <= 6; i++) last = await changeConfigMap(ns, 'flap', String(i));
    await waitUntil('one RestartsDeferred Event', async () => count(await eventsOf(ns, 'flapping', 'RestartsDeferred')) === 1 || 'not yet');
    const twice = await waitFor('the last change rolled after the floor', async () => {
      const s = await read(ns, 'flapping');
      return s.spec?.template.metadata?.annotations?.[key]?.endsWith(`/${last}`) ? s : undefined;
    }, { timeoutMs: 30_000 });
    const secondAt = Date.parse(twice.metadata!.annotations![LAST_RESTART_ANNOTATION]!);
    expect(secondAt - firstAt).toBeGreaterThanOrEqual(FLOOR_MS);
    // creation (webhook, generation 1), the first change, the last one: five changes in between folded
    expect(twice.metadata?.generation).toBe(3);

    // a restart of rollguard inside the next window: the floor is on the set, not in memory
    const next = await changeConfigMap(ns, 'flap', '7');
    await fixture.rollguard.kill();
    const again = await startRollguardProcess({ name: 'promise-floor-2', kubeconfigPath, args: [`--namespace=${fixture.own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', ...args] });
    try {
      await again.waitReady();
      const thrice = await waitFor('the change rolled by the restarted rollguard', async () => {
        const s = await read(ns, 'flapping');
        return s.spec?.template.metadata?.annotations?.[key]?.endsWith(`/${next}`) ? s : undefined;
      }, { timeoutMs: 30_000 });
      expect(Date.parse(thrice.metadata!.annotations![LAST_RESTART_ANNOTATION]!) - secondAt).toBeGreaterThanOrEqual(FLOOR_MS);
      expect(thrice.metadata?.generation).toBe(4);
    } finally {
      await again.kill();
    }
  });
});

describe('opting out restarts nothing', () => {
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'promise-ignore', webhook: 'registered', args: ['--debounce=0s'] });
    ns = fixture.ns;
  });
  afterAll(async () => fixture?.teardown());
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it('keeps an ignored ConfigMap\'s annotation frozen through label, change, delete and re-create; tracks it again once unlabelled', async () => {
    const key = annotationKey('ConfigMap', 'opt');
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'opt' }, data: { v: '0' } } });
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: setReading('opting', 'opt') });
    const frozenAt = created.spec!.template.metadata!.annotations![key]!;
    await core.patchNamespacedConfigMap({ name: 'opt', namespace: ns, body: [{ op: 'add', path: '/metadata/labels', value: { [IGNORE_LABEL]: 'true' } }] });
    await waitUntil('the reference listed as frozen', async () => (await read(ns, 'opting')).metadata?.annotations?.[FROZEN_ANNOTATION] === 'ConfigMap/opt' || 'not yet');
    await changeConfigMap(ns, 'opt', '1');
    await core.deleteNamespacedConfigMap({ name: 'opt', namespace: ns });
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'opt', labels: { [IGNORE_LABEL]: 'true' } }, data: { v: '2' } } });
    // a probe set behind the same ConfigMap watch: once it rolled, the loop has seen all of the above
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'probe' }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({ namespace: ns, body: setReading('probe', 'probe') });
    const probeTo = await changeConfigMap(ns, 'probe', '1');
    await waitUntil('the probe rolled', async () => (await read(ns, 'probe')).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'probe')]?.endsWith(`/${probeTo}`) || 'not yet');
    await idle(fixture);
    const frozen = await read(ns, 'opting');
    expect(frozen.metadata?.generation).toBe(1);
    expect(frozen.spec?.template.metadata?.annotations?.[key]).toBe(frozenAt);

    // back in: the object is another one now (re-created), so the set rolls once
    const unlabelled = await core.patchNamespacedConfigMap({ name: 'opt', namespace: ns, body: [{ op: 'remove', path: `/metadata/labels/${IGNORE_LABEL.replace('/', '~1')}` }] });
    const tracked = await waitFor('tracked again', async () => {
      const s = await read(ns, 'opting');
      return s.spec?.template.metadata?.annotations?.[key] === `${unlabelled.metadata!.uid}/${unlabelled.metadata!.resourceVersion}` ? s : undefined;
    });
    expect(tracked.metadata?.generation).toBe(2);
    expect(tracked.metadata?.annotations?.[FROZEN_ANNOTATION]).toBeUndefined();
  });

  it('keeps the annotation of a ConfigMap named in rollguard.io/ignore-configmaps', async () => {
    const key = annotationKey('ConfigMap', 'named');
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'named' }, data: { v: '0' } } });
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: setReading('naming', 'named') });
    const opted = await apps.patchNamespacedStatefulSet({ name: 'naming', namespace: ns, body: [{ op: 'add', path: '/metadata/annotations', value: { 'rollguard.io/ignore-configmaps': 'named' } }] });
    expect(opted.metadata?.generation).toBe(1);
    const changedTo = await changeConfigMap(ns, 'named', '1');
    // a probe behind the same watch: once it rolled, the loop has seen the change above
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'probe-2' }, data: { v: '0' } } });
    await apps.createNamespacedStatefulSet({ namespace: ns, body: setReading('probe-2', 'probe-2') });
    const probeTo = await changeConfigMap(ns, 'probe-2', '1');
    await waitUntil('the probe rolled', async () => (await read(ns, 'probe-2')).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', 'probe-2')]?.endsWith(`/${probeTo}`) || 'not yet');
    await idle(fixture);
    const after = await read(ns, 'naming');
    expect(after.metadata?.generation).toBe(1);
    expect(after.spec?.template.metadata?.annotations?.[key]).toBe(created.spec!.template.metadata!.annotations![key]);
    expect(after.spec?.template.metadata?.annotations?.[key]).not.toMatch(new RegExp(`/${changedTo}$`));
  });
});
