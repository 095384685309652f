import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { buildImageBundle, IMAGE_CLI, printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor } from '../env/wait.js';

const run = promisify(execFile);

// The image runs the CLI bundled with its dependencies (rolldown.config.mjs), not dist/src with
// node_modules: the bundle is tested here as a real process before the e2e suite runs it on a node.
describe("the image's bundle (dist/image/cli.js)", () => {
  const { core, apps, kubeconfigPath } = testCluster();
  let ns: string;
  let own: string;
  let rollguard: RollguardProcess | undefined;

  beforeAll(async () => {
    buildImageBundle();
    ns = await createNamespace(core, 'bundle');
    own = await createNamespace(core, 'bundle-rollguard');
  });

  afterAll(async () => {
    await rollguard?.kill();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deleteNamespace({ name: own }).catch(() => undefined);
  });

  it("prints package.json's version, and stops on an invalid flag naming it", async () => {
    const { version } = JSON.parse(fs.readFileSync('package.json', 'utf8')) as { version: string };
    expect((await run(process.execPath, [IMAGE_CLI, '--version'])).stdout.trim()).toBe(version);
    const refused = await run(process.execPath, [IMAGE_CLI, 'serve', '--workers=abc']).then(
      () => undefined,
      (e: unknown) => e as { code: number; stderr: string },
    );
    expect(refused?.code).not.toBe(0);
    expect(refused?.stderr).toContain('--workers');
  });

  it("carries the license of every package it bundled, package.json's dependencies among them", () => {
    const text = fs.readFileSync(path.join(path.dirname(IMAGE_CLI), 'THIRD-PARTY-LICENSES.txt'), 'utf8');
    const entries = text.split(`\n${'-'.repeat(72)}\n\n`);
    const { dependencies } = JSON.parse(fs.readFileSync('package.json', 'utf8')) as { dependencies: Record<string, string> };
    for (const name of Object.keys(dependencies)) {
      const entry = entries.find((e) => e.startsWith(`${name}@`));
      expect(entry, `${name} in THIRD-PARTY-LICENSES.txt`).toBeDefined();
      // a heading line, a blank line, then the license's own text
      expect(entry!.split('\n').slice(2).join('\n').trim().length, `${name}'s license text`).toBeGreaterThan(100);
    }
  });

  it('serves: annotates an opted-in StatefulSet, then rolls it once on a data change with an Event', async () => {
    printControlPlaneLogsOnFailure();
    const cm = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cfg' }, data: { v: '1' } } });
    const set = statefulSet('web', { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    await apps.createNamespacedStatefulSet({ namespace: ns, body: set });

    rollguard = await startRollguardProcess({
      name: 'bundle',
      cli: IMAGE_CLI,
      kubeconfigPath,
      args: [`--namespace=${own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', '--leader-election=false', '--debounce=0s'],
    });
    printProcessLogsOnFailure([rollguard]);
    await rollguard.waitReady();

    const key = annotationKey('ConfigMap', 'cfg');
    const templateValue = async (): Promise<string | undefined> =>
      (await apps.readNamespacedStatefulSet({ name: 'web', namespace: ns })).spec!.template.metadata?.annotations?.[key];
    await waitFor('the loop annotates the set', async () => ((await templateValue()) === `${cm.metadata!.uid}/${cm.metadata!.resourceVersion}` ? true : undefined), { timeoutMs: 30_000 });

    const changed = await core.patchNamespacedConfigMap({ name: 'cfg', namespace: ns, body: [{ op: 'replace', path: '/data/v', value: '2' }] });
    await waitFor('the set rolled onto the new version', async () => ((await templateValue()) === `${cm.metadata!.uid}/${changed.metadata!.resourceVersion}` ? true : undefined), { timeoutMs: 30_000 });
    const events = await waitFor('the ConfigChanged Event', async () => {
      const items = (await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'reason=ConfigChanged,involvedObject.name=web' })).items;
      return items.length > 0 ? items : undefined;
    }, { timeoutMs: 30_000 });
    expect(events).toHaveLength(1);
    expect(events[0]!.message).toContain('cfg');
  });
});
