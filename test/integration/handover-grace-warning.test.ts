import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { handoverSet } from '../env/handover-sets.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';

// What a user sees when a handover-enabled set's preStop cannot finish in its grace period:
// kubectl prints the webhook's warning, and the write goes through (a warning, never a denial).
describe('preStop budget warning of a handover-enabled set (kubectl apply, rollguard as a process)', () => {
  const { apps, kubeconfigPath } = testCluster();
  let fixture: RollguardFixture;
  let dir: string;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-grace-'));
    fixture = await startRollguardFixture({ name: 'handover-grace', webhook: 'registered' });
  });

  afterAll(async () => {
    await fixture?.teardown();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  function apply(body: V1StatefulSet): { status: number | null; stderr: string; stdout: string } {
    const file = path.join(dir, `${body.metadata!.name}.json`);
    fs.writeFileSync(file, JSON.stringify({ ...body, metadata: { ...body.metadata, namespace: fixture.ns } }));
    return spawnSync(path.join(controlPlaneBinaries(), 'kubectl'), ['apply', '-f', file, `--kubeconfig=${kubeconfigPath}`], { encoding: 'utf8', timeout: 30_000 });
  }

  const withPreStop = (body: V1StatefulSet, grace: number | undefined): V1StatefulSet => {
    const spec = body.spec!.template.spec!;
    if (grace !== undefined) spec.terminationGracePeriodSeconds = grace;
    spec.containers[0]!.lifecycle = { preStop: { exec: { command: ['/bin/sh', '-c', 'sleep 30'] } } };
    return body;
  };

  it('kubectl apply prints the warning and the set is stored; a grace period that fits, or a set without handover, prints none', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const created = apply(withPreStop(handoverSet('budget', { port: 8008 }), undefined));
    expect(created.status, created.stderr).toBe(0);
    expect(created.stdout).toContain('statefulset.apps/budget created');
    expect(created.stderr).toBe(
      'Warning: rollguard: container app: preStop sleeps 30s, terminationGracePeriodSeconds is 30s: the kubelet kills the container before it can shut down; make the grace period longer than the preStop plus the shutdown\n',
    );
    expect((await apps.readNamespacedStatefulSet({ name: 'budget', namespace: fixture.ns })).spec?.template.spec?.containers[0]?.lifecycle?.preStop).toBeDefined();

    const fixed = apply(withPreStop(handoverSet('budget', { port: 8008 }), 45));
    expect(fixed.status, fixed.stderr).toBe(0);
    expect(fixed.stdout).toContain('statefulset.apps/budget configured');
    expect(fixed.stderr).toBe('');

    const plain = handoverSet('plain', { port: 8008 });
    delete plain.metadata!.annotations!['rollguard.io/primary-selector'];
    const other = apply(withPreStop(plain, undefined));
    expect(other.status, other.stderr).toBe(0);
    expect(other.stderr).toBe('');
  });
});
