import { Watch, type V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, LAST_RESTART_ANNOTATION, annotationKey } from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { waitFor } from '../env/wait.js';

const { kc, core, apps } = testCluster();
const CM_KEY = annotationKey('ConfigMap', 'app-config');

/** Every version of one StatefulSet the API server stored after `resourceVersion`, in order. */
async function watchSet(namespace: string, name: string, resourceVersion: string): Promise<{ seen: V1StatefulSet[]; stop(): void }> {
  const seen: V1StatefulSet[] = [];
  const request = await new Watch(kc).watch(
    `/apis/apps/v1/namespaces/${namespace}/statefulsets`,
    { resourceVersion, fieldSelector: `metadata.name=${name}` },
    (type: string, obj: V1StatefulSet) => {
      if (type === 'MODIFIED') seen.push(obj);
    },
    () => undefined,
  );
  return { seen, stop: () => request.abort() };
}

describe('the workload annotations of one write', () => {
  let fixture: RollguardFixture;

  beforeAll(async () => {
    // no webhook: the loop writes the set's first annotations, to a set that has no annotation map
    fixture = await startRollguardFixture({ name: 'set-annotations', webhook: 'unreachable', args: ['--debounce=500ms', '--min-restart-interval=0'] });
  });
  afterAll(async () => fixture?.teardown());

  it('all land when the set had no annotation map: the digest record and the restart time beside the template bump', async () => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
    const { ns } = fixture;
    // a set restored from a backup, or replaced by a manifest that keeps the template's annotation but not the set's:
    // its template names an older version of the ConfigMap, and the set has no annotation map
    const old = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { level: 'info' } } });
    const oldVersion = `${old.metadata!.uid}/${old.metadata!.resourceVersion}`;
    const changed = await core.replaceNamespacedConfigMap({ name: 'app-config', namespace: ns, body: { ...old, data: { level: 'debug' } } });
    const set = statefulSet('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'app-config' } }];
    set.spec!.template.metadata = { ...set.spec!.template.metadata, annotations: { [CM_KEY]: oldVersion } };
    expect(set.metadata?.annotations).toBeUndefined();
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    const watch = await watchSet(ns, 'web', created.metadata!.resourceVersion!);
    try {
      const newVersion = `${changed.metadata!.uid}/${changed.metadata!.resourceVersion}`;
      const bumped = await waitFor('the loop to bump the template to the ConfigMap\'s current version', () =>
        watch.seen.find((s) => s.spec?.template.metadata?.annotations?.[CM_KEY] === newVersion));
      // one patch carries them all; before the fix each op added a whole map of its own and the last one won
      expect(Object.keys(bumped.metadata?.annotations ?? {})).toEqual(expect.arrayContaining([DIGESTS_ANNOTATION, LAST_RESTART_ANNOTATION]));
      expect(bumped.metadata?.generation).toBe(2);
    } finally {
      watch.stop();
    }
  });
});
