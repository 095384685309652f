import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../tls/certificates.js';
import { freePort } from './ports.js';
import { ProcessGroup, processAlive, type GroupProcess } from './process-group.js';
import { waitFor } from './wait.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BUILD_SCRIPT = 'build-binaries.sh';
const NEEDED_BINARIES = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kubectl'];
/**
 * What a user relies on in a cluster: namespaces delete, each gets its `default` ServiceAccount,
 * owners collect their dependants, PVCs in use are protected, PodDisruptionBudgets report, and the
 * workload kinds run. No node-lifecycle: the fake kubelet's Node never heartbeats.
 */
export const CONTROLLERS = [
  'namespace-controller',
  'serviceaccount-controller',
  'garbage-collector-controller',
  'persistentvolumeclaim-protection-controller',
  'disruption-controller',
  'statefulset-controller',
  'deployment-controller',
  'replicaset-controller',
  'daemonset-controller',
];
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
  /** the last lines of every process log, to explain a failure */
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

/**
 * The folder of etcd, kube-apiserver, kube-controller-manager and kubectl: $KUBEBUILDER_ASSETS when set,
 * else what build-binaries.sh (beside this module's source) prints, which builds them with Go on first use.
 */
export function controlPlaneBinaries(): string {
  const assets = process.env.KUBEBUILDER_ASSETS;
  if (assets) {
    const missing = NEEDED_BINARIES.filter((b) => !isExecutable(path.join(assets, b)));
    if (missing.length > 0) throw new Error(`KUBEBUILDER_ASSETS=${assets} has no executable ${missing.join(', ')}`);
    return assets;
  }
  const out = execFileSync('bash', [devScript(BUILD_SCRIPT)], { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
  return out.trim().split('\n').pop() ?? '';
}

/**
 * A build script of src/dev, from the source tree or from its compiled copy in dist/src/dev.
 * The container image has neither (nor bash, nor Go): there the error says what to do instead.
 */
export function devScript(name: string): string {
  for (let dir = HERE; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'src', 'dev', name);
    if (fs.existsSync(candidate)) return candidate;
    if (path.dirname(dir) === dir) {
      throw new Error(
        `no src/dev/${name} above ${HERE}: rollguard dev builds its control plane from a clone of the repository; ` +
          `elsewhere (the container image) set KUBEBUILDER_ASSETS to a folder holding ${NEEDED_BINARIES.join(', ')}`,
      );
    }
  }
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  reapOrphans();
  const binDir = controlPlaneBinaries();
  const dir = opts.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), STATE_PREFIX));
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'owner.pid'), String(process.pid));
  const group = new ProcessGroup(dir, path.join(dir, 'pids'));
  const launch = (name: string, args: string[]): GroupProcess => group.launch(name, path.join(binDir, name), args);
  const alive = (p: GroupProcess): void => group.alive(p);
  const logTail = (lines?: number): string => group.logTail(lines);
  const stop = async (): Promise<void> => {
    await group.stopAll();
    if (!process.env.ROLLGUARD_KEEP_CONTROL_PLANE && opts.dir === undefined) {
      fs.rmSync(dir, { recursive: true, force: true });
    }
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
    let apiserver: GroupProcess | undefined;
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
      if (apiserver !== undefined) await group.terminate(apiserver);
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
        `--controllers=${CONTROLLERS.join(',')}`,
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
  const ca = await createCertificateAuthority({ ...common, commonName: 'rollguard-local-ca' });
  const apiserver = await createSignedCertificate(ca, {
    ...common,
    commonName: 'kube-apiserver',
    usage: 'server',
    dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
    ipAddresses: ['127.0.0.1', '10.0.0.1'],
  });
  const admin = await createSignedCertificate(ca, {
    ...common,
    commonName: 'rollguard-admin',
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
      '    users: ["system:kube-controller-manager", "system:apiserver", "rollguard-admin"]',
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
      clusters: [{ name: 'rollguard-local', cluster: { server, 'certificate-authority-data': b64(caPem) } }],
      users: [{ name: user, user: { 'client-certificate-data': b64(cred.certPem), 'client-key-data': b64(cred.keyPem) } }],
      contexts: [{ name: 'rollguard-local', context: { cluster: 'rollguard-local', user } }],
      'current-context': 'rollguard-local',
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
    if (entry.startsWith(STATE_PREFIX)) reapLeftovers(path.join(tmp, entry));
  }
}

/**
 * Kills the processes of a control plane whose state is in `dir` and whose owner died without
 * stopping them (a `rollguard dev` killed with SIGKILL), and removes the folder.
 * Returns the owner's pid when it still runs (and leaves everything alone).
 */
export function reapLeftovers(dir: string): number | undefined {
  let owner: number;
  try {
    owner = Number(fs.readFileSync(path.join(dir, 'owner.pid'), 'utf8'));
  } catch {
    return undefined;
  }
  if (processAlive(owner)) return owner;
  const pids = fs.existsSync(path.join(dir, 'pids')) ? fs.readFileSync(path.join(dir, 'pids'), 'utf8').split('\n') : [];
  for (const pid of pids.map(Number).filter((p) => p > 0)) {
    if (processAlive(pid) && isControlPlaneProcess(pid)) process.kill(pid, 'SIGKILL');
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return undefined;
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
