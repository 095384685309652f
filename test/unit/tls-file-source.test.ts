import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics.js';
import { createCertificateSource } from '../../src/tls/certificate-source.js';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../../src/tls/certificates.js';
import { waitFor } from '../env/wait.js';

const KEY_BITS = 2048;
const VALIDITY_SECONDS = 3600;
/** long, so a passing test shows fs.watch did the work, not the periodic check */
const SLOW_CHECK_MS = 60_000;

describe('bring-your-own certificate files', () => {
  let pairs: KeyPairPem[];
  const cleanups: (() => Promise<void> | void)[] = [];

  beforeAll(async () => {
    const ca = await createCertificateAuthority({ commonName: 'byo-ca', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS });
    const leaf = { commonName: 'byo', validitySeconds: VALIDITY_SECONDS, keyBits: KEY_BITS, usage: 'server' as const };
    pairs = await Promise.all([1, 2, 3].map(() => createSignedCertificate(ca, leaf)));
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  function tempDir(): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-byo-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    return dir;
  }

  async function started(certFile: string, keyFile: string, checkIntervalMs = SLOW_CHECK_MS) {
    const metrics = createMetrics();
    const source = createCertificateSource({
      tlsCertFile: certFile,
      tlsKeyFile: keyFile,
      fileCheckIntervalMs: checkIntervalMs,
      logger: pino({ level: 'silent' }),
      metrics,
    });
    const controller = new AbortController();
    cleanups.push(async () => {
      controller.abort();
      await source.stopped();
    });
    await source.start(controller.signal);
    return { source, metrics };
  }

  function writeAtomically(file: string, text: string): void {
    fs.writeFileSync(`${file}.tmp`, text);
    fs.renameSync(`${file}.tmp`, file);
  }

  it('serves the files and follows a replacement of both', async () => {
    const dir = tempDir();
    const certFile = path.join(dir, 'tls.crt');
    const keyFile = path.join(dir, 'tls.key');
    fs.writeFileSync(certFile, pairs[0]!.certPem);
    fs.writeFileSync(keyFile, pairs[0]!.keyPem);
    const { source, metrics } = await started(certFile, keyFile);
    expect(source.current()?.certPem).toBe(pairs[0]!.certPem);
    expect(source.ready()).toBe(true);
    expect(source.status()).toMatchObject({ source: 'files', notAfter: expect.any(String) });
    const expiry = await metrics.certificateExpiry.get();
    expect(expiry.values.find((v) => v.labels.certificate === 'serving')?.value).toBeGreaterThan(Date.now() / 1000);

    const changes: string[] = [];
    source.onChange((pair) => changes.push(pair.certPem));
    // the order a careless writer uses: certificate first, so for a moment the pair does not match
    writeAtomically(certFile, pairs[1]!.certPem);
    writeAtomically(keyFile, pairs[1]!.keyPem);
    await waitFor('the new pair to be served', () => (source.current()?.certPem === pairs[1]!.certPem ? true : undefined), {
      timeoutMs: 4_000,
    });
    expect(changes).toEqual([pairs[1]!.certPem]);
    expect(source.current()?.keyPem).toBe(pairs[1]!.keyPem);
  });

  it('follows a Kubernetes Secret volume swap of the ..data symlink', async () => {
    const dir = tempDir();
    const version = (n: number, pair: KeyPairPem): void => {
      const v = path.join(dir, `..v${n}`);
      fs.mkdirSync(v);
      fs.writeFileSync(path.join(v, 'tls.crt'), pair.certPem);
      fs.writeFileSync(path.join(v, 'tls.key'), pair.keyPem);
      fs.symlinkSync(`..v${n}`, path.join(dir, '..data_tmp'));
      fs.renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
    };
    version(1, pairs[0]!);
    fs.symlinkSync('..data/tls.crt', path.join(dir, 'tls.crt'));
    fs.symlinkSync('..data/tls.key', path.join(dir, 'tls.key'));
    const { source } = await started(path.join(dir, 'tls.crt'), path.join(dir, 'tls.key'));
    expect(source.current()?.certPem).toBe(pairs[0]!.certPem);
    version(2, pairs[2]!);
    await waitFor('the swapped pair to be served', () => (source.current()?.certPem === pairs[2]!.certPem ? true : undefined), {
      timeoutMs: 4_000,
    });
  });

  it('finds a change no watch event reports, by the periodic check', async () => {
    // the watched directory is reached through a symlink that is then pointed elsewhere:
    // fs.watch keeps watching the old directory, only the stat of the file paths sees the change
    const dir = tempDir();
    for (const [name, pair] of [['a', pairs[0]!], ['b', pairs[2]!]] as const) {
      fs.mkdirSync(path.join(dir, name));
      fs.writeFileSync(path.join(dir, name, 'tls.crt'), pair.certPem);
      fs.writeFileSync(path.join(dir, name, 'tls.key'), pair.keyPem);
    }
    fs.symlinkSync('a', path.join(dir, 'current'));
    const checkMs = 200;
    const { source } = await started(path.join(dir, 'current', 'tls.crt'), path.join(dir, 'current', 'tls.key'), checkMs);
    expect(source.current()?.certPem).toBe(pairs[0]!.certPem);
    fs.symlinkSync('b', path.join(dir, 'next'));
    fs.renameSync(path.join(dir, 'next'), path.join(dir, 'current'));
    await waitFor('the pair behind the new link to be served', () => (source.current()?.certPem === pairs[2]!.certPem ? true : undefined), {
      timeoutMs: 4_000,
    });
  });

  it('refuses to start on files that do not form a pair, saying which', async () => {
    const dir = tempDir();
    const certFile = path.join(dir, 'tls.crt');
    const keyFile = path.join(dir, 'tls.key');
    fs.writeFileSync(certFile, pairs[0]!.certPem);
    fs.writeFileSync(keyFile, pairs[1]!.keyPem);
    await expect(started(certFile, keyFile)).rejects.toThrow(/tls\.crt and .*tls\.key: the key is not the key of the certificate/);
    await expect(started(path.join(dir, 'missing.crt'), keyFile)).rejects.toThrow(/missing\.crt.*cannot read/);
  });

  it('wants both files or neither', () => {
    expect(() =>
      createCertificateSource({ tlsCertFile: '/x/tls.crt', logger: pino({ level: 'silent' }), metrics: createMetrics() }),
    ).toThrow(/tlsCertFile and tlsKeyFile go together/);
    expect(() => createCertificateSource({ logger: pino({ level: 'silent' }), metrics: createMetrics() })).toThrow(
      /self-managed certificates need kubeConfig, namespace, secretName, serviceName/,
    );
  });
});
