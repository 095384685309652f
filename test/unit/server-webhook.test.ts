import https from 'node:https';
import { staticCertificateSource } from '../env/static-certificate-source.js';
import tls from 'node:tls';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ReviewHandler } from '../../src/admission/review.js';
import {
  createWebhookServer,
  DEFAULT_BODY_LIMIT_BYTES,
  type WebhookServer,
} from '../../src/server/webhook-server.js';
import {
  certificateFingerprint,
  createCertificateAuthority,
  createSignedCertificate,
  type KeyPairPem,
} from '../../src/tls/certificates.js';
import { waitFor } from '../env/wait.js';

const KEY_BITS = 2048;
const VALIDITY_SECONDS = 3600;

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

function review(request: Record<string, unknown> = { uid: 'u-1', operation: 'CREATE' }): Record<string, unknown> {
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request };
}

function send(
  port: number,
  ca: string,
  opts: { method?: string; path?: string; body?: string | Buffer; contentType?: string; agent?: https.Agent },
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const body = opts.body ?? '';
    const req = https.request(
      {
        host: '127.0.0.1',
        port,
        method: opts.method ?? 'POST',
        path: opts.path ?? '/mutate',
        ca,
        agent: opts.agent ?? false,
        headers: {
          ...(opts.contentType === undefined ? {} : { 'content-type': opts.contentType }),
          ...(opts.method === 'GET' ? {} : { 'content-length': Buffer.byteLength(body) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            // not JSON: the test sees the text
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parsed });
        });
      },
    );
    req.on('error', reject);
    if (opts.method !== 'GET') req.end(body);
    else req.end();
  });
}

function peerFingerprint(port: number, ca: string, extra: tls.ConnectionOptions = {}): Promise<{ fingerprint: string; alpn: string | false }> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca, ...extra }, () => {
      const cert = socket.getPeerCertificate();
      resolve({ fingerprint: cert.fingerprint256, alpn: socket.alpnProtocol ?? false });
      socket.end();
    });
    socket.on('error', reject);
  });
}

describe('webhook server over TLS on 127.0.0.1', () => {
  let ca: KeyPairPem;
  let first: KeyPairPem;
  let second: KeyPairPem;
  let source: ReturnType<typeof staticCertificateSource>;
  let server: WebhookServer;
  const controller = new AbortController();
  let port: number;
  let ready = true;
  const seen: unknown[] = [];
  const handler: ReviewHandler = (body) => {
    seen.push(body);
    const request = (body as { request: { uid: string; operation?: string } }).request;
    if (request.operation === 'EXPLODE') throw new Error('handler bug');
    return {
      status: 200,
      body: { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: request.uid, allowed: true } },
    };
  };

  beforeAll(async () => {
    ca = await createCertificateAuthority({ commonName: 'server-test-ca', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS });
    const leaf = { commonName: 'webhook', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS, usage: 'server' as const, ipAddresses: ['127.0.0.1'] };
    [first, second] = await Promise.all([createSignedCertificate(ca, leaf), createSignedCertificate(ca, leaf)]);
    source = staticCertificateSource(first);
    server = createWebhookServer({
      host: '127.0.0.1',
      port: 0,
      certificates: source,
      routes: [{ path: '/mutate', handle: handler }],
      readiness: () => ({ ready, reasons: ready ? [] : ['caches not synced'] }),
      logger: pino({ level: 'silent' }),
    });
    await server.start(controller.signal);
    port = server.address().port;
  });
  afterAll(async () => {
    controller.abort();
    await server?.stopped();
  });

  it('answers a valid review through the handler', async () => {
    const res = await send(port, ca.certPem, { body: JSON.stringify(review()), contentType: 'application/json' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ response: { uid: 'u-1', allowed: true } });
  });

  const tooBig = Buffer.alloc(DEFAULT_BODY_LIMIT_BYTES + 1024, 'a');
  const cases: { name: string; body: string | Buffer; contentType?: string; status: number; reason: RegExp }[] = [
    { name: 'not JSON', body: 'this is {not json', contentType: 'application/json', status: 400, reason: /not valid JSON/ },
    { name: 'an empty body', body: '', contentType: 'application/json', status: 400, reason: /not valid JSON/ },
    { name: 'a JSON array', body: '[1,2]', contentType: 'application/json', status: 400, reason: /body: must be object/ },
    { name: 'a JSON string', body: '"review"', contentType: 'application/json', status: 400, reason: /body: must be object/ },
    {
      name: 'a wrong apiVersion',
      body: JSON.stringify({ ...review(), apiVersion: 'admission.k8s.io/v1beta1' }),
      contentType: 'application/json',
      status: 400,
      reason: /body\.apiVersion: must be "admission\.k8s\.io\/v1"/,
    },
    {
      name: 'a wrong kind',
      body: JSON.stringify({ ...review(), kind: 'Review' }),
      contentType: 'application/json',
      status: 400,
      reason: /body\.kind: must be "AdmissionReview"/,
    },
    {
      name: 'no request',
      body: JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' }),
      contentType: 'application/json',
      status: 400,
      reason: /body\.request: is required/,
    },
    { name: 'a missing uid', body: JSON.stringify(review({ operation: 'CREATE' })), contentType: 'application/json', status: 400, reason: /body\.request\.uid: is required/ },
    { name: 'a numeric uid', body: JSON.stringify(review({ uid: 42 })), contentType: 'application/json', status: 400, reason: /body\.request\.uid: must be string/ },
    { name: 'an empty uid', body: JSON.stringify(review({ uid: '' })), contentType: 'application/json', status: 400, reason: /body\.request\.uid/ },
    { name: 'a prototype-poisoning body', body: '{"__proto__":{"x":1}}', contentType: 'application/json', status: 400, reason: /not valid JSON|__proto__/ },
    { name: 'a wrong content type', body: JSON.stringify(review()), contentType: 'text/plain', status: 415, reason: /application\/json/ },
    { name: 'no content type', body: JSON.stringify(review()), status: 415, reason: /content type/ },
    { name: `a body over ${DEFAULT_BODY_LIMIT_BYTES} bytes`, body: tooBig, contentType: 'application/json', status: 413, reason: /larger than the limit of 7340032 bytes/ },
  ];

  it.each(cases)('rejects $name with $status and a JSON reason, and keeps serving', async ({ body, contentType, status, reason }) => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const res = await send(port, ca.certPem, { body, contentType, agent });
      expect(res.status).toBe(status);
      expect(res.headers['content-type']).toMatch(/application\/json/);
      expect(res.body).toEqual({ reason: expect.stringMatching(reason) });
      const after = await send(port, ca.certPem, { body: JSON.stringify(review()), contentType: 'application/json', agent });
      expect(after.status).toBe(200);
    } finally {
      agent.destroy();
    }
  });

  it('answers 500 with a reason when the handler throws, and keeps serving', async () => {
    const res = await send(port, ca.certPem, { body: JSON.stringify(review({ uid: 'x', operation: 'EXPLODE' })), contentType: 'application/json' });
    expect(res.status).toBe(500);
    expect(res.body).toEqual({ reason: expect.stringMatching(/internal error/) });
    expect((await send(port, ca.certPem, { body: JSON.stringify(review()), contentType: 'application/json' })).status).toBe(200);
  });

  it('answers unknown routes and methods with 404 and a reason', async () => {
    const res = await send(port, ca.certPem, { method: 'GET', path: '/mutate' });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ reason: expect.stringMatching(/POST \/mutate/) });
  });

  it('serves /healthz always and /readyz from readiness', async () => {
    expect((await send(port, ca.certPem, { method: 'GET', path: '/healthz' })).status).toBe(200);
    expect((await send(port, ca.certPem, { method: 'GET', path: '/readyz' })).status).toBe(200);
    ready = false;
    try {
      const res = await send(port, ca.certPem, { method: 'GET', path: '/readyz' });
      expect(res.status).toBe(503);
      expect(res.body).toEqual({ reason: expect.stringMatching(/not ready/) });
    } finally {
      ready = true;
    }
  });

  it('speaks HTTP/1.1 only and refuses TLS below 1.2', async () => {
    const { alpn } = await peerFingerprint(port, ca.certPem, { ALPNProtocols: ['h2', 'http/1.1'] });
    expect(alpn).toBe('http/1.1');
    await expect(peerFingerprint(port, ca.certPem, { maxVersion: 'TLSv1.1', minVersion: 'TLSv1' })).rejects.toThrow();
  });

  it('swaps the certificate for new handshakes while a kept-alive connection keeps working', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect((await peerFingerprint(port, ca.certPem)).fingerprint).toBe(certificateFingerprint(first.certPem));
      const warm = await send(port, ca.certPem, { body: JSON.stringify(review()), contentType: 'application/json', agent });
      expect(warm.status).toBe(200);
      source.set(second);
      expect((await peerFingerprint(port, ca.certPem)).fingerprint).toBe(certificateFingerprint(second.certPem));
      const reused = await send(port, ca.certPem, { body: JSON.stringify(review()), contentType: 'application/json', agent });
      expect(reused.status).toBe(200);
    } finally {
      agent.destroy();
    }
  });

  it('keeps the old certificate when the new one does not load', async () => {
    const before = (await peerFingerprint(port, ca.certPem)).fingerprint;
    source.set({ certPem: 'not a certificate', keyPem: 'not a key' });
    expect((await peerFingerprint(port, ca.certPem)).fingerprint).toBe(before);
    source.set(second);
  });
});

describe('webhook server shutdown', () => {
  it('drains with Connection: close and lets an in-flight review finish after the stop signal', async () => {
    const ca = await createCertificateAuthority({ commonName: 'drain-ca', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS });
    const leaf = await createSignedCertificate(ca, {
      commonName: 'webhook',
      validitySeconds: VALIDITY_SECONDS,
      keyBits: KEY_BITS,
      usage: 'server',
      ipAddresses: ['127.0.0.1'],
    });
    const controller = new AbortController();
    const server = createWebhookServer({
      host: '127.0.0.1',
      port: 0,
      certificates: staticCertificateSource(leaf),
      routes: [{ path: '/mutate', handle: (body) => ({ status: 200, body: { uid: (body as { request: { uid: string } }).request.uid } }) }],
      readiness: () => ({ ready: true, reasons: [] }),
      logger: pino({ level: 'silent' }),
    });
    await server.start(controller.signal);
    const port = server.address().port;
    try {
      server.drain();
      const drained = await send(port, ca.certPem, { body: JSON.stringify(review()), contentType: 'application/json' });
      expect(drained.status).toBe(200);
      expect(drained.headers.connection).toBe('close');
      expect((await send(port, ca.certPem, { method: 'GET', path: '/readyz' })).status).toBe(503);

      // a review whose body is still arriving when the stop signal fires
      const body = JSON.stringify(review({ uid: 'late', operation: 'CREATE' }));
      const req = https.request({
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/mutate',
        ca: ca.certPem,
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      });
      const answer = new Promise<Reply>((resolve, reject) => {
        req.on('response', (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(Buffer.concat(chunks).toString()) }));
        });
        req.on('error', reject);
      });
      // and a connection that never sends a request, as a Go client's spare dial does
      const spare = await new Promise<tls.TLSSocket>((resolve, reject) => {
        const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.certPem }, () => resolve(socket));
        socket.on('error', reject);
      });
      const spareClosed = new Promise<void>((resolve) => spare.once('close', () => resolve()));
      req.write(body.slice(0, 10));
      await waitFor('the review to be in flight', () => (server.inFlight() === 1 ? true : undefined), { timeoutMs: 5_000, intervalMs: 10 });
      controller.abort();
      const stopped = server.stopped();
      req.end(body.slice(10));
      const res = await answer;
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ uid: 'late' });
      await stopped;
      await spareClosed;
      expect(server.inFlight()).toBe(0);
      await expect(peerFingerprint(port, ca.certPem)).rejects.toThrow();
    } finally {
      controller.abort();
      await server.stopped();
    }
  });
});
