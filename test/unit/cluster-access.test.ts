import fs from 'node:fs';
import http from 'node:http';
import type https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inClusterAccess, loadClusterAccess, parseKubeconfig, ClusterAccess } from '../../src/kube/cluster-access.js';
import { KubeApiError, KubeClient, USER_AGENT, microTime, type KubeAccess } from '../../src/kube/kube-client.js';
import { customObjects } from '../../src/kube/api-clients.js';
import { isConflict, isOutcomeUnknown, statusBody, statusCode } from '../../src/kube/api-status.js';
import { PooledKubeConfig } from '../../src/kube/kubeconfig.js';

const b64 = (s: string): string => Buffer.from(s).toString('base64');
const tmp = (): string => fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-access-'));

function kubeconfig(user: Record<string, unknown>, cluster: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:6443', 'certificate-authority-data': b64('ca-pem'), ...cluster } }],
    users: [{ name: 'u', user }],
    contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
    'current-context': 'x',
  });
}

async function optionsOf(access: KubeAccess): Promise<https.RequestOptions> {
  const opts: https.RequestOptions = {};
  await access.applyToHTTPSOptions(opts);
  return opts;
}

const authorization = async (access: KubeAccess): Promise<unknown> => ((await optionsOf(access)).headers as Record<string, unknown> | undefined)?.Authorization;

describe('ClusterAccess: rollguard reading a kubeconfig without client-node', () => {
  it('reads a JSON kubeconfig with a client certificate: CA, certificate and key on each request', async () => {
    const access = parseKubeconfig(kubeconfig({ 'client-certificate-data': b64('cert-pem'), 'client-key-data': b64('key-pem') }), '/x/config')!;
    expect(access).toBeInstanceOf(ClusterAccess);
    expect(access.getCurrentCluster().server).toBe('https://127.0.0.1:6443');
    const opts = await optionsOf(access);
    expect([String(opts.ca), String(opts.cert), String(opts.key)]).toEqual(['ca-pem', 'cert-pem', 'key-pem']);
    expect(opts.headers).toBeUndefined();
  });

  it('reads files relative to the kubeconfig, a token, basic credentials, insecure-skip-tls-verify and tls-server-name', async () => {
    const dir = tmp();
    fs.writeFileSync(path.join(dir, 'ca.crt'), 'ca-from-file');
    const withToken = parseKubeconfig(kubeconfig({ token: 'tok' }, { 'certificate-authority-data': undefined, 'certificate-authority': 'ca.crt', 'tls-server-name': 'api.local' }), path.join(dir, 'config'))!;
    const opts = await optionsOf(withToken);
    expect(String(opts.ca)).toBe('ca-from-file');
    expect(opts.servername).toBe('api.local');
    expect(await authorization(withToken)).toBe('Bearer tok');
    const basic = parseKubeconfig(kubeconfig({ username: 'admin', password: 'pw' }, { 'insecure-skip-tls-verify': true }), '/x/config')!;
    const basicOpts = await optionsOf(basic);
    expect(basicOpts.auth).toBe('admin:pw');
    expect(basicOpts.rejectUnauthorized).toBe(false);
  });

  it('re-reads a rotated token file on the next request', async () => {
    const dir = tmp();
    const tokenFile = path.join(dir, 'token');
    fs.writeFileSync(tokenFile, 'token-1\n');
    const access = parseKubeconfig(kubeconfig({ tokenFile: 'token' }), path.join(dir, 'config'))!;
    expect(await authorization(access)).toBe('Bearer token-1');
    // the kubelet swaps a projected token atomically: a new file renamed over the old one
    fs.writeFileSync(`${tokenFile}.new`, 'token-2\n');
    fs.renameSync(`${tokenFile}.new`, tokenFile);
    expect(await authorization(access)).toBe('Bearer token-2');
  });

  it('in a pod: the Service address and the ServiceAccount CA and token, the token re-read when the kubelet rotates it', async () => {
    const dir = tmp();
    fs.writeFileSync(path.join(dir, 'ca.crt'), 'cluster-ca');
    fs.writeFileSync(path.join(dir, 'token'), 'sa-token-1');
    expect(inClusterAccess(dir, {})).toBeUndefined();
    const access = inClusterAccess(dir, { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' })!;
    expect(access.getCurrentCluster().server).toBe('https://[fd00::1]:443');
    expect(String((await optionsOf(access)).ca)).toBe('cluster-ca');
    expect(await authorization(access)).toBe('Bearer sa-token-1');
    fs.writeFileSync(path.join(dir, 'token'), 'sa-token-2');
    expect(await authorization(access)).toBe('Bearer sa-token-2');
  });

  it('leaves to client-node what it does not read: YAML, exec plugins, auth providers, proxies', async () => {
    expect(parseKubeconfig('apiVersion: v1\nkind: Config\n', '/x/config')).toBeUndefined();
    expect(parseKubeconfig(kubeconfig({ exec: { command: 'aws' } }), '/x/config')).toBeUndefined();
    expect(parseKubeconfig(kubeconfig({ 'auth-provider': { name: 'oidc' } }), '/x/config')).toBeUndefined();
    expect(parseKubeconfig(kubeconfig({ token: 't' }, { 'proxy-url': 'http://proxy:3128' }), '/x/config')).toBeUndefined();
    const dir = tmp();
    const file = path.join(dir, 'config');
    fs.writeFileSync(
      file,
      'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]\nusers: [{name: u, user: {token: yaml-token}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
    );
    const access = await loadClusterAccess(file);
    expect(access).toBeInstanceOf(PooledKubeConfig);
    expect(await authorization(access)).toBe('Bearer yaml-token');
    fs.writeFileSync(file, kubeconfig({ token: 'json-token' }));
    expect(await loadClusterAccess(file)).toBeInstanceOf(ClusterAccess);
  });
});

describe('KubeClient: rollguard calling the API server', () => {
  const seen: { method?: string; url?: string; type?: string; auth?: string; agent?: string; body: string }[] = [];
  let server: http.Server;
  let access: KubeAccess;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, type: req.headers['content-type'], auth: req.headers.authorization, agent: req.headers['user-agent'], body });
        if (req.url?.endsWith('/conflict')) {
          res.writeHead(409, { 'Content-Type': 'application/json' }).end(JSON.stringify({ kind: 'Status', reason: 'Conflict', message: 'the object has been modified', code: 409 }));
        } else if (req.url?.endsWith('/slow')) {
          setTimeout(() => res.end('{}'), 2_000);
        } else res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ ok: true, echo: body ? (JSON.parse(body) as unknown) : null }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    access = { getCurrentCluster: () => ({ server: `http://127.0.0.1:${port}` }), applyToHTTPSOptions: async (opts) => void (opts.headers = { Authorization: 'Bearer t' }) };
  });
  afterAll(() => server.close());

  it('sends JSON with the credentials of the request and parses the answer', async () => {
    const client = new KubeClient(access);
    const answer = await client.call<{ ok: boolean; echo: unknown }>('PATCH', '/api/v1/namespaces/a/pods/p', { body: [{ op: 'add', path: '/x', value: 1 }], contentType: 'application/json-patch+json' });
    expect(answer).toEqual({ ok: true, echo: [{ op: 'add', path: '/x', value: 1 }] });
    expect(seen.at(-1)).toMatchObject({ method: 'PATCH', url: '/api/v1/namespaces/a/pods/p', type: 'application/json-patch+json', auth: 'Bearer t' });
  });

  it('calls itself rollguard/<version>, the field manager the API server then names its writes by', async () => {
    await new KubeClient(access).call('GET', '/api/v1/namespaces/a/pods/p');
    expect(USER_AGENT).toMatch(/^rollguard\//);
    expect(seen.at(-1)?.agent).toBe(USER_AGENT);
  });

  it("patches a Rollout at argoproj.io/v1alpha1 with a JSON Patch, as client-node's CustomObjectsApi does", async () => {
    const body = [{ op: 'add' as const, path: '/metadata/annotations/a', value: 'b' }];
    await customObjects(access).patchNamespacedCustomObject({ group: 'argoproj.io', version: 'v1alpha1', plural: 'rollouts', namespace: 'a', name: 'web', body });
    expect(seen.at(-1)).toMatchObject({ method: 'PATCH', url: '/apis/argoproj.io/v1alpha1/namespaces/a/rollouts/web', type: 'application/json-patch+json', agent: USER_AGENT });
    expect(JSON.parse(seen.at(-1)!.body)).toEqual(body);
  });

  it('fails with the status code and Status where client-node has them, so api-status.ts reads it alike', async () => {
    const err = await new KubeClient(access).call('PUT', '/x/conflict', { body: {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KubeApiError);
    expect(statusCode(err)).toBe(409);
    expect(statusBody(err)).toMatchObject({ reason: 'Conflict' });
    expect(isConflict(err)).toBe(true);
    expect((err as Error).message).toBe('PUT /x/conflict: HTTP 409 Conflict: the object has been modified');
  });

  it('gives up on an answer that does not come within the deadline: outcome unknown', async () => {
    const err = await new KubeClient(access).call('GET', '/x/slow', { timeoutMs: 200 }).catch((e: unknown) => e);
    expect((err as Error).message).toBe('GET /x/slow: no answer within 200 ms');
    expect(isOutcomeUnknown(err)).toBe(true);
  });

  it('writes a MicroTime with six fractional digits', () => {
    expect(microTime(Date.UTC(2026, 11, 3, 14, 0, 0, 123))).toBe('2026-12-03T14:00:00.123000Z');
  });
});
