import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
import { probeHealth, probeSetHealth } from '../../src/rollout/health-probe.js';

describe('probeHealth', () => {
  let server: http.Server;
  let base: string;
  const pending = new Set<http.ServerResponse>();

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      if (req.url === '/ok') res.writeHead(204).end();
      else if (req.url === '/down') res.writeHead(503).end('down');
      else if (req.url === '/moved') res.writeHead(302, { location: '/ok' }).end();
      // /hang: never answers (until the server closes)
      else pending.add(res);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    for (const res of pending) res.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('passes on 2xx', async () => {
    expect(await probeHealth(`${base}/ok`)).toEqual({ ok: true, detail: 'HTTP 204 No Content' });
  });

  it('fails on any other status, a redirect included, saying which', async () => {
    expect(await probeHealth(`${base}/down`)).toEqual({ ok: false, detail: 'HTTP 503 Service Unavailable' });
    expect(await probeHealth(`${base}/moved`)).toEqual({ ok: false, detail: 'HTTP 302 Found' });
  });

  it('fails when there is no answer in time', async () => {
    expect(await probeHealth(`${base}/hang`, { timeoutMs: 100 })).toEqual({ ok: false, detail: 'no answer within 100 ms' });
  });

  it('fails, without throwing, when it is stopped, refused or handed a bad URL', async () => {
    const stop = new AbortController();
    const aborted = probeHealth(`${base}/hang`, { signal: stop.signal });
    stop.abort();
    expect(await aborted).toEqual({ ok: false, detail: 'aborted: rollguard is stopping' });
    // port 9 (discard) is one that fetch refuses outright; nothing listens there
    const refused = await probeHealth('http://127.0.0.1:9/healthz');
    expect(refused).toEqual({ ok: false, detail: 'GET failed: connect ECONNREFUSED 127.0.0.1:9' });
    expect(await probeHealth('not a url')).toEqual({ ok: false, detail: '"not a url" is not a URL' });
    expect(await probeHealth('file:///etc/passwd')).toEqual({ ok: false, detail: 'file: is not http: or https:' });
  });
});

describe('probeSetHealth', () => {
  let server: http.Server;
  let port: number;
  const hosts: string[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      hosts.push(req.headers.host ?? '');
      res.writeHead(200).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const set: V1StatefulSet = { metadata: { namespace: 'shop', name: 'web' } };
  const pods: V1Pod[] = [{ metadata: { name: 'web-0' }, status: { podIP: '127.0.0.1' } }];
  const noLookups = {
    readService: () => Promise.reject(new Error('no Service lookup expected')),
    resolveHost: () => Promise.reject(new Error('no DNS lookup expected')),
  };

  it('connects to the checked pod IP under the name the URL gives, with no DNS', async () => {
    // "web-0" resolves nowhere: the answer can only come from the pinned address
    const result = await probeSetHealth(set, `http://web-0:${port}/healthz`, pods, { lookups: noLookups, allowedHosts: [] });
    expect(result).toEqual({ ok: true, detail: 'HTTP 200 OK from pod web-0 at 127.0.0.1' });
    expect(hosts.at(-1)).toBe(`web-0:${port}`);
  });

  it('makes no request to a refused target, and says why', async () => {
    const before = hosts.length;
    expect(await probeSetHealth(set, 'http://169.254.169.254/latest/meta-data/', pods, { lookups: noLookups, allowedHosts: [] })).toEqual({
      ok: false,
      detail: 'refused: 169.254.169.254 is a link-local or cloud metadata address',
    });
    expect(await probeSetHealth(set, `http://127.0.0.1:${port}/`, [], { lookups: noLookups, allowedHosts: [] })).toEqual({
      ok: false,
      detail: 'refused: 127.0.0.1 is a loopback address',
    });
    expect(hosts.length).toBe(before);
  });
});
