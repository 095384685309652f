import http from 'node:http';
import { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { NamedObjectWatch } from '../../src/tls/named-object-watch.js';
import { waitFor } from '../env/wait.js';

// The loop's reactions to what a watch stream can say, against a local HTTP server that answers
// lists from a function and watch requests from a script. The API server itself is exercised by
// the integration tests.

type WatchReply = { status: number; events?: unknown[] };
type ListReply = { items: unknown[]; resourceVersion: string } | { status: number; reason: string; message: string };

function kubeConfigFor(port: number): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'local', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'anyone' }],
    contexts: [{ name: 'local', cluster: 'local', user: 'anyone' }],
    currentContext: 'local',
  });
  return kc;
}

describe('NamedObjectWatch', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function scripted(
    list: () => ListReply,
    replies: WatchReply[],
  ): Promise<{ port: number; listQueries: URLSearchParams[]; watchQueries: URLSearchParams[] }> {
    const listQueries: URLSearchParams[] = [];
    const watchQueries: URLSearchParams[] = [];
    const server = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (url.searchParams.get('watch') !== 'true') {
        listQueries.push(url.searchParams);
        const listed = list();
        if ('status' in listed) {
          res.writeHead(listed.status, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ kind: 'Status', code: listed.status, reason: listed.reason, message: listed.message }));
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ kind: 'SecretList', metadata: { resourceVersion: listed.resourceVersion }, items: listed.items }));
        }
        return;
      }
      watchQueries.push(url.searchParams);
      // after the script: an idle stream that the test's stop ends
      const reply = replies.shift() ?? { status: 200 };
      res.writeHead(reply.status, { 'content-type': 'application/json' });
      for (const event of reply.events ?? []) res.write(`${JSON.stringify(event)}\n`);
      if (reply.events !== undefined || reply.status !== 200) res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    });
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    return { port: address.port, listQueries, watchQueries };
  }

  function started(port: number) {
    const seen: unknown[] = [];
    const watch = new NamedObjectWatch({
      kubeConfig: kubeConfigFor(port),
      resource: { group: '', version: 'v1', plural: 'secrets' },
      namespace: 'ns',
      name: 'tls',
      onObject: (o) => seen.push(o),
      logger: pino({ level: 'silent' }),
    });
    const controller = new AbortController();
    cleanups.push(async () => {
      controller.abort();
      await watch.stopped();
    });
    void watch.start(controller.signal);
    return { watch, seen };
  }

  const secret = (rv: string) => ({ metadata: { name: 'tls', resourceVersion: rv } });

  it('lists, watches from the list, resumes from the last event, and relists after 410 Gone', async () => {
    let lists = 0;
    const { port, listQueries, watchQueries } = await scripted(
      () => {
        lists++;
        return { items: [secret(lists === 1 ? '10' : '20')], resourceVersion: lists === 1 ? '10' : '20' };
      },
      [
        { status: 200, events: [{ type: 'MODIFIED', object: secret('11') }] },
        { status: 200, events: [{ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } }] },
      ],
    );
    const { watch, seen } = started(port);
    await watch.synced(2_000);
    await waitFor('the relist after 410 and a watch from it', () => (watchQueries.length >= 3 ? true : undefined), { timeoutMs: 4_000 });
    expect(watchQueries.map((q) => q.get('resourceVersion'))).toEqual(['10', '11', '20']);
    expect(listQueries[0]!.get('fieldSelector')).toBe('metadata.name=tls');
    expect(watchQueries[0]!.get('fieldSelector')).toBe('metadata.name=tls');
    expect(watchQueries[0]!.get('allowWatchBookmarks')).toBe('true');
    expect(lists).toBe(2);
    expect(seen).toEqual([secret('10'), secret('11'), secret('20')]);
  });

  it('reports a deleted object as absent and an error answer as a retry, not a stop', async () => {
    const { port, watchQueries } = await scripted(
      () => ({ items: [secret('10')], resourceVersion: '10' }),
      [{ status: 200, events: [{ type: 'DELETED', object: secret('12') }] }, { status: 500 }],
    );
    const { seen } = started(port);
    await waitFor('a watch after the failed one', () => (watchQueries.length >= 3 ? true : undefined), { timeoutMs: 4_000 });
    expect(seen).toEqual([secret('10'), undefined]);
    expect(watchQueries.map((q) => q.get('resourceVersion'))).toEqual(['10', '12', '12']);
  });

  it('tells why it could not list when asked to wait for the first list', async () => {
    const { port } = await scripted(
      () => ({ status: 403, reason: 'Forbidden', message: 'secrets is forbidden: User "x" cannot list resource "secrets"' }),
      [],
    );
    const { watch } = started(port);
    await expect(watch.synced(300)).rejects.toThrow(
      /could not list \/api\/v1\/namespaces\/ns\/secrets\/tls within 300 ms; last error: GET \/api\/v1\/namespaces\/ns\/secrets\?\S+: HTTP 403 Forbidden: secrets is forbidden/,
    );
  });
});
