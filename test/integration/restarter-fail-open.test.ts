import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { waitFor, waitUntil } from '../env/wait.js';

// failurePolicy: Ignore is the design: a webhook that cannot be reached never blocks anyone,
// and the reconcile loop annotates what the webhook missed.
describe('webhook registered but unreachable (fail-open)', () => {
  const { core, apps } = testCluster();
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'failopen', webhook: 'unreachable', args: ['--debounce=0s'] });
    ns = fixture.ns;
  });
  afterAll(async () => {
    await fixture?.teardown();
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  it('lets the create through, and the loop annotates the set within seconds', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    const set = statefulSet('web', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    const created = await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    expect(created.spec!.template.metadata?.annotations?.['configmap.rollguard.io/cfg']).toBeUndefined();
    const cm = await core.readNamespacedConfigMap({ name: 'cfg', namespace: ns });
    const annotated = await waitFor('the loop to annotate web', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace: ns });
      const v = s.spec!.template.metadata?.annotations?.['configmap.rollguard.io/cfg'];
      if (v) return s;
      throw new Error(`annotations ${JSON.stringify(s.spec!.template.metadata?.annotations)}`);
    }, { timeoutMs: 15_000 });
    expect(annotated.spec!.template.metadata!.annotations!['configmap.rollguard.io/cfg']).toBe(`${cm.metadata!.uid}/${cm.metadata!.resourceVersion}`);
    expect(annotated.metadata!.generation).toBe(2);
    // the Event is written after the patch it explains
    await waitUntil('a ReferencesAnnotated Event on web', async () => {
      const events = await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=web' });
      const reasons = events.items.map((e) => e.reason);
      return reasons.includes('ReferencesAnnotated') || `reasons: ${reasons.join(', ')}`;
    }, { timeoutMs: 10_000 });
  });
});
