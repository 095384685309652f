import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import type { V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor } from '../env/wait.js';

const run = promisify(execFile);
const CLI = path.resolve('dist/src/cli.js');

// Uninstalling rollguard must not leave health-gated sets frozen at partition = replicas:
// `rollguard release` (a real process, the user's kubeconfig) hands them back.
describe('rollguard release', () => {
  const { apps, kubeconfigPath } = testCluster();
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'release', webhook: 'registered' });
    ns = fixture.ns;
  });
  afterAll(async () => {
    await fixture?.teardown();
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(fixture ? [fixture.rollguard] : []);
  });

  const read = (name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace: ns });
  const release = async (...args: string[]) => run(process.execPath, [CLI, 'release', `--kubeconfig=${kubeconfigPath}`, `--namespaces=${ns}`, ...args]);

  it('gives a held set partition 0 and ends its gate, so a pending template change rolls without rollguard', async () => {
    const gated = statefulSet('gated', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' }, annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE } });
    await apps.createNamespacedStatefulSet({ namespace: ns, body: gated });
    const plain = statefulSet('plain', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    plain.spec!.updateStrategy = { type: 'RollingUpdate', rollingUpdate: { partition: 1 } };
    await apps.createNamespacedStatefulSet({ namespace: ns, body: plain });
    await waitFor('gated held at partition = replicas and Ready', async () => {
      const s = await read('gated');
      return s.spec?.updateStrategy?.rollingUpdate?.partition === 2 && s.status?.readyReplicas === 2 ? s : undefined;
    });
    // a template change while held rolls nothing: the new revision waits on the partition
    await apps.patchNamespacedStatefulSet({ name: 'gated', namespace: ns, body: [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'registry.example/app:2' }] });
    // rollguard goes away (an uninstall): nobody would step it now
    await fixture.rollguard.kill();
    const held = await waitFor('the new revision observed and held', async () => {
      const s = await read('gated');
      return s.status?.observedGeneration === s.metadata?.generation && s.status?.updateRevision !== s.status?.currentRevision ? s : undefined;
    });
    expect(held.spec?.updateStrategy?.rollingUpdate?.partition).toBe(2);

    const dry = await release('--dry-run');
    expect(dry.stdout).toContain(`would release StatefulSet ${ns}/gated: partition 2 → 0`);
    expect((await read('gated')).spec?.updateStrategy?.rollingUpdate?.partition).toBe(2);

    const first = await release();
    expect(first.stdout).toContain(`released StatefulSet ${ns}/gated: partition 2 → 0, rollguard.io/rollout removed`);
    expect(first.stdout).toContain('1 health-gated StatefulSet(s) released');
    const released = await read('gated');
    expect(released.spec?.updateStrategy?.rollingUpdate?.partition).toBe(0);
    expect(released.metadata?.annotations?.[HEALTH_GATED_ANNOTATION]).toBeUndefined();
    // the StatefulSet controller rolls on its own now
    await waitFor('gated rolled to its new revision', async () => {
      const s = await read('gated');
      const st = s.status;
      return st?.updatedReplicas === 2 && st.readyReplicas === 2 && st.currentRevision === st.updateRevision ? true : undefined;
    }, { timeoutMs: 90_000 });
    // a set that was not health-gated keeps the partition its owner chose
    expect((await read('plain')).spec?.updateStrategy?.rollingUpdate?.partition).toBe(1);

    const again = await release();
    expect(again.stdout).toContain('0 health-gated StatefulSet(s) released');
  }, 180_000);

  it('refuses an unknown argument with a clear error', async () => {
    const failure = await release('--bogus').then(
      () => undefined,
      (err: { code?: number; stderr?: string }) => err,
    );
    expect(failure?.code).toBe(2);
    expect(failure?.stderr).toContain('unknown or incomplete argument "--bogus"');
  });
});
