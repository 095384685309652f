import https from 'node:https';
import type { CoreV1Event, V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure, startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';

const { core, apps, kubeconfigPath } = testCluster();

// values a leak would show: searched for in every log line, Event and annotation at the end
const SECRET_VALUE = 'pin-4711-s3cr3t';
const SWAPPED_VALUE = 'pin-0815-sw4pped';
const NEW_SECRET_VALUE = 'pin-2024-n3w';
const CM_KEY = annotationKey('ConfigMap', 'app-config');
const SECRET_KEY = annotationKey('Secret', 'app-secret');
const DEBOUNCE_MS = 3_000;

const read = (namespace: string, name: string): Promise<V1StatefulSet> => apps.readNamespacedStatefulSet({ name, namespace });

async function events(namespace: string, reason?: string): Promise<CoreV1Event[]> {
  const list = await core.listNamespacedEvent({ namespace, ...(reason ? { fieldSelector: `reason=${reason}` } : {}) });
  return list.items;
}

/** The version the set's digest record names for `key`: what the leader has judged. */
function recordedVersion(set: V1StatefulSet, key: string): string | undefined {
  const raw = set.metadata?.annotations?.[DIGESTS_ANNOTATION];
  if (!raw) return undefined;
  return (JSON.parse(raw) as Record<string, { v: string }>)[key]?.v;
}

async function judged(ns: string, key: string, resourceVersion: string): Promise<V1StatefulSet> {
  return waitFor(`the digest record of ${key} at ${resourceVersion}`, async () => {
    const s = await read(ns, 'web');
    return recordedVersion(s, key)?.endsWith(`/${resourceVersion}`) ? s : undefined;
  });
}

async function idle(proc: RollguardProcess): Promise<void> {
  await waitUntil(`${proc.name} idle`, async () => {
    const s = (await proc.status()) as { reconcile: { queued: number; in_flight: number } };
    return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
  });
}

/** One AdmissionReview straight to a replica's webhook; the JSON Patch it answers. */
function admit(port: number, request: Record<string, unknown>): Promise<{ op: string; path: string; value?: unknown }[]> {
  const body = JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request });
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port, path: '/mutate', method: 'POST', rejectUnauthorized: false, headers: { 'content-type': 'application/json' }, agent: false },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          const patch = (JSON.parse(text) as { response?: { patch?: string } }).response?.patch;
          resolve(patch ? (JSON.parse(Buffer.from(patch, 'base64').toString('utf8')) as never) : []);
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('a rollout means the data the pods read changed', () => {
  let fixture: RollguardFixture;
  let ns: string;
  const others: RollguardProcess[] = [];

  beforeAll(async () => {
    fixture = await startRollguardFixture({ name: 'digest', webhook: 'registered', args: [`--debounce=${DEBOUNCE_MS}ms`, '--log-level=debug'] });
    ns = fixture.ns;
  });
  afterAll(async () => {
    for (const p of others) await p.kill();
    await fixture?.teardown();
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure([fixture.rollguard, ...others]);
  });

  it('metadata-only changes roll nothing; data, binaryData changes roll once naming the keys; a revert within the debounce rolls nothing', async () => {
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'app-config' }, data: { a: '1', b: '2', c: '3' } } });
    await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'app-secret' }, stringData: { password: SECRET_VALUE } } });
    const set = statefulSet('web', { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'app-config' } }, { secretRef: { name: 'app-secret' } }];
    await apps.createNamespacedStatefulSet({ namespace: ns, body: set });
    const cm0 = (await core.readNamespacedConfigMap({ name: 'app-config', namespace: ns })).metadata!.resourceVersion!;
    await judged(ns, CM_KEY, cm0);

    // a label, then an annotation, on each: GitOps stamps, helm's chart label, kubectl annotate
    for (const [path, value] of [
      ['/metadata/labels', { 'app.kubernetes.io/version': '2' }],
      ['/metadata/annotations', { 'argocd.argoproj.io/tracking-id': 'x' }],
    ] as const) {
      const cm = await core.patchNamespacedConfigMap({ name: 'app-config', namespace: ns, body: [{ op: 'add', path, value }] });
      const sec = await core.patchNamespacedSecret({ name: 'app-secret', namespace: ns, body: [{ op: 'add', path, value }] });
      await judged(ns, CM_KEY, cm.metadata!.resourceVersion!);
      await judged(ns, SECRET_KEY, sec.metadata!.resourceVersion!);
    }
    let now = await read(ns, 'web');
    expect(now.metadata?.generation).toBe(1);
    expect(now.spec?.template.metadata?.annotations?.[CM_KEY]).toMatch(new RegExp(`/${cm0}$`));
    expect(await events(ns, 'ConfigChanged')).toEqual([]);
    expect(fixture.rollguard.logLines().some((l) => l.level === 'debug' && String(l.msg).includes('metadata only'))).toBe(true);

    // a data change: one rollout, and the Event names the keys, not the values
    const cm1 = await core.patchNamespacedConfigMap({
      name: 'app-config',
      namespace: ns,
      body: [
        { op: 'replace', path: '/data/a', value: '10' },
        { op: 'remove', path: '/data/b' },
      ],
    });
    const cm1rv = cm1.metadata!.resourceVersion!;
    now = await waitFor('the data change rolled', async () => {
      const s = await read(ns, 'web');
      return s.spec?.template.metadata?.annotations?.[CM_KEY]?.endsWith(`/${cm1rv}`) ? s : undefined;
    });
    expect(now.metadata?.generation).toBe(2);
    const changed = await waitFor('its Event', async () => (await events(ns, 'ConfigChanged')).find((e) => e.message?.includes(cm1rv)));
    expect(changed.message).toBe(`ConfigMap app-config: data changed (keys a, b), resourceVersion ${cm0} → ${cm1rv}`);

    // binaryData: one rollout
    const cm2 = await core.patchNamespacedConfigMap({ name: 'app-config', namespace: ns, body: [{ op: 'add', path: '/binaryData', value: { blob: Buffer.from([0, 1, 2]).toString('base64') } }] });
    const cm2rv = cm2.metadata!.resourceVersion!;
    now = await waitFor('the binaryData change rolled', async () => {
      const s = await read(ns, 'web');
      return s.spec?.template.metadata?.annotations?.[CM_KEY]?.endsWith(`/${cm2rv}`) ? s : undefined;
    });
    expect(now.metadata?.generation).toBe(3);
    await waitUntil('the binaryData Event', async () => (await events(ns, 'ConfigChanged')).some((e) => e.message?.includes('(key blob)')) || 'none yet');

    // a Secret change and its revert inside the debounce: same data, no rollout
    const encode = (v: string): string => Buffer.from(v).toString('base64');
    await core.patchNamespacedSecret({ name: 'app-secret', namespace: ns, body: [{ op: 'replace', path: '/data/password', value: encode(SWAPPED_VALUE) }] });
    const reverted = await core.patchNamespacedSecret({ name: 'app-secret', namespace: ns, body: [{ op: 'replace', path: '/data/password', value: encode(SECRET_VALUE) }] });
    await judged(ns, SECRET_KEY, reverted.metadata!.resourceVersion!);
    await idle(fixture.rollguard);
    expect((await read(ns, 'web')).metadata?.generation).toBe(3);

    // a real Secret change rolls, naming the key
    const sec = await core.patchNamespacedSecret({ name: 'app-secret', namespace: ns, body: [{ op: 'replace', path: '/data/password', value: encode(NEW_SECRET_VALUE) }] });
    const secRv = sec.metadata!.resourceVersion!;
    await waitFor('the Secret change rolled', async () => ((await read(ns, 'web')).spec?.template.metadata?.annotations?.[SECRET_KEY]?.endsWith(`/${secRv}`) ? true : undefined));
    await waitUntil('the Secret Event', async () => (await events(ns, 'ConfigChanged')).some((e) => e.message?.startsWith('Secret app-secret: data changed (key password)')) || 'none yet');
    expect((await read(ns, 'web')).metadata?.generation).toBe(4);
  });

  it('a second replica\'s webhook admits an owner\'s UPDATE after a metadata-only change with no bump', async () => {
    const second = await startRollguardProcess({
      name: 'digest-2',
      kubeconfigPath,
      args: [`--namespace=${fixture.own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', `--debounce=${DEBOUNCE_MS}ms`],
    });
    others.push(second);
    await second.waitReady();
    const cm = await core.patchNamespacedConfigMap({ name: 'app-config', namespace: ns, body: [{ op: 'add', path: '/metadata/labels/helm.sh~1chart', value: 'app-2.0.0' }] });
    const old = await judged(ns, CM_KEY, cm.metadata!.resourceVersion!);
    const owners = structuredClone(old);
    owners.spec!.template.spec!.containers[0]!.image = 'registry.example/app:2';
    const request = (object: V1StatefulSet, oldObject: V1StatefulSet): Record<string, unknown> => ({
      uid: 'owner-update',
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      operation: 'UPDATE',
      namespace: ns,
      name: 'web',
      object,
      oldObject,
      userInfo: { username: 'owner' },
    });
    const bumpsConfigMap = (ops: { path: string }[]): boolean => ops.some((op) => op.path.includes('configmap.rollguard.io'));
    expect(bumpsConfigMap(await admit(second.webhookPort, request(owners, old)))).toBe(false);
    // the same review without the record does bump: the replica's cache has the newer version
    const bare = (s: V1StatefulSet): V1StatefulSet => {
      const c = structuredClone(s);
      delete c.metadata!.annotations![DIGESTS_ANNOTATION];
      return c;
    };
    expect(bumpsConfigMap(await admit(second.webhookPort, request(bare(owners), bare(old))))).toBe(true);
  });

  it('rollguard restarted after a metadata-only change patches nothing', async () => {
    const cm = await core.patchNamespacedConfigMap({ name: 'app-config', namespace: ns, body: [{ op: 'add', path: '/metadata/labels/tier', value: 'gold' }] });
    const before = await judged(ns, CM_KEY, cm.metadata!.resourceVersion!);
    await idle(fixture.rollguard);
    for (const p of others.splice(0)) await p.kill();
    await fixture.rollguard.kill();
    const again = await startRollguardProcess({
      name: 'digest-restarted',
      kubeconfigPath,
      args: [`--namespace=${fixture.own}`, `--watch-namespaces=${ns}`, '--webhook-configuration=', `--debounce=${DEBOUNCE_MS}ms`, '--log-level=debug'],
    });
    others.push(again);
    await again.waitReady();
    // leading, and its first full pass done
    await waitUntil('the restarted replica leads', async () => ((await again.status()) as { leader: { leader: boolean } }).leader.leader || 'not yet');
    await idle(again);
    const metrics = await (await fetch(`${again.adminUrl}/metrics`)).text();
    expect(metrics.split('\n').filter((l) => l.startsWith('rollguard_template_patches_total{'))).toEqual([]);
    // what rollguard writes, not the resourceVersion: the StatefulSet controller's status writes move that too
    const written = (s: V1StatefulSet): unknown => ({ generation: s.metadata?.generation, annotations: s.metadata?.annotations, template: s.spec?.template });
    expect(written(await read(ns, 'web'))).toEqual(written(before));
  });

  it('no Secret value appears in any log line, Event or annotation', async () => {
    const values = [SECRET_VALUE, SWAPPED_VALUE, NEW_SECRET_VALUE].flatMap((v) => [v, Buffer.from(v).toString('base64')]);
    const fs = await import('node:fs');
    const logs = [fixture.rollguard, ...others].map((p) => fs.readFileSync(p.logFile, 'utf8')).join('\n');
    const texts = [logs, JSON.stringify(await events(ns)), JSON.stringify((await read(ns, 'web')).metadata), JSON.stringify((await read(ns, 'web')).spec?.template.metadata)];
    for (const v of values) for (const t of texts) expect(t.includes(v), `"${v}" leaked`).toBe(false);
  });
});
