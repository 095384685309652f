import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Runnable } from '../manager.js';
import { certificateFingerprint, keyMatchesCertificate, type ServingKeyPair } from './certificates.js';

/**
 * fs.watch misses changes on some filesystems (network mounts, some overlays) and stops seeing a file whose
 * directory was swapped; a stat this often catches those, well inside any certificate's renew window.
 */
export const DEFAULT_FILE_CHECK_INTERVAL_MS = 10_000;
/** A writer replaces the certificate and the key one after the other: read once the burst of events is over. */
const SETTLE_MS = 100;

export interface FileCertificateSourceOptions {
  certFile: string;
  keyFile: string;
  checkIntervalMs?: number;
  logger: Logger;
}

function statSignature(file: string): string {
  try {
    // stat follows symlinks, so the ..data swap of a Secret volume changes inode and mtime here
    const st = fs.statSync(file);
    return `${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch (err) {
    return `error:${(err as NodeJS.ErrnoException).code ?? 'unknown'}`;
  }
}

/**
 * A key pair that someone else manages (cert-manager, a mounted Secret): read from two files,
 * re-read when either changes, swapped in only when the key matches the certificate.
 */
export class FileCertificateSource implements Runnable {
  readonly name: string;
  private readonly log: Logger;
  private served: ServingKeyPair | undefined;
  private readonly listeners = new Set<(pair: ServingKeyPair) => void>();
  private watchers: fs.FSWatcher[] = [];
  private pollTimer: NodeJS.Timeout | undefined;
  private settleTimer: NodeJS.Timeout | undefined;
  private signatures = '';
  private done: Promise<void> = Promise.resolve();

  constructor(private readonly opts: FileCertificateSourceOptions) {
    this.name = `tls-files ${opts.certFile}`;
    this.log = opts.logger.child({ component: 'tls-files', certFile: opts.certFile, keyFile: opts.keyFile });
  }

  /** Fails when the files cannot be read or do not hold a matching pair: serving nothing would be worse than not starting. */
  async start(signal: AbortSignal): Promise<void> {
    const problem = this.reload();
    if (problem) throw new Error(`TLS files ${this.opts.certFile} and ${this.opts.keyFile}: ${problem}`);
    this.watchDirectories();
    const interval = this.opts.checkIntervalMs ?? DEFAULT_FILE_CHECK_INTERVAL_MS;
    this.pollTimer = setInterval(() => this.poll(), interval);
    this.done = new Promise((resolve) => {
      signal.addEventListener(
        'abort',
        () => {
          clearInterval(this.pollTimer);
          clearTimeout(this.settleTimer);
          for (const w of this.watchers) w.close();
          this.watchers = [];
          resolve();
        },
        { once: true },
      );
    });
  }

  stopped(): Promise<void> {
    return this.done;
  }

  current(): ServingKeyPair | undefined {
    return this.served;
  }

  onChange(listener: (pair: ServingKeyPair) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private fileSignatures(): string {
    return `${statSignature(this.opts.certFile)}|${statSignature(this.opts.keyFile)}`;
  }

  private poll(): void {
    if (this.watchers.length === 0) this.watchDirectories();
    if (this.fileSignatures() !== this.signatures) this.reload();
  }

  private watchDirectories(): void {
    const dirs = new Set([path.dirname(this.opts.certFile), path.dirname(this.opts.keyFile)]);
    for (const dir of dirs) {
      try {
        // the directory, not the file: a replaced file or a swapped symlink is a new inode a file watch never sees
        const watcher = fs.watch(dir, { persistent: false }, () => this.settleThenReload());
        watcher.on('error', (err) => {
          this.log.warn({ err, dir }, 'watching the TLS directory failed; falling back to periodic checks');
          watcher.close();
          this.watchers = this.watchers.filter((w) => w !== watcher);
        });
        this.watchers.push(watcher);
      } catch (err) {
        this.log.warn({ err, dir }, 'cannot watch the TLS directory; relying on periodic checks');
      }
    }
  }

  private settleThenReload(): void {
    clearTimeout(this.settleTimer);
    this.settleTimer = setTimeout(() => this.reload(), SETTLE_MS);
  }

  /** Reads both files and swaps them in when they form a new pair; returns why not, when they do not. */
  private reload(): string | undefined {
    this.signatures = this.fileSignatures();
    let certPem: string;
    let keyPem: string;
    try {
      certPem = fs.readFileSync(this.opts.certFile, 'utf8');
      keyPem = fs.readFileSync(this.opts.keyFile, 'utf8');
    } catch (err) {
      const problem = `cannot read: ${err instanceof Error ? err.message : String(err)}`;
      if (this.served) this.log.warn({ problem }, 'keeping the certificate served');
      return problem;
    }
    if (this.served?.certPem === certPem && this.served.keyPem === keyPem) return undefined;
    if (!keyMatchesCertificate(certPem, keyPem)) {
      // usually a writer between the two files; the next event or check reads the finished pair
      const problem = 'the key is not the key of the certificate';
      if (this.served) this.log.info({ problem }, 'TLS files changed but do not match yet; keeping the certificate served');
      return problem;
    }
    this.served = { certPem, keyPem };
    this.log.info({ fingerprint: certificateFingerprint(certPem) }, 'serving certificate loaded from files');
    for (const listener of this.listeners) listener(this.served);
    return undefined;
  }
}
