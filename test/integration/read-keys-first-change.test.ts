import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CoreV1Event, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { kubeconfigThrough, startFaultProxy, type FaultProxy } from '../env/fault-proxy.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { waitFor, waitUntil } from '../env/wait.js';

const ANNOTATION = 'configmap.rollguard.io/app';

// Found by the model checker (seed 1025929423): a set created reading one key of a ConfigMap, and
// at once another key added to it. The webhook wrote the version it saw; the loop first met the
// set when the ConfigMap had already moved on, so it had no digests of the admitted version to
// compare with, and rolled the set for a key no pod reads. The fault: rollguard reaches the API
// server through a fault proxy that holds its open connections (its watches) from just before the
// set is created until the ConfigMap has changed.
describe('a change in the moment after a set is created, to a key it does not read', () => {
  const { core, apps } = testCluster();
  let proxy: FaultProxy;
  let f: RollguardFixture;
  let dir: string;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-first-change-'));
    const server = new URL(testCluster().kc.getCurrentCluster()!.server);
    proxy = await startFaultProxy({ host: server.hostname, port: Number(server.port) });
    f = await startRollguardFixture({
      name: 'first-change',
      webhook: 'registered',
      args: ['--leader-election=false', '--debounce=0s', '--min-restart-interval=0s', '--shutdown-delay=0s'],
      kubeconfig: (p) => kubeconfigThrough(proxy, p, dir),
    });
  });
  afterAll(async () => {
    await f?.teardown();
    await proxy?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(f ? [f.rollguard] : [], 60);
  });

  const sample = async (series: string): Promise<number> => {
    const text = await (await fetch(`${f.rollguard.adminUrl}/metrics`, { signal: AbortSignal.timeout(2_000) })).text();
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? 0 : Number(line.slice(series.length + 1));
  };
  const read = (): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name: 'app', namespace: f.ns });
  const recorded = (s: V1StatefulSet): string | undefined => {
    const raw = s.metadata?.annotations?.[DIGESTS_ANNOTATION];
    return raw ? (JSON.parse(raw) as Record<string, { v: string }>)[ANNOTATION]?.v : undefined;
  };
  const judgedAt = (version: string): Promise<V1StatefulSet> =>
    waitFor(`the set's digest record at ${version}`, async () => {
      const s = await read();
      return recorded(s) === version ? s : undefined;
    });
  const events = async (): Promise<string[]> =>
    (await core.listNamespacedEvent({ namespace: f.ns, fieldSelector: 'involvedObject.name=app,involvedObject.kind=StatefulSet' })).items
      .filter((e: CoreV1Event) => e.source?.component === 'rollguard')
      .map((e) => `${e.reason}: ${e.message}`);
  const versionOf = (cm: { metadata?: { uid?: string; resourceVersion?: string } }): string => `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`;

  it('rolls nothing: the loop judges it against the admitted version read from the API server\'s history; a change to the key read then rolls once, naming it', async () => {
    const cached = await sample('rollguard_cached_objects{kind="ConfigMap"}');
    const cm = await core.createNamespacedConfigMap({ namespace: f.ns, body: { metadata: { name: 'app' }, data: { a: 'one', b: 'one' } } });
    await waitUntil('the ConfigMap in rollguard\'s cache', async () => (await sample('rollguard_cached_objects{kind="ConfigMap"}')) > cached || 'not yet');

    proxy.freezeOpenConnections();
    let changed: string;
    try {
      const body = statefulSet('app', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
      body.spec!.template.spec!.containers[0]!.env = [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'app', key: 'a' } } }];
      const set = await apps.createNamespacedStatefulSet({ namespace: f.ns, body });
      expect(set.spec!.template.metadata?.annotations?.[ANNOTATION], 'the webhook wrote the version it saw').toBe(versionOf(cm));
      changed = versionOf(await core.patchNamespacedConfigMap({ name: 'app', namespace: f.ns, body: [{ op: 'add', path: '/data/c', value: 'new' }] }));
    } finally {
      proxy.restore();
    }

    const judged = await judgedAt(changed);
    expect(judged.spec!.template.metadata?.annotations?.[ANNOTATION], 'the template keeps the admitted version').toBe(versionOf(cm));
    expect(judged.metadata!.generation, 'no rollout for an unread key').toBe(1);
    expect(await events()).toEqual([]);

    const readKey = versionOf(await core.patchNamespacedConfigMap({ name: 'app', namespace: f.ns, body: [{ op: 'replace', path: '/data/a', value: 'two' }] }));
    const rolled = await judgedAt(readKey);
    expect(rolled.spec!.template.metadata?.annotations?.[ANNOTATION]).toBe(readKey);
    expect(rolled.metadata!.generation).toBe(2);
    await waitUntil('the ConfigChanged Event', async () => ((await events()).some((e) => e.startsWith('ConfigChanged:') && e.includes('key a')) ? true : JSON.stringify(await events())));
  });
});

