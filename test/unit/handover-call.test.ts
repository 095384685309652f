import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callHttpAction, credentialsFrom } from '../../src/handover/call.js';
import type { HandoverCall } from '../../src/handover/decision.js';
import { handoverSettings, type HandoverSettings } from '../../src/handover/settings.js';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../../src/tls/certificates.js';

const b64 = (text: string): string => Buffer.from(text).toString('base64');
const lookups = {
  readService: () => Promise.reject(new Error('no Service lookup expected')),
  resolveHost: () => Promise.reject(new Error('no DNS expected')),
};

describe('credentialsFrom', () => {
  it('makes a bearer header from token, a basic one from username and password', () => {
    expect(credentialsFrom({ token: b64('abc\n') })).toEqual({ authorization: 'Bearer abc' });
    expect(credentialsFrom({ username: b64('postgres'), password: b64('s3cret') })).toEqual({ authorization: `Basic ${b64('postgres:s3cret')}` });
  });

  it('takes ca.crt when it holds PEM certificates, and says so when it does not (Node would ignore it and trust nothing)', async () => {
    const ca = await createCertificateAuthority({ commonName: 'pods', validitySeconds: 3600, keyBits: 2048 });
    expect(credentialsFrom({ 'ca.crt': b64(ca.certPem) })).toEqual({ ca: ca.certPem });
    expect(credentialsFrom({ token: b64('t'), 'ca.crt': b64('PEM') })).toBe('its ca.crt holds no PEM certificate');
    expect(credentialsFrom({ 'ca.crt': b64(ca.keyPem) })).toBe('its ca.crt holds no PEM certificate');
    expect(credentialsFrom({ 'ca.crt': b64('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n') })).toBe('its ca.crt holds a certificate that does not parse');
  });

  it('says what is missing, and never the values', () => {
    const why = credentialsFrom({ username: b64('postgres') });
    expect(why).toBe('it holds neither token nor username and password (nor ca.crt)');
  });
});

// One pod of the set on loopback: the call goes to its status IP, and to nothing else.
describe('callHttpAction', () => {
  let server: http.Server;
  let port: number;
  const seen: { method?: string; url?: string; body: string; authorization?: string }[] = [];
  let status = 200;

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, body, authorization: req.headers.authorization });
        res.writeHead(status).end('{"detail":"status unknown"}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => new Promise((resolve) => server.close(resolve)));

  const pods: V1Pod[] = [{ metadata: { name: 'db-0' }, status: { podIP: '127.0.0.1' } }, { metadata: { name: 'db-1' }, status: { podIP: '127.0.0.9' } }];
  function settings(): HandoverSettings {
    const parsed = handoverSettings({
      metadata: { annotations: { 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': `POST :${port}/switchover`, 'rollguard.io/handover-body': '{"leader":"{primary}","candidate":"{candidate}"}' } },
    });
    if (!parsed?.ok) throw new Error('settings');
    return parsed.settings;
  }
  const call = (target: string): HandoverCall => ({ action: settings().action, target, primary: 'db-0', candidate: 'db-1', attempt: 1, fallback: false });
  const opts = () => ({ namespace: 'shop', setName: 'db', settings: settings(), pods, lookups, timeoutMs: 2_000, signal: new AbortController().signal });

  it('POSTs the rendered body with the credentials to the pod at its status IP', async () => {
    status = 200;
    const result = await callHttpAction(call('db-0'), { ...opts(), credentials: { authorization: 'Basic x' } });
    expect(result).toEqual({ failed: false, detail: 'HTTP 200 "{\\"detail\\":\\"status unknown\\"}" from pod db-0 at 127.0.0.1' });
    expect(seen.at(-1)).toEqual({ method: 'POST', url: '/switchover', body: '{"leader":"db-0","candidate":"db-1"}', authorization: 'Basic x' });
  });

  it('a 503 is not a failure (the labels decide); a 412 is', async () => {
    status = 503;
    expect((await callHttpAction(call('db-0'), opts())).failed).toBe(false);
    status = 412;
    expect((await callHttpAction(call('db-0'), opts())).failed).toBe(true);
  });

  it("addresses the pod by its name under the set's headless Service (for a TLS server name), connecting to its status IP", async () => {
    status = 200;
    const result = await callHttpAction(call('db-0'), { ...opts(), serviceName: 'db' });
    expect(result.detail).toContain('from pod db-0 at 127.0.0.1');
  });

  it('refuses a target that is not a pod of the set, without any lookup', async () => {
    expect(await callHttpAction(call('db-7'), opts())).toEqual({ failed: true, detail: 'refused: db-7 is not a pod of the set' });
  });
});

// The pod's server over TLS with a certificate for db-0.db.shop.svc: only the CA the Secret gives is trusted.
describe('callHttpAction over https', () => {
  let server: https.Server;
  let port: number;
  let ca: KeyPairPem;
  let other: KeyPairPem;
  let requests = 0;

  beforeAll(async () => {
    const common = { validitySeconds: 3600, keyBits: 2048 };
    [ca, other] = await Promise.all([createCertificateAuthority({ ...common, commonName: 'pods' }), createCertificateAuthority({ ...common, commonName: 'other' })]);
    const leaf = await createSignedCertificate(ca, { ...common, commonName: 'db-0', dnsNames: ['db-0.db.shop.svc'], usage: 'server' });
    server = https.createServer({ cert: leaf.certPem, key: leaf.keyPem }, (req, res) => {
      requests++;
      req.resume();
      req.on('end', () => res.writeHead(200).end());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => new Promise((resolve) => server.close(resolve)));

  const pods: V1Pod[] = [{ metadata: { name: 'db-0' }, status: { podIP: '127.0.0.1' } }];
  function opts(overrides: { serviceName?: string; ca?: string; secret?: string }) {
    const annotations: Record<string, string> = { 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': `POST https:${port}/switchover` };
    if (overrides.secret) annotations['rollguard.io/handover-credentials'] = overrides.secret;
    const parsed = handoverSettings({ metadata: { annotations } });
    if (!parsed?.ok) throw new Error('settings');
    const call: HandoverCall = { action: parsed.settings.action, target: 'db-0', primary: 'db-0', candidate: 'db-1', attempt: 1, fallback: false };
    return {
      call,
      opts: {
        namespace: 'shop',
        setName: 'db',
        serviceName: overrides.serviceName ?? 'db',
        settings: parsed.settings,
        pods,
        lookups,
        ...(overrides.ca ? { credentials: { ca: overrides.ca } } : {}),
        timeoutMs: 5_000,
        signal: new AbortController().signal,
      },
    };
  }

  it('verifies the certificate for <pod>.<serviceName>.<namespace>.svc against ca.crt', async () => {
    const { call, opts: o } = opts({ ca: ca.certPem, secret: 'db-api' });
    expect(await callHttpAction(call, o)).toEqual({ failed: false, detail: 'HTTP 200 from pod db-0 at 127.0.0.1' });
  });

  it('another CA: fails naming the Secret, and sends no request', async () => {
    const before = requests;
    const { call, opts: o } = opts({ ca: other.certPem, secret: 'db-api' });
    expect(await callHttpAction(call, o)).toEqual({
      failed: true,
      detail: 'nothing: the certificate of pod db-0 (db-0.db.shop.svc) is not trusted by ca.crt of Secret db-api (unable to verify the first certificate), so no request was sent (pod db-0 at 127.0.0.1)',
    });
    expect(requests).toBe(before);
  });

  it('a Service name the certificate does not hold: fails naming the name checked', async () => {
    const { call, opts: o } = opts({ ca: ca.certPem, secret: 'db-api', serviceName: 'db-headless' });
    const result = await callHttpAction(call, o);
    expect(result.failed).toBe(true);
    expect(result.detail).toMatch(/^nothing: the certificate of pod db-0 is not issued for db-0\.db-headless\.shop\.svc \(Host: db-0\.db-headless\.shop\.svc\. is not in the cert's altnames: DNS:db-0\.db\.shop\.svc\), so no request was sent/);
  });
});
