import type { CoreV1Event, V1Container, V1PodSpec, V1StatefulSet, V1Volume } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import type { ObjectKind } from '../../src/restarter/references.js';
import { deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const { core, apps } = testCluster();
const DEBOUNCE_MS = 1_000;

const read = (namespace: string, name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace });
const encode = (v: string): string => Buffer.from(v).toString('base64');

/** The ConfigChanged Events of one set, oldest first. */
async function changeEvents(namespace: string, set: string): Promise<CoreV1Event[]> {
  const list = await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${set},reason=ConfigChanged` });
  return list.items;
}

/** The version the set's digest record names for `key`: what the leader has judged. */
function recordedVersion(set: V1StatefulSet, key: string): string | undefined {
  const raw = set.metadata?.annotations?.[DIGESTS_ANNOTATION];
  if (!raw) return undefined;
  return (JSON.parse(raw) as Record<string, { v: string }>)[key]?.v;
}

async function judged(ns: string, set: string, key: string, resourceVersion: string): Promise<V1StatefulSet> {
  return waitFor(`the digest record of ${key} on ${set} at ${resourceVersion}`, async () => {
    const s = await read(ns, set);
    return recordedVersion(s, key)?.endsWith(`/${resourceVersion}`) ? s : undefined;
  });
}

async function idle(proc: RollguardProcess): Promise<void> {
  await waitUntil(`${proc.name} idle`, async () => {
    const s = (await proc.status()) as { reconcile: { queued: number; in_flight: number } };
    return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
  });
}

/** One form of reference: the pod spec that reads object `name` (keys a, b, c), which key it reads, and which it does not. */
interface Form {
  name: string;
  kind: ObjectKind;
  spec(object: string): Partial<V1PodSpec>;
  /** the key whose change must roll, once, named in the Event */
  read: string;
  /** a key whose change must roll nothing; undefined: the object is read whole, every key rolls */
  unread?: string;
}

const keyRef = (kind: ObjectKind, name: string, key: string): NonNullable<V1Container['env']>[number] => ({
  name: `V_${key.toUpperCase()}`,
  valueFrom: kind === 'ConfigMap' ? { configMapKeyRef: { name, key } } : { secretKeyRef: { name, key } },
});
const container = (name: string, extra: Partial<V1Container>): V1Container => ({ name, image: 'registry.example/app:1', ...extra });
const items = (...keys: string[]): { key: string; path: string }[] => keys.map((key) => ({ key, path: key }));

const FORMS: Form[] = [
  { name: 'env-cm', kind: 'ConfigMap', read: 'a', unread: 'b', spec: (o) => ({ containers: [container('app', { env: [keyRef('ConfigMap', o, 'a')] })] }) },
  { name: 'env-secret', kind: 'Secret', read: 'a', unread: 'b', spec: (o) => ({ containers: [container('app', { env: [keyRef('Secret', o, 'a')] })] }) },
  {
    name: 'volume-items',
    kind: 'ConfigMap',
    read: 'b',
    unread: 'c',
    spec: (o) => ({ containers: [container('app', { volumeMounts: [{ name: 'v', mountPath: '/etc/app' }] })], volumes: [{ name: 'v', configMap: { name: o, items: items('b') } }] }),
  },
  {
    name: 'secret-items',
    kind: 'Secret',
    read: 'c',
    unread: 'a',
    spec: (o) => ({ containers: [container('app', { volumeMounts: [{ name: 'v', mountPath: '/etc/app' }] })], volumes: [{ name: 'v', secret: { secretName: o, items: items('c') } }] }),
  },
  {
    name: 'projected-items',
    kind: 'ConfigMap',
    read: 'a',
    unread: 'b',
    spec: (o) => {
      const volume: V1Volume = { name: 'v', projected: { sources: [{ configMap: { name: o, items: items('a') } }, { secret: { name: `${o}-other` } }] } };
      return { containers: [container('app', { volumeMounts: [{ name: 'v', mountPath: '/etc/app' }] })], volumes: [volume] };
    },
  },
  {
    name: 'two-containers',
    kind: 'ConfigMap',
    read: 'c',
    unread: 'b',
    spec: (o) => ({ containers: [container('one', { env: [keyRef('ConfigMap', o, 'a')] }), container('two', { volumeMounts: [{ name: 'v', mountPath: '/etc/app' }] })], volumes: [{ name: 'v', configMap: { name: o, items: items('c') } }] }),
  },
  { name: 'init-container', kind: 'Secret', read: 'a', unread: 'c', spec: (o) => ({ initContainers: [container('init', { env: [keyRef('Secret', o, 'a')] })], containers: [container('app', {})] }) },
  { name: 'env-from', kind: 'ConfigMap', read: 'c', spec: (o) => ({ containers: [container('app', { envFrom: [{ configMapRef: { name: o } }] })] }) },
  {
    name: 'volume-whole',
    kind: 'Secret',
    read: 'b',
    spec: (o) => ({ containers: [container('app', { volumeMounts: [{ name: 'v', mountPath: '/etc/app' }] })], volumes: [{ name: 'v', secret: { secretName: o } }] }),
  },
];

describe('only the keys a pod reads roll it', () => {
  let fixture: RollguardFixture;
  let ns: string;

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'readkeys', webhook: 'registered', args: [`--debounce=${DEBOUNCE_MS}ms`, '--min-restart-interval=0s', '--log-level=debug'] });
    ns = fixture.ns;
  });
  afterAll(async () => {
    await fixture?.teardown();
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard]);
  });

  /** Creates the object (keys a, b, c) and a set that reads it in `form`'s way; returns its first resourceVersion once judged. */
  async function setUp(form: Form): Promise<{ object: string; key: string; rv0: string }> {
    const object = `${form.name}-data`;
    const data = { a: '1', b: '2', c: '3' };
    const created =
      form.kind === 'ConfigMap'
        ? await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: object }, data } })
        : await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: object }, stringData: data } });
    const set = statefulSet(form.name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec = { ...set.spec!.template.spec!, ...form.spec(object) };
    await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    const key = annotationKey(form.kind, object);
    const rv0 = created.metadata!.resourceVersion!;
    const admitted = await judged(ns, form.name, key, rv0);
    expect(admitted.metadata?.generation).toBe(1);
    expect(admitted.spec?.template.metadata?.annotations?.[key]).toMatch(new RegExp(`/${rv0}$`));
    return { object, key, rv0 };
  }

  async function change(kind: ObjectKind, object: string, dataKey: string, value: string): Promise<string> {
    const body = [{ op: 'replace', path: `/data/${dataKey}`, value: kind === 'Secret' ? encode(value) : value }];
    const changed = kind === 'ConfigMap' ? await core.patchNamespacedConfigMap({ name: object, namespace: ns, body }) : await core.patchNamespacedSecret({ name: object, namespace: ns, body });
    return changed.metadata!.resourceVersion!;
  }

  it.each(FORMS)('$name: a change to a key read rolls once, naming it; a change to another key rolls only when the object is read whole', async (form) => {
    const { object, key, rv0 } = await setUp(form);
    let generation = 1;
    let templateRv = rv0;

    if (form.unread !== undefined) {
      const rv1 = await change(form.kind, object, form.unread, 'unread-change');
      const s = await judged(ns, form.name, key, rv1);
      await idle(fixture.rollguard);
      const now = await read(ns, form.name);
      expect(now.metadata?.generation, 'a change to an unread key rolled the set').toBe(1);
      expect(now.spec?.template.metadata?.annotations?.[key]).toBe(s.spec?.template.metadata?.annotations?.[key]);
      expect(now.spec?.template.metadata?.annotations?.[key]).toMatch(new RegExp(`/${rv0}$`));
      expect(await changeEvents(ns, form.name)).toEqual([]);
      expect(
        fixture.rollguard
          .logLines()
          .some((l) => l.level === 'debug' && String(l.msg).includes(`${form.kind} ${object} changed key ${form.unread}`) && String(l.msg).includes('no restart')),
        'the debug line of the unread change',
      ).toBe(true);
    } else {
      // read whole: a key no named read takes rolls all the same
      const other = ['a', 'b', 'c'].find((k) => k !== form.read)!;
      const rv1 = await change(form.kind, object, other, 'whole-change');
      await waitFor('the whole-read change rolled', async () => ((await read(ns, form.name)).spec?.template.metadata?.annotations?.[key]?.endsWith(`/${rv1}`) ? true : undefined));
      generation += 1;
      const event = await waitFor('its Event', async () => (await changeEvents(ns, form.name)).find((e) => e.message?.includes(rv1)));
      expect(event.message).toBe(`${form.kind} ${object}: data changed (key ${other}), resourceVersion ${templateRv} → ${rv1}`);
      templateRv = rv1;
    }

    const rv2 = await change(form.kind, object, form.read, 'read-change');
    await waitFor('the read key rolled', async () => ((await read(ns, form.name)).spec?.template.metadata?.annotations?.[key]?.endsWith(`/${rv2}`) ? true : undefined));
    generation += 1;
    const event = await waitFor('its Event', async () => (await changeEvents(ns, form.name)).find((e) => e.message?.includes(rv2)));
    expect(event.message).toBe(`${form.kind} ${object}: data changed (key ${form.read}), resourceVersion ${templateRv} → ${rv2}`);
    await idle(fixture.rollguard);
    const after = await read(ns, form.name);
    expect(after.metadata?.generation).toBe(generation);
    expect((await changeEvents(ns, form.name)).length).toBe(generation - 1);
  });

  it('the webhook agrees: an owner\'s change after an unread change keeps the version; one that starts reading the changed key takes the new one in the same rollout', async () => {
    const form = FORMS[0]!;
    const set = 'owner-edit';
    const { object, key, rv0 } = await setUp({ ...form, name: set });
    const rv1 = await change('ConfigMap', object, 'b', 'unread-change');
    await judged(ns, set, key, rv1);
    await idle(fixture.rollguard);

    // an image change: a rollout of the owner's, with the template still naming rv0 (its read key a is rv0's)
    await apps.patchNamespacedStatefulSet({ name: set, namespace: ns, body: [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'registry.example/app:2' }] });
    let now = await read(ns, set);
    expect(now.metadata?.generation).toBe(2);
    expect(now.spec?.template.metadata?.annotations?.[key]).toMatch(new RegExp(`/${rv0}$`));
    expect(now.metadata?.annotations?.['rollguard.io/restart-reason']).toBeUndefined();

    // now the template reads b too: the record speaks only for a, so the admission takes rv1 with the owner's change
    await apps.patchNamespacedStatefulSet({
      name: set,
      namespace: ns,
      body: [{ op: 'add', path: '/spec/template/spec/containers/0/env/-', value: keyRef('ConfigMap', object, 'b') }],
    });
    now = await read(ns, set);
    expect(now.metadata?.generation).toBe(3);
    expect(now.spec?.template.metadata?.annotations?.[key]).toMatch(new RegExp(`/${rv1}$`));
    const told = await waitFor('the admission bump told', async () => (await changeEvents(ns, set)).find((e) => e.message?.includes('applied at admission')));
    expect(told.message).toContain(`resourceVersion ${rv0} → ${rv1}`);
    await idle(fixture.rollguard);
    expect((await read(ns, set)).metadata?.generation).toBe(3);
  });

  it('a Deployment: its first bump rolls (no record before its first template patch); then a change to an unread key rolls nothing, and one to the read key rolls once, naming it alone', async () => {
    const name = 'deploy-env';
    const object = `${name}-data`;
    const created = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: object }, data: { a: '1', b: '2' } } });
    const d = deployment(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    d.spec!.template.spec!.containers[0]!.env = [keyRef('ConfigMap', object, 'a')];
    await apps.createNamespacedDeployment({ namespace: ns, body: d });
    const key = annotationKey('ConfigMap', object);
    const readDeployment = () => apps.readNamespacedDeployment({ name, namespace: ns });
    const templateAt = async (rv: string): Promise<true | undefined> => ((await readDeployment()).spec?.template.metadata?.annotations?.[key]?.endsWith(`/${rv}`) ? true : undefined);
    expect(await templateAt(created.metadata!.resourceVersion!)).toBe(true);

    const rv1 = await change('ConfigMap', object, 'b', 'first');
    await waitFor('the first bump rolled (no record yet)', () => templateAt(rv1));
    expect((await readDeployment()).metadata?.generation).toBe(2);

    const rv2 = await change('ConfigMap', object, 'b', 'second');
    await waitUntil('the unread change judged', () =>
      fixture.rollguard.logLines().some((l) => l.level === 'debug' && String(l.msg).includes(`ConfigMap ${object} changed key b (`) && String(l.msg).includes(`/${rv2}`)) || 'no debug line yet',
    );
    await idle(fixture.rollguard);
    expect((await readDeployment()).metadata?.generation).toBe(2);
    expect(await templateAt(rv1)).toBe(true);

    const rv3 = await change('ConfigMap', object, 'a', 'third');
    await waitFor('the read key rolled', () => templateAt(rv3));
    const event = await waitFor('its Event', async () => (await changeEvents(ns, name)).find((e) => e.message?.includes(rv3)));
    expect(event.message).toBe(`ConfigMap ${object}: data changed (key a), resourceVersion ${rv1} → ${rv3}`);
    await idle(fixture.rollguard);
    expect((await readDeployment()).metadata?.generation).toBe(3);
  });
});
