import { pino } from 'pino';
import { Registry, Counter } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { AdminServer } from '../../src/server/admin-server.js';

describe('AdminServer', () => {
  it('answers /metrics, /status, /healthz and /readyz, HEAD beside GET, a 404 naming the route, and stops', async () => {
    const registry = new Registry();
    new Counter({ name: 'admin_test_total', help: 'a counter', registers: [registry] }).inc();
    let ready = false;
    const admin = new AdminServer({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      registry,
      status: () => ({ version: 'x' }),
      live: () => true,
      ready: () => ({ ready, reasons: ready ? [] : ['caches not synced'] }),
    });
    const abort = new AbortController();
    await admin.start(abort.signal);
    const base = `http://127.0.0.1:${admin.address().port}`;
    try {
      const metrics = await fetch(`${base}/metrics`);
      expect(metrics.headers.get('content-type')).toBe(registry.contentType);
      expect(await metrics.text()).toContain('admin_test_total 1');
      expect(await (await fetch(`${base}/status`)).json()).toEqual({ version: 'x' });
      const health = await fetch(`${base}/healthz`);
      expect([health.status, health.headers.get('content-type'), await health.json()]).toEqual([200, 'application/json; charset=utf-8', { ok: true }]);
      const notReady = await fetch(`${base}/readyz`);
      expect([notReady.status, await notReady.json()]).toEqual([503, { ready: false, reasons: ['caches not synced'] }]);
      ready = true;
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
      const head = await fetch(`${base}/readyz`, { method: 'HEAD' });
      expect([head.status, await head.text()]).toEqual([200, '']);
      const missing = await fetch(`${base}/nope?x=1`);
      expect([missing.status, await missing.json()]).toEqual([404, { message: 'Route GET:/nope?x=1 not found', error: 'Not Found', statusCode: 404 }]);
      expect((await fetch(`${base}/metrics`, { method: 'POST' })).status).toBe(404);
    } finally {
      abort.abort();
      await admin.stopped();
    }
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
  });
});
