import type { CoreV1Event, V1Container, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const { core, apps } = testCluster();

const read = (namespace: string, name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace });

async function events(namespace: string, set: string, reason: string): Promise<CoreV1Event[]> {
  return (await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${set},reason=${reason}` })).items;
}

function recordedVersion(set: V1StatefulSet, key: string): string | undefined {
  const raw = set.metadata?.annotations?.[DIGESTS_ANNOTATION];
  return raw ? (JSON.parse(raw) as Record<string, { v: string }>)[key]?.v : undefined;
}

async function idle(proc: RollguardProcess): Promise<void> {
  await waitUntil(`${proc.name} idle`, async () => {
    const s = (await proc.status()) as { reconcile: { queued: number; in_flight: number } };
    return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
  });
}

const app = (extra: Partial<V1Container>): V1Container => ({ name: 'app', image: 'registry.example/app:1', ...extra });

describe('referenced objects and keys deleted and re-created', () => {
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'deleted', webhook: 'registered', args: ['--debounce=500ms', '--min-restart-interval=0s', '--log-level=debug'] });
    ns = fixture.ns;
  });
  afterAll(async () => {
    await fixture?.teardown();
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  /** Waits until the set either rolled or was warned about; returns the Warning, or undefined when it rolled. */
  async function rolledOrWarned(name: string): Promise<CoreV1Event | undefined> {
    const seen = await waitFor(`${name} rolled or warned`, async () => {
      const warned = (await events(ns, name, 'ReferenceMissing'))[0];
      if (warned) return { warned };
      return ((await read(ns, name)).metadata?.generation ?? 1) > 1 ? { warned: undefined } : undefined;
    });
    return seen.warned;
  }

  /** A ConfigMap (keys a, b) and a set whose container is `container`; returns the key and the first resourceVersion, once judged. */
  async function setUp(name: string, container: V1Container): Promise<{ object: string; key: string; rv0: string }> {
    const object = `${name}-data`;
    const created = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: object }, data: { a: '1', b: '2' } } });
    const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers = [container];
    await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    const key = annotationKey('ConfigMap', object);
    const rv0 = created.metadata!.resourceVersion!;
    await waitFor(`the digest record of ${name}`, async () => (recordedVersion(await read(ns, name), key)?.endsWith(`/${rv0}`) ? true : undefined));
    return { object, key, rv0 };
  }

  it('a required ConfigMap deleted rolls nothing, with a Warning; re-created with the same data it still rolls nothing, with a Normal Event', async () => {
    const name = 'required';
    const { object, key, rv0 } = await setUp(name, app({ envFrom: [{ configMapRef: { name: 'required-data' } }] }));
    await core.deleteNamespacedConfigMap({ name: object, namespace: ns });
    const warning = await rolledOrWarned(name);
    expect((await read(ns, name)).metadata?.generation, 'the deletion rolled the set into pods that cannot start').toBe(1);
    expect(warning?.type).toBe('Warning');
    expect(warning?.message).toContain(`ConfigMap ${object}`);
    expect(warning?.message).toContain('not restarted');
    await idle(fixture.rollguard);
    let now = await read(ns, name);
    expect(now.metadata?.generation, 'the deletion rolled the set into pods that cannot start').toBe(1);
    expect(now.spec?.template.metadata?.annotations?.[key]).toMatch(new RegExp(`/${rv0}$`));

    const again = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: object }, data: { a: '1', b: '2' } } });
    const rv1 = again.metadata!.resourceVersion!;
    const back = await waitFor('the Normal Event of its return', async () => (await events(ns, name, 'ReferenceRestored'))[0]);
    expect(back.type).toBe('Normal');
    expect(back.message).toContain(`ConfigMap ${object}`);
    await waitFor('the re-created object judged', async () => (recordedVersion(await read(ns, name), key)?.endsWith(`/${rv1}`) ? true : undefined));
    await idle(fixture.rollguard);
    now = await read(ns, name);
    expect(now.metadata?.generation, 're-creation with the same data rolled the set').toBe(1);
    expect(await events(ns, name, 'ConfigChanged')).toEqual([]);
  });

  it('a key deleted that a non-optional configMapKeyRef reads rolls nothing, with a Warning; the key back with its value rolls nothing', async () => {
    const name = 'required-key';
    const { object, key, rv0 } = await setUp(name, app({ env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'required-key-data', key: 'a' } } }] }));
    await core.patchNamespacedConfigMap({ name: object, namespace: ns, body: [{ op: 'remove', path: '/data/a' }] });
    const warning = await rolledOrWarned(name);
    expect((await read(ns, name)).metadata?.generation, 'the key deletion rolled the set into pods that cannot start').toBe(1);
    expect(warning?.type).toBe('Warning');
    expect(warning?.message).toContain(`ConfigMap ${object}`);
    expect(warning?.message).toContain('key a');
    await idle(fixture.rollguard);
    expect((await read(ns, name)).metadata?.generation, 'the key deletion rolled the set into pods that cannot start').toBe(1);
    expect((await read(ns, name)).spec?.template.metadata?.annotations?.[key]).toMatch(new RegExp(`/${rv0}$`));

    const restored = await core.patchNamespacedConfigMap({ name: object, namespace: ns, body: [{ op: 'add', path: '/data/a', value: '1' }] });
    await waitFor('the Normal Event of its return', async () => (await events(ns, name, 'ReferenceRestored'))[0]);
    await waitFor('the restored key judged', async () => (recordedVersion(await read(ns, name), key)?.endsWith(`/${restored.metadata!.resourceVersion!}`) ? true : undefined));
    await idle(fixture.rollguard);
    expect((await read(ns, name)).metadata?.generation).toBe(1);
    expect(await events(ns, name, 'ConfigChanged')).toEqual([]);
  });

  it('a Secret that a non-optional secretKeyRef reads, deleted: no rollout, a Warning naming it', async () => {
    const name = 'secret-ref';
    const object = `${name}-data`;
    const created = await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: object }, stringData: { a: '1' } } });
    const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers = [app({ env: [{ name: 'A', valueFrom: { secretKeyRef: { name: object, key: 'a' } } }] })];
    await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    const key = annotationKey('Secret', object);
    await waitFor('the digest record', async () => (recordedVersion(await read(ns, name), key)?.endsWith(`/${created.metadata!.resourceVersion!}`) ? true : undefined));
    await core.deleteNamespacedSecret({ name: object, namespace: ns });
    const warning = await rolledOrWarned(name);
    expect((await read(ns, name)).metadata?.generation, 'the deletion rolled the set into pods that cannot start').toBe(1);
    expect(warning?.message).toContain(`Secret ${object} is gone`);
  });

  it('the webhook agrees: an owner\'s template change while a required object is gone keeps its version', async () => {
    const name = 'owner-edit';
    const { object, key, rv0 } = await setUp(name, app({ env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'owner-edit-data', key: 'a' } } }] }));
    await core.deleteNamespacedConfigMap({ name: object, namespace: ns });
    await rolledOrWarned(name);
    await apps.patchNamespacedStatefulSet({ name, namespace: ns, body: [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'registry.example/app:2' }] });
    const now = await read(ns, name);
    expect(now.metadata?.generation).toBe(2);
    expect(now.spec?.template.metadata?.annotations?.[key], 'the admission wrote absent into the owner\'s change').toMatch(new RegExp(`/${rv0}$`));
    expect(now.metadata?.annotations?.['rollguard.io/restart-reason']).toBeUndefined();
    await idle(fixture.rollguard);
    expect((await read(ns, name)).metadata?.generation).toBe(2);
    expect(await events(ns, name, 'ConfigChanged')).toEqual([]);
  });

  it('optional: true: the pods start without the object, so its deletion rolls once, as documented', async () => {
    const name = 'optional';
    const { object, key } = await setUp(name, app({ envFrom: [{ configMapRef: { name: 'optional-data', optional: true } }] }));
    await core.deleteNamespacedConfigMap({ name: object, namespace: ns });
    await waitFor('the set rolled to absent', async () => ((await read(ns, name)).spec?.template.metadata?.annotations?.[key] === 'absent' ? true : undefined));
    await idle(fixture.rollguard);
    expect((await read(ns, name)).metadata?.generation).toBe(2);
    expect(await events(ns, name, 'ReferenceMissing')).toEqual([]);
  });
});

describe('a namespace being deleted', () => {
  let fixture: RollguardFixture;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'deleted-ns', webhook: 'registered', args: ['--debounce=200ms', '--min-restart-interval=0s'] });
  });
  afterAll(async () => {
    await fixture?.teardown();
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  it('its ConfigMaps disappear: no set that requires them is rolled on its way out', async () => {
    const ns = fixture.ns;
    const names = ['one', 'two', 'three'];
    for (const name of names) {
      await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: `${name}-data` }, data: { a: '1' } } });
      const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
      set.spec!.template.spec!.containers = [app({ envFrom: [{ configMapRef: { name: `${name}-data` } }] })];
      await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    }
    await idle(fixture.rollguard);
    await core.deleteNamespace({ name: ns });
    // until the sets are gone, none may show a second generation
    const seen = new Map<string, number>();
    await waitFor('the sets deleted with their namespace', async () => {
      const list = await apps.listNamespacedStatefulSet({ namespace: ns });
      for (const s of list.items) seen.set(s.metadata!.name!, Math.max(seen.get(s.metadata!.name!) ?? 0, s.metadata?.generation ?? 0));
      return list.items.length === 0 ? true : undefined;
    }, { intervalMs: 20, timeoutMs: 60_000 });
    for (const [name, generation] of seen) expect(generation, `${name} was rolled while its namespace was deleted`).toBe(1);
    const restarts = fixture.rollguard.logLines().filter((l) => String(l.msg).includes(' restarts: '));
    expect(restarts.map((l) => l.msg)).toEqual([]);
  });
});
