import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor } from '../env/wait.js';

const { core } = testCluster();
const RELEASES = 30;

type Status = { caches: Record<string, { synced: boolean; objects: number }> };

describe("Helm's release Secrets are not watched", () => {
  let fixture: RollguardFixture;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'helm-secrets', webhook: 'unreachable' });
  });
  afterAll(async () => fixture?.teardown());

  it('the Secret cache holds the Secrets a pod may read, and none of the releases', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const { ns } = fixture;
    // as `helm upgrade` leaves them: one Secret per revision, type helm.sh/release.v1
    for (let revision = 1; revision <= RELEASES; revision++) {
      await core.createNamespacedSecret({
        namespace: ns,
        body: { metadata: { name: `sh.helm.release.v1.app.v${revision}`, labels: { owner: 'helm', name: 'app', version: String(revision) } }, type: 'helm.sh/release.v1', data: { release: Buffer.from(`revision ${revision}`).toString('base64') } },
      });
    }
    // created after the releases: once the cache shows these, it has seen every event before them
    await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'db-password' }, type: 'Opaque', stringData: { password: 'p' } } });
    await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'tls' }, type: 'kubernetes.io/tls', stringData: { 'tls.crt': 'c', 'tls.key': 'k' } } });
    const cache = await waitFor('the Secret cache to see the two Secrets made after the releases', async () => {
      const s = ((await fixture.rollguard.status()) as Status).caches.Secret;
      return s?.synced && s.objects >= 2 ? s : undefined;
    });
    expect(cache.objects).toBe(2);
    const all = await core.listNamespacedSecret({ namespace: ns });
    expect(all.items.length).toBeGreaterThanOrEqual(RELEASES + 2);
  });
});
