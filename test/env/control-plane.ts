import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../../src/tls/certificates.js';
import { freePort } from './ports.js';
import { waitFor } from './wait.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** The repo root, whether this runs from test/env or from its compiled copy in dist/test/env. */
const REPO_ROOT = findRepoRoot(HERE);
const STATE_PREFIX = 'rollguard-cp-';
const CERT_VALIDITY_SECONDS = 7 * 24 * 3600;

export interface ControlPlane {
  /** https://127.0.0.1:PORT */
  server: string;
  /** kubeconfig of a system:masters user */
  kubeconfigPath: string;
  dir: string;
  binDir: string;
  ca: KeyPairPem;
  /** http://127.0.0.1:PORT, etcd's client URL (it serves the v3 JSON gateway, e.g. POST /v3/kv/compaction) */
  etcdUrl: string;
  /** the last lines of every process log, for a failing test */
  logTail(lines?: number): string;
  /** SIGTERM to kube-apiserver alone; etcd (and the controller manager) keep running. */
  stopApiServer(): Promise<void>;
  /** kube-apiserver again, on the same port and etcd, once stopped; resolves when /readyz answers 200. */
  startApiServer(): Promise<void>;
  stop(): Promise<void>;
}

export interface ControlPlaneOptions {
  /** where PKI, logs and etcd data go; a fresh temp folder by default */
  dir?: string;
  controllerManager?: boolean;
  /** more kube-apiserver flags, e.g. `--watch-cache-sizes=configmaps#0` */
  apiServerArgs?: string[];
}

interface Proc {
  name: string;
  child: ChildProcess;
  logFile: string;
  exited: Promise<void>;
  exitCode?: number | null;
}

/** Path of the etcd/kube-apiserver/kube-controller-manager binaries (builds them on first use). */
export function controlPlaneBinaries(): string {
  const script = path.join(REPO_ROOT, 'test', 'env', 'build-binaries.sh');
  const out = execFileSync('bash', [script], { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
  return out.trim().split('\n').pop() ?? '';
}

export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  reapOrphans();
  const binDir = controlPlaneBinaries();
  const dir = opts.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), STATE_PREFIX));
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'owner.pid'), String(process.pid));
  const procs: Proc[] = [];
  const killAll = (): void => {
    for (const p of procs) if (p.exitCode === undefined) p.child.kill('SIGKILL');
  };
  process.on('exit', killAll);

  const logTail = (lines = 40): string =>
    procs
      .map((p) => {
        const text = fs.existsSync(p.logFile) ? fs.readFileSync(p.logFile, 'utf8') : '';
        return `--- ${p.name} (${p.logFile}) ---\n${text.split('\n').slice(-lines).join('\n')}`;
      })
      .join('\n');

  const terminate = async (p: Proc): Promise<void> => {
    if (p.exitCode !== undefined) return;
    p.child.kill('SIGTERM');
    const timer = setTimeout(() => p.child.kill('SIGKILL'), 10_000);
    await p.exited;
    clearTimeout(timer);
  };
  const stop = async (): Promise<void> => {
    for (const p of [...procs].reverse()) await terminate(p);
    process.off('exit', killAll);
    if (!process.env.ROLLGUARD_KEEP_CONTROL_PLANE && opts.dir === undefined) {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  };

  const launch = (name: string, args: string[]): Proc => {
    const logFile = path.join(dir, `${name}.log`);
    const fd = fs.openSync(logFile, 'a');
    const child = spawn(path.join(binDir, name), args, { stdio: ['ignore', fd, fd] });
    fs.closeSync(fd);
    const proc: Proc = { name, child, logFile, exited: Promise.resolve() };
    proc.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        proc.exitCode = code ?? (signal ? -1 : null);
        resolve();
      });
      child.on('error', () => {
        proc.exitCode = -1;
        resolve();
      });
    });
    procs.push(proc);
    fs.appendFileSync(path.join(dir, 'pids'), `${child.pid}\n`);
    return proc;
  };

  const alive = (p: Proc): void => {
    if (p.exitCode !== undefined) throw new Error(`${p.name} exited with ${p.exitCode}\n${logTail(30)}`);
  };

  try {
    const pki = await writePki(dir);

    const etcdPort = await freePort();
    const peerPort = await freePort();
    const etcd = launch('etcd', [
      '--name=default',
      `--data-dir=${path.join(dir, 'etcd')}`,
      `--listen-client-urls=http://127.0.0.1:${etcdPort}`,
      `--advertise-client-urls=http://127.0.0.1:${etcdPort}`,
      `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-cluster=default=http://127.0.0.1:${peerPort}`,
      '--unsafe-no-fsync',
      '--log-level=warn',
    ]);
    await waitFor('etcd /health', async () => {
      alive(etcd);
      const res = await fetch(`http://127.0.0.1:${etcdPort}/health`);
      return res.ok ? true : undefined;
    }, { timeoutMs: 60_000 });

    const etcdUrl = `http://127.0.0.1:${etcdPort}`;
    const apiPort = await freePort();
    const server = `https://127.0.0.1:${apiPort}`;
    const apiServerArgs = [
      `--etcd-servers=${etcdUrl}`,
      `--cert-dir=${path.join(dir, 'apiserver-certs')}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--secure-port=${apiPort}`,
      `--tls-cert-file=${pki.file('apiserver.crt')}`,
      `--tls-private-key-file=${pki.file('apiserver.key')}`,
      `--client-ca-file=${pki.file('ca.crt')}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${pki.file('sa.pub')}`,
      `--service-account-signing-key-file=${pki.file('sa.key')}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--authorization-mode=RBAC',
      '--disable-admission-plugins=ServiceAccount',
      '--allow-privileged=true',
      '--endpoint-reconciler-type=none',
      // every request's user, verb and resource: the RBAC test compares them with deploy/'s roles
      `--audit-policy-file=${pki.file('audit-policy.yaml')}`,
      `--audit-log-path=${path.join(dir, 'audit.log')}`,
      '--audit-log-format=json',
      '--profiling=false',
      '--v=1',
      ...(opts.apiServerArgs ?? []),
    ];
    let apiserver: Proc | undefined;
    const startApiServer = async (): Promise<void> => {
      if (apiserver !== undefined && apiserver.exitCode === undefined) throw new Error('kube-apiserver is running already');
      const proc = launch('kube-apiserver', apiServerArgs);
      apiserver = proc;
      await waitFor('kube-apiserver /readyz', async () => {
        alive(proc);
        return (await httpsGet(`${server}/readyz`, pki.admin, pki.ca.certPem)) === 200 ? true : undefined;
      }, { timeoutMs: 120_000, intervalMs: 250 });
    };
    const stopApiServer = async (): Promise<void> => {
      if (apiserver !== undefined) await terminate(apiserver);
    };
    await startApiServer();

    const kubeconfigPath = path.join(dir, 'admin.kubeconfig');
    fs.writeFileSync(kubeconfigPath, kubeconfig(server, pki.ca.certPem, 'admin', pki.admin));

    if (opts.controllerManager !== false) {
      const kcmKubeconfig = path.join(dir, 'kcm.kubeconfig');
      fs.writeFileSync(kcmKubeconfig, kubeconfig(server, pki.ca.certPem, 'kcm', pki.kcm));
      const kcmPort = await freePort();
      const kcm = launch('kube-controller-manager', [
        `--kubeconfig=${kcmKubeconfig}`,
        '--controllers=statefulset-controller,garbage-collector-controller',
        '--leader-elect=false',
        '--use-service-account-credentials=false',
        '--bind-address=127.0.0.1',
        `--secure-port=${kcmPort}`,
        `--cert-dir=${path.join(dir, 'kcm-certs')}`,
        '--concurrent-statefulset-syncs=5',
        '--profiling=false',
        '--v=1',
      ]);
      await waitFor('kube-controller-manager /healthz', async () => {
        alive(kcm);
        return (await httpsGet(`https://127.0.0.1:${kcmPort}/healthz`)) === 200 ? true : undefined;
      }, { timeoutMs: 60_000, intervalMs: 250 });
    }

    return { server, kubeconfigPath, dir, binDir, ca: pki.ca, etcdUrl, logTail, stopApiServer, startApiServer, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

interface Pki {
  ca: KeyPairPem;
  admin: KeyPairPem;
  kcm: KeyPairPem;
  file(name: string): string;
}

async function writePki(dir: string): Promise<Pki> {
  const pkiDir = path.join(dir, 'pki');
  fs.mkdirSync(pkiDir, { recursive: true });
  const file = (name: string): string => path.join(pkiDir, name);
  const common = { validitySeconds: CERT_VALIDITY_SECONDS, keyBits: 2048 };
  const ca = await createCertificateAuthority({ ...common, commonName: 'rollguard-test-ca' });
  const apiserver = await createSignedCertificate(ca, {
    ...common,
    commonName: 'kube-apiserver',
    usage: 'server',
    dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
    ipAddresses: ['127.0.0.1', '10.0.0.1'],
  });
  const admin = await createSignedCertificate(ca, {
    ...common,
    commonName: 'rollguard-test-admin',
    organizations: ['system:masters'],
    usage: 'client',
  });
  // one identity for every controller (no per-controller service accounts in tests)
  const kcm = await createSignedCertificate(ca, {
    ...common,
    commonName: 'system:kube-controller-manager',
    organizations: ['system:masters'],
    usage: 'client',
  });
  const sa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  fs.writeFileSync(file('ca.crt'), ca.certPem);
  // tests sign client certificates of their own (a service account's identity) with it
  fs.writeFileSync(file('ca.key'), ca.keyPem, { mode: 0o600 });
  fs.writeFileSync(
    file('audit-policy.yaml'),
    [
      'apiVersion: audit.k8s.io/v1',
      'kind: Policy',
      'omitStages: [RequestReceived]',
      'rules:',
      '  - level: None',
      '    users: ["system:kube-controller-manager", "system:apiserver", "rollguard-test-admin"]',
      '  - level: Metadata',
      '',
    ].join('\n'),
  );
  fs.writeFileSync(file('apiserver.crt'), apiserver.certPem);
  fs.writeFileSync(file('apiserver.key'), apiserver.keyPem, { mode: 0o600 });
  fs.writeFileSync(file('sa.pub'), sa.publicKey.export({ type: 'spki', format: 'pem' }));
  fs.writeFileSync(file('sa.key'), sa.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  return { ca, admin, kcm, file };
}

export function kubeconfig(server: string, caPem: string, user: string, cred: KeyPairPem): string {
  const b64 = (s: string): string => Buffer.from(s).toString('base64');
  return JSON.stringify(
    {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'rollguard-test', cluster: { server, 'certificate-authority-data': b64(caPem) } }],
      users: [{ name: user, user: { 'client-certificate-data': b64(cred.certPem), 'client-key-data': b64(cred.keyPem) } }],
      contexts: [{ name: 'rollguard-test', context: { cluster: 'rollguard-test', user } }],
      'current-context': 'rollguard-test',
    },
    null,
    2,
  );
}

function httpsGet(url: string, cred?: KeyPairPem, caPem?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      url,
      {
        cert: cred?.certPem,
        key: cred?.keyPem,
        ca: caPem,
        rejectUnauthorized: caPem !== undefined,
        timeout: 2_000,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
  });
}

/** Kills what an earlier run left behind when its owner died without stopping it. */
function reapOrphans(): void {
  const tmp = os.tmpdir();
  for (const entry of fs.readdirSync(tmp)) {
    if (!entry.startsWith(STATE_PREFIX)) continue;
    const dir = path.join(tmp, entry);
    let owner: number;
    try {
      owner = Number(fs.readFileSync(path.join(dir, 'owner.pid'), 'utf8'));
    } catch {
      continue;
    }
    if (processAlive(owner)) continue;
    const pids = fs.existsSync(path.join(dir, 'pids')) ? fs.readFileSync(path.join(dir, 'pids'), 'utf8').split('\n') : [];
    for (const pid of pids.map(Number).filter((p) => p > 0)) {
      if (processAlive(pid) && isControlPlaneProcess(pid)) process.kill(pid, 'SIGKILL');
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Guards against a recycled pid: only our own binaries are killed. */
function isControlPlaneProcess(pid: number): boolean {
  try {
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return /\/(etcd|kube-apiserver|kube-controller-manager)\0/.test(cmd);
  } catch {
    return false;
  }
}

function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function findRepoRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'test', 'env', 'build-binaries.sh'))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`no test/env/build-binaries.sh above ${from}`);
  }
}

/**
 * Compacts etcd at its current revision through its v3 JSON gateway (no etcdctl is built);
 * returns that revision: every resourceVersion below it is gone from etcd.
 */
export async function compactEtcd(etcdUrl: string): Promise<number> {
  const post = async (call: string, body: unknown): Promise<Record<string, unknown>> => {
    const res = await fetch(`${etcdUrl}/v3/kv/${call}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
    const answer = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`etcd ${call}: ${res.status} ${JSON.stringify(answer)}`);
    return answer;
  };
  const range = await post('range', { key: Buffer.from('/registry/').toString('base64'), count_only: true });
  const revision = Number((range.header as { revision?: unknown } | undefined)?.revision);
  if (!Number.isInteger(revision) || revision <= 0) throw new Error(`etcd range: no revision in ${JSON.stringify(range)}`);
  await post('compaction', { revision: String(revision), physical: true });
  return revision;
}
