import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { namespaceSettled, printRealClusterLogsOnFailure, realCluster } from './real-cluster.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = path.join(ROOT, 'deploy/helm/rollguard');
const RELEASE = 'rollguard';
const RELEASE_NS = 'rollguard-system';
const CASES_NS = 'e2e-kuttl';
const KUTTL_TIMEOUT_MS = 420_000;

// test/kuttl, unmodified, against the chart installed on the real node: the cases' pods run as
// real containers. compat=stackable for the Stackable cases (rollguard's own label still counts).
describe('the kuttl cases against the installed release', () => {
  const cluster = realCluster();
  beforeEach(() => printRealClusterLogsOnFailure());

  beforeAll(async () => {
    await namespaceSettled(cluster, RELEASE_NS);
    await cluster.helm([
      'install', RELEASE, CHART, '--namespace', RELEASE_NS, '--create-namespace', '--wait', '--timeout', '5m',
      '--set', 'compat=stackable', '--set', 'extraArgs={--debounce=1s}',
    ]);
    await namespaceSettled(cluster, CASES_NS);
    await cluster.kubectl(['create', 'namespace', CASES_NS]);
  });

  afterAll(async () => {
    await cluster.helm(['uninstall', RELEASE, '--namespace', RELEASE_NS, '--wait']).catch(() => undefined);
    await cluster.kubectl(['delete', 'namespace', CASES_NS, '--ignore-not-found', '--wait=false']).catch(() => undefined);
  });

  it('pass with kubectl-kuttl', async () => {
    const kuttlDir = execFileSync('bash', [path.join(ROOT, 'src/dev/build-kuttl.sh')], { encoding: 'utf8' }).trim().split('\n').pop()!;
    // kuttl writes a kubeconfig into its working folder: keep that out of the repo
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-e2e-kuttl-'));
    const child = spawn(
      path.join(kuttlDir, 'kubectl-kuttl'),
      ['test', path.join(ROOT, 'test/kuttl'), '--config', path.join(ROOT, 'test/kuttl/kuttl-test.yaml'), '--namespace', CASES_NS, '--parallel', '1', '--timeout', '120'],
      { cwd: work, env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, PATH: `${path.dirname(inject('realKubectlPath'))}:${process.env.PATH ?? ''}` } },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), KUTTL_TIMEOUT_MS);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    fs.writeFileSync(path.join(work, 'kuttl.log'), output);
    expect(code, `kubectl-kuttl exited ${code}; full output in ${path.join(work, 'kuttl.log')}\n${output.slice(-4000)}`).toBe(0);
    // every case under test/kuttl passed, by name
    const cases = fs.readdirSync(path.join(ROOT, 'test/kuttl'), { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);
    expect(cases.length).toBeGreaterThan(0);
    for (const name of cases) expect(output, name).toMatch(new RegExp(`--- PASS: kuttl/harness/${name} `));
  }, KUTTL_TIMEOUT_MS + 10_000);
});
