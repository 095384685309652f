import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const run = promisify(execFile);
const { core, apps, kubeconfigPath } = testCluster();
const CM_KEY = annotationKey('ConfigMap', 'app-config');

/**
 * A chart as teams write them: `helm.sh/chart: <name>-<version>` on every object's metadata,
 * so an upgrade that changes nothing else still rewrites the ConfigMap (a new resourceVersion).
 */
function writeChart(dir: string, version: string, greeting: string): void {
  fs.mkdirSync(path.join(dir, 'templates'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'Chart.yaml'), `apiVersion: v2\nname: app\nversion: ${version}\n`);
  fs.writeFileSync(path.join(dir, 'values.yaml'), `greeting: ${JSON.stringify(greeting)}\n`);
  const labels = `    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}\n    app.kubernetes.io/managed-by: {{ .Release.Service }}\n`;
  fs.writeFileSync(
    path.join(dir, 'templates', 'configmap.yaml'),
    `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n  labels:\n${labels}data:\n  greeting: {{ .Values.greeting | quote }}\n`,
  );
  fs.writeFileSync(
    path.join(dir, 'templates', 'statefulset.yaml'),
    [
      'apiVersion: apps/v1',
      'kind: StatefulSet',
      'metadata:',
      '  name: web',
      '  labels:',
      labels.trimEnd(),
      `    ${ENABLED_LABEL}: "true"`,
      'spec:',
      '  replicas: 0',
      '  serviceName: web',
      '  selector:',
      '    matchLabels: { app: web }',
      '  template:',
      '    metadata:',
      '      labels: { app: web }',
      '    spec:',
      '      containers:',
      '        - name: app',
      '          image: registry.example/app:1',
      '          envFrom: [{ configMapRef: { name: app-config } }]',
      '',
    ].join('\n'),
  );
}

const recordedVersion = (set: V1StatefulSet): string | undefined => {
  const raw = set.metadata?.annotations?.[DIGESTS_ANNOTATION];
  return raw ? (JSON.parse(raw) as Record<string, { v: string }>)[CM_KEY]?.v : undefined;
};

describe('helm upgrade', () => {
  let fixture: RollguardFixture;
  let helm: string;
  let scratch: string;

  beforeAll(async () => {
    const tools = execFileSync('bash', [path.resolve('test/env/build-tools.sh')], { encoding: 'utf8' }).trim().split('\n').pop() ?? '';
    helm = path.join(tools, 'helm');
    scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-helm-'));
    fixture = await startRollguardFixture({ name: 'helm-up', webhook: 'registered' });
  });
  afterAll(async () => {
    await fixture?.teardown();
    if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  const upgrade = async (version: string, greeting: string): Promise<void> => {
    const chart = path.join(scratch, 'chart');
    const home = path.join(scratch, 'home');
    writeChart(chart, version, greeting);
    await run(helm, ['upgrade', '--install', 'app', chart, '--namespace', fixture.ns, '--kubeconfig', kubeconfigPath, '--wait=false'], {
      env: { ...process.env, HELM_CACHE_HOME: home, HELM_CONFIG_HOME: home, HELM_DATA_HOME: home },
    });
  };
  const judged = (resourceVersion: string): Promise<V1StatefulSet> =>
    waitFor(`the digest record at ${resourceVersion}`, async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace: fixture.ns });
      return recordedVersion(s)?.endsWith(`/${resourceVersion}`) ? s : undefined;
    });
  const configMapVersion = async (): Promise<string> => (await core.readNamespacedConfigMap({ name: 'app-config', namespace: fixture.ns })).metadata!.resourceVersion!;
  const configChanged = async (): Promise<string[]> =>
    (await core.listNamespacedEvent({ namespace: fixture.ns, fieldSelector: 'reason=ConfigChanged' })).items.map((e) => e.message ?? '');

  it('an upgrade that bumps only the chart labels rolls nothing; one that changes the data rolls once', async () => {
    await upgrade('1.0.0', 'hello');
    const v1 = await configMapVersion();
    const installed = await judged(v1);
    expect(installed.metadata?.generation).toBe(1);
    expect(installed.spec?.template.metadata?.annotations?.[CM_KEY]).toMatch(new RegExp(`/${v1}$`));

    // the chart's version moves: helm rewrites the labels of the ConfigMap and of the set
    await upgrade('1.1.0', 'hello');
    const v2 = await configMapVersion();
    expect(v2).not.toBe(v1);
    const relabelled = await judged(v2);
    expect(relabelled.metadata?.labels?.['helm.sh/chart']).toBe('app-1.1.0');
    expect(relabelled.metadata?.generation).toBe(1);
    expect(relabelled.spec?.template.metadata?.annotations?.[CM_KEY]).toMatch(new RegExp(`/${v1}$`));
    await waitUntil('rollguard idle', async () => {
      const s = (await fixture.rollguard.status()) as { reconcile: { queued: number; in_flight: number } };
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
    expect((await apps.readNamespacedStatefulSet({ name: 'web', namespace: fixture.ns })).metadata?.generation).toBe(1);
    expect(await configChanged()).toEqual([]);

    // the same upgrade path with a new value: one rollout, and its Event names the key
    await upgrade('1.2.0', 'bonjour');
    const v3 = await configMapVersion();
    const rolled = await waitFor('the data change rolled', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace: fixture.ns });
      return s.spec?.template.metadata?.annotations?.[CM_KEY]?.endsWith(`/${v3}`) ? s : undefined;
    });
    expect(rolled.metadata?.generation).toBe(2);
    await waitUntil('its Event', async () => (await configChanged()).some((m) => m === `ConfigMap app-config: data changed (key greeting), resourceVersion ${v1} → ${v3}`) || (await configChanged()).join(' | ') || 'none yet');
  });
});
