import https from 'node:https';
import { isDeepStrictEqual } from 'node:util';
import jsonpatch, { type Operation } from 'fast-json-patch';
import { BENCH_UID } from './static-versions.js';
import { review, reviewOf } from './review.js';

const cm = (name: string) => ({ name: `v-${name}`, configMap: { name } });
const secret = (name: string) => ({ name: `s-${name}`, secret: { secretName: name } });

function set(template: unknown, annotations?: Record<string, string>, namespace?: string): Record<string, unknown> {
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: 'db', ...(namespace ? { namespace } : {}), ...(annotations ? { annotations } : {}) },
    spec: { serviceName: 'db', selector: { matchLabels: { app: 'db' } }, template },
  };
}

function podSpec(volumes: unknown[]): Record<string, unknown> {
  return { containers: [{ name: 'app', image: 'app:1' }], volumes };
}

const current = `${BENCH_UID}/123456`;
const LONG_NAME = `a-very-long-configmap-name-${'x'.repeat(60)}`;

/**
 * CREATE reviews that walk every branch of the contract a CREATE meets: no template metadata,
 * stale, older and newer values, unreadable ones, opt-outs and frozen references, long names;
 * and writes the webhook does not patch. The UPDATE paths (the old object's values kept, the
 * loop's own writes, restart reasons) are rollguard's alone: the peer does not mirror them.
 */
function cases(): string[] {
  const uid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
  return [
    review(uid(1)),
    reviewOf(uid(2), set({ spec: podSpec([cm('a')]) })),
    reviewOf(uid(3), set({ metadata: { labels: { app: 'db' } }, spec: podSpec([cm('a'), secret('b')]) })),
    reviewOf(
      uid(4),
      set({
        metadata: {
          annotations: {
            keep: 'me',
            'configmap.rollguard.io/removed': current,
            'configmap.rollguard.io/same': current,
            'configmap.rollguard.io/older': `${BENCH_UID}/100`,
            'configmap.rollguard.io/newer': `${BENCH_UID}/999999`,
            'secret.rollguard.io/other-uid': 'ffffffff-0000-4000-8000-000000000000/999999',
            'secret.rollguard.io/weird': 'not-a-version',
          },
        },
        spec: podSpec([cm('same'), cm('older'), cm('newer'), secret('other-uid'), secret('weird')]),
      }),
    ),
    reviewOf(
      uid(5),
      set({ metadata: { annotations: {} }, spec: podSpec([cm('a'), cm('b'), cm('c'), secret('ignored-secret'), cm('gone-config'), secret('gone-secret')]) }, {
        'rollguard.io/ignore-configmaps': ' a, b ,,',
        'rollguard.io/ignore-secrets': 'nothing-here',
      }),
    ),
    reviewOf(uid(6), set({ spec: podSpec([cm(LONG_NAME), cm('dotted.name.v1'), secret(`${'9'.repeat(64)}`)]) })),
    reviewOf(uid(7), set({ metadata: { annotations: { 'configmap.rollguard.io/a': current } }, spec: podSpec([cm('a')]) })),
    reviewOf(uid(8), set({ spec: podSpec([cm('a')]) }), { operation: 'DELETE' }),
    reviewOf(uid(9), set({ spec: podSpec([cm('a')]) }), { kind: { group: 'apps', version: 'v1', kind: 'Deployment' } }),
    reviewOf(uid(10), set({ spec: podSpec([cm('a')]) }), { subResource: 'scale', operation: 'UPDATE' }),
    reviewOf(uid(11), set({ spec: podSpec([cm('a')]) }, undefined, 'prod'), { namespace: '' }),
    reviewOf(
      uid(12),
      set({
        spec: {
          initContainers: [{ name: 'init', envFrom: [{ secretRef: { name: 'init-secret' } }] }],
          containers: [{ name: 'app', env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'env-config', key: 'a' } } }] }],
          volumes: [{ name: 'p', projected: { sources: [{ configMap: { name: 'projected-config' } }, { secret: { name: 'projected-secret' } }] } }],
        },
      }),
    ),
    reviewOf(uid(13), set({ metadata: { annotations: { 'configmap.rollguard.io/gone': current } }, spec: podSpec([]) })),
    reviewOf(
      uid(14),
      set(
        {
          metadata: { annotations: { 'configmap.rollguard.io/gone-config': current, 'secret.rollguard.io/ignored-secret': 'x/1', 'configmap.rollguard.io/a': 'absent' } },
          spec: podSpec([cm('gone-config'), secret('ignored-secret'), cm('a'), secret('gone-secret')]),
        },
        { 'rollguard.io/frozen': 'ConfigMap/gone-config, Secret/ignored-secret' },
      ),
    ),
  ];
}

interface ReviewResponse {
  response?: { uid?: string; allowed?: boolean; patch?: string; patchType?: string };
}

function send(port: number, body: string): Promise<ReviewResponse> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port, path: '/mutate', method: 'POST', rejectUnauthorized: false, headers: { 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(text) as ReviewResponse) : reject(new Error(`port ${port}: HTTP ${res.statusCode}: ${text}`))));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The object as the patch leaves it; the submitted one when there is no patch. */
function patched(body: string, answer: ReviewResponse): unknown {
  const object = (JSON.parse(body) as { request: { object: unknown } }).request.object;
  const patch = answer.response?.patch;
  if (!patch) return object;
  const ops = JSON.parse(Buffer.from(patch, 'base64').toString('utf8')) as Operation[];
  return jsonpatch.applyPatch(object, ops, true, false).newDocument;
}

/**
 * Sends each case to both servers and compares the objects their patches produce (not the
 * operations: the peer diffs, rollguard writes operations). Throws naming the first that differs.
 */
export async function checkPatchesAgree(rollguardPort: number, peerPort: number): Promise<number> {
  const all = cases();
  for (const [i, body] of all.entries()) {
    const [rg, peer] = await Promise.all([send(rollguardPort, body), send(peerPort, body)]);
    const uid = (JSON.parse(body) as { request: { uid: string } }).request.uid;
    for (const [who, answer] of [['rollguard', rg], ['peer', peer]] as const) {
      if (answer.response?.allowed !== true || answer.response.uid !== uid) {
        throw new Error(`case ${i + 1}: ${who} did not allow review ${uid}: ${JSON.stringify(answer.response)}`);
      }
    }
    const [a, b] = [patched(body, rg), patched(body, peer)];
    if (!isDeepStrictEqual(a, b) || Boolean(rg.response?.patch) !== Boolean(peer.response?.patch)) {
      const annotations = (o: unknown) => JSON.stringify((o as { spec?: { template?: { metadata?: unknown } } }).spec?.template?.metadata);
      throw new Error(`case ${i + 1}: patched objects differ\n  rollguard: ${annotations(a)}\n  peer:      ${annotations(b)}`);
    }
  }
  return all.length;
}
