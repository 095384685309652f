import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { statusCode } from '../../src/kube/api-status.js';
import { ClusterAccess, loadClusterAccess } from '../../src/kube/cluster-access.js';
import { ownServiceAccount } from '../../src/kube/identity.js';
import { createNamespace, printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';

// A projected ServiceAccount token is rotated by the kubelet (a new file swapped in): serve's own
// kubeconfig reading (cluster-access.ts) reads the token file again on every request, so the call
// after a rotation carries the new token, against the real API server.
describe('a rotated ServiceAccount token', () => {
  const { core, kc } = testCluster();
  let ns: string;
  let dir: string;

  beforeAll(async () => {
    ns = await createNamespace(core, 'token-rotation');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-token-'));
    await core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: 'rotating' } } });
  });
  afterAll(async () => {
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const token = async (): Promise<string> =>
    (await core.createNamespacedServiceAccountToken({ name: 'rotating', namespace: ns, body: { spec: { audiences: [], expirationSeconds: 600 } } })).status!.token!;

  /** as the kubelet writes it: a new file, renamed over the old one */
  const rotate = (value: string): void => {
    fs.writeFileSync(path.join(dir, 'token.new'), value);
    fs.renameSync(path.join(dir, 'token.new'), path.join(dir, 'token'));
  };

  it('is read again by the next request: the old one refused, the new one known as the same ServiceAccount', async () => {
    printControlPlaneLogsOnFailure();
    rotate(await token());
    const cluster = kc.getCurrentCluster()!;
    const kubeconfigPath = path.join(dir, 'kubeconfig');
    fs.writeFileSync(
      kubeconfigPath,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'test', cluster: { server: cluster.server, 'certificate-authority-data': cluster.caData ?? fs.readFileSync(cluster.caFile!).toString('base64') } }],
        users: [{ name: 'sa', user: { tokenFile: 'token' } }],
        contexts: [{ name: 'sa', context: { cluster: 'test', user: 'sa' } }],
        'current-context': 'sa',
      }),
    );
    const access = await loadClusterAccess(kubeconfigPath);
    expect(access).toBeInstanceOf(ClusterAccess);
    const me = `system:serviceaccount:${ns}:rotating`;
    expect(await ownServiceAccount(access)).toBe(me);

    rotate('not-a-token');
    expect(statusCode(await ownServiceAccount(access).catch((err: unknown) => err)), 'the file is read again: a bad token is refused at once').toBe(401);

    rotate(await token());
    expect(await ownServiceAccount(access)).toBe(me);
  });
});
