import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';

const KUTTL_TIMEOUT_MS = 240_000;

// The kuttl cases under test/kuttl, run by the real kubectl-kuttl against the test control plane
// with rollguard (webhook and loop) in front of one namespace that every case uses.
describe('kuttl cases', () => {
  const { kubeconfigPath } = testCluster();
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    // --compat stackable for the Stackable cases; rollguard's own label is honoured as well
    fixture = await startRollguardFixture({ name: 'kuttl', webhook: 'registered', compat: 'stackable', args: ['--debounce=1s'] });
    ns = fixture.ns;
  });
  afterAll(async () => {
    await fixture?.teardown();
  });

  it('pass with kubectl-kuttl', async () => {
    const kuttlDir = execFileSync('bash', ['src/dev/build-kuttl.sh'], { encoding: 'utf8' }).trim().split('\n').pop()!;
    const kubectlDir = controlPlaneBinaries();
    // kuttl writes a kubeconfig into its working folder: keep that out of the repo
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-kuttl-'));
    const child = spawn(
      path.join(kuttlDir, 'kubectl-kuttl'),
      ['test', path.resolve('test/kuttl'), '--config', path.resolve('test/kuttl/kuttl-test.yaml'), '--namespace', ns, '--parallel', '1', '--timeout', '60'],
      { cwd: work, env: { ...process.env, KUBECONFIG: kubeconfigPath, PATH: `${kubectlDir}:${process.env.PATH ?? ''}` } },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), KUTTL_TIMEOUT_MS);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    fs.writeFileSync(path.join(work, 'kuttl.log'), output);
    const summary = output.split('\n').filter((l) => /--- (PASS|FAIL)|^(PASS|FAIL|ok)/.test(l.trim())).join('\n');
    expect(code, `kubectl-kuttl exited ${code}; full output in ${path.join(work, 'kuttl.log')}\n${output.slice(-4000)}`).toBe(0);
    expect(summary).toMatch(/PASS: kuttl\/harness\/webhook-annotates-at-creation/);
    expect(summary).toMatch(/PASS: kuttl\/harness\/configmap-change-rolls/);
    expect(summary).toMatch(/PASS: kuttl\/harness\/created-before-configmap/);
    expect(summary).toMatch(/PASS: kuttl\/harness\/deployment-rolled-once/);
    expect(summary).toMatch(/PASS: kuttl\/harness\/stackable-created-after-configmaps/);
    expect(summary).toMatch(/PASS: kuttl\/harness\/stackable-created-before-configmaps/);
  }, KUTTL_TIMEOUT_MS + 10_000);
});
