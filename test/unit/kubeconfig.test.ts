import type https from 'node:https';
import { HttpMethod, RequestContext } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { PooledKubeConfig } from '../../src/kube/kubeconfig.js';

const b64 = (s: string): string => Buffer.from(s).toString('base64');

function config(opts: { cert: string; token?: string; username?: string }, kc = new PooledKubeConfig()): PooledKubeConfig {
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:6443', caData: b64('ca') }],
    users: [{ name: 'u', certData: b64(opts.cert), keyData: b64('key'), token: opts.token, username: opts.username, password: opts.username ? 'pw' : undefined }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

async function call(kc: PooledKubeConfig): Promise<RequestContext> {
  const context = new RequestContext('https://127.0.0.1:6443/api/v1/namespaces', HttpMethod.GET);
  await kc.applySecurityAuthentication(context);
  return context;
}

describe('PooledKubeConfig', () => {
  it('gives every call with the same TLS identity the same connection pool, and each its credentials', async () => {
    const kc = config({ cert: 'cert-1', token: 'token-1' });
    const first = await call(kc);
    const second = await call(kc);
    expect(first.getDispatcher()).toBeDefined();
    expect(second.getDispatcher()).toBe(first.getDispatcher());
    expect(first.getHeaders().Authorization).toBe('Bearer token-1');
    expect(second.getHeaders().Authorization).toBe('Bearer token-1');
  });

  it('uses a new pool when the client certificate changes', async () => {
    const kc = config({ cert: 'cert-1' });
    const before = (await call(kc)).getDispatcher();
    config({ cert: 'cert-2' }, kc);
    const after = (await call(kc)).getDispatcher();
    expect(after).toBeDefined();
    expect(after).not.toBe(before);
  });

  it('sends basic credentials on reused pools too', async () => {
    const kc = config({ cert: 'cert-1', username: 'admin' });
    await call(kc);
    const reused = await call(kc);
    expect(reused.getHeaders().Authorization).toBe(`Basic ${b64('admin:pw')}`);
  });

  it('lends requests with a deadline one keep-alive agent per TLS identity, with idle sockets closed', async () => {
    const kc = config({ cert: 'cert-1', token: 'token-1' });
    const agent = async (): Promise<https.Agent | undefined> => {
      const opts: https.RequestOptions = {};
      await kc.applyToHTTPSOptions(opts);
      expect(opts.agent, 'applyToHTTPSOptions itself pools nothing: lists and watches are not lent one').not.toHaveProperty('keepAlive', true);
      return kc.keptAliveAgent(opts);
    };
    const first = await agent();
    expect(first).toBeDefined();
    expect(await agent()).toBe(first);
    expect((first as https.Agent & { keepAlive?: boolean }).keepAlive).toBe(true);
    expect(first!.options.timeout).toBe(4_000);
    config({ cert: 'cert-2' }, kc);
    expect(await agent()).not.toBe(first);
  });
});
