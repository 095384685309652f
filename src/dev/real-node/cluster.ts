import { execFile, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { createCertificateAuthority, createSignedCertificate, type KeyPairPem } from '../../tls/certificates.js';
import { controlPlaneBinaries, devScript, kubeconfig } from '../control-plane.js';
import { freePort } from '../ports.js';
import { ProcessGroup, processAlive, type GroupProcess } from '../process-group.js';
import { waitFor } from '../wait.js';
import { cniConfig, containerdConfig, kubeletConfig, kubeProxyConfig, NODE_NETWORK, nodePaths } from './configs.js';
import { removeHostNetwork, removeNetns, setUpHostNetwork, unmountBelow } from './host-network.js';

const execFileAsync = promisify(execFile);
/** One real node per machine: its bridges, iptables rules and containerd socket have fixed names. */
const RUN_DIR = '/run/rollguard-node';
const PERSISTENT_DIR = '/var/lib/rollguard-node';
const OWNER_FILE = `${RUN_DIR}.owner`;
const PIDS_FILE = `${RUN_DIR}.pids`;
const CERT_VALIDITY_SECONDS = 7 * 24 * 3600;
const OWN_BINARIES = /\/(etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|containerd)\0/;

export interface RealCluster {
  /** https://<node address>:PORT: the API server listens on the node's address, never on the machine's interfaces */
  server: string;
  /** kubeconfig of a system:masters user */
  kubeconfigPath: string;
  dir: string;
  ca: KeyPairPem;
  kubectlPath: string;
  /** kubectl with the admin kubeconfig; the error carries its output */
  kubectl(args: string[], input?: string): Promise<string>;
  /** the last lines of every process's log, to explain a failure */
  logTail(lines?: number): string;
  /** stops every container, process, mount, netns, bridge and iptables rule the cluster made */
  stop(): Promise<void>;
}

export interface RealClusterOptions {
  /** docker-archives (build-images.sh) imported into containerd's k8s.io namespace before the kubelet starts */
  imageArchives: string[];
  /** more kube-apiserver flags */
  apiServerArgs?: string[];
}


/** The folder of kubelet, kube-scheduler and kube-proxy, built by build-binaries.sh node on first use. */
export function nodeBinaries(): string {
  const out = execFileSync('bash', [devScript('build-binaries.sh'), 'node'], { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' });
  return out.trim().split('\n').pop() ?? '';
}

/** Builds the images of a real node from the repository at `repo` (build-images.sh); returns their archives. */
export function buildNodeImages(repo: string, extraTags: string[] = []): string[] {
  const out = execFileSync('bash', [devScript('real-node/build-images.sh'), repo, ...extraTags], {
    stdio: ['ignore', 'pipe', 'inherit'],
    encoding: 'utf8',
  });
  const dir = out.trim().split('\n').pop() ?? '';
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.tar'))
    .map((f) => path.join(dir, f));
}

/**
 * A control plane configured as a real cluster's (ServiceAccount admission, the Node authorizer,
 * every default controller, the `kubernetes` Service's endpoint reconciled) and one real node:
 * containerd with runc, the CNI bridge, a kubelet, kube-scheduler and kube-proxy. Root only.
 */
export async function startRealCluster(opts: RealClusterOptions): Promise<RealCluster> {
  if (process.getuid?.() !== 0) throw new Error('a real node needs root (containerd, runc, bridges, iptables)');
  claimNode();
  const binDir = controlPlaneBinaries();
  const nodeBinDir = nodeBinaries();
  const dir = path.join(RUN_DIR, 'cluster');
  fs.mkdirSync(dir, { recursive: true });
  const paths = nodePaths(PERSISTENT_DIR, RUN_DIR);
  const group = new ProcessGroup(dir, PIDS_FILE);
  let savedNetwork: { ipForward: string } | undefined;
  const kubectlPath = path.join(binDir, 'kubectl');
  const kubeconfigPath = path.join(dir, 'admin.kubeconfig');
  const ctr = (args: string[]): string =>
    execFileSync('ctr', ['--address', paths.containerdSocket, '--namespace', 'k8s.io', ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

  const launch = (name: string, binary: string, args: string[]): GroupProcess => group.launch(name, binary, args);
  const alive = (p: GroupProcess): void => group.alive(p);
  const logTail = (lines?: number): string => group.logTail(lines);

  const stop = async (): Promise<void> => {
    for (const name of ['kube-proxy', 'kubelet']) {
      const p = group.byName(name);
      if (p) await group.terminate(p);
    }
    const containerd = group.byName('containerd');
    if (containerd && containerd.exitCode === undefined) removeAllContainers(ctr);
    await group.stopAll();
    unmountBelow(RUN_DIR);
    removeHostNetwork(savedNetwork, path.join(nodeBinDir, 'kube-proxy'));
    if (!process.env.ROLLGUARD_KEEP_CONTROL_PLANE) fs.rmSync(RUN_DIR, { recursive: true, force: true });
    fs.rmSync(PIDS_FILE, { force: true });
    fs.rmSync(OWNER_FILE, { force: true });
  };

  try {
    savedNetwork = setUpHostNetwork();
    const pki = await writePki(dir);
    const { nodeIp } = NODE_NETWORK;

    const etcdPort = await freePort();
    const peerPort = await freePort();
    const etcd = launch('etcd', path.join(binDir, 'etcd'), [
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
      return (await fetch(`http://127.0.0.1:${etcdPort}/health`)).ok ? true : undefined;
    }, { timeoutMs: 60_000 });

    const apiPort = await freePort();
    const server = `https://${nodeIp}:${apiPort}`;
    const apiserver = launch('kube-apiserver', path.join(binDir, 'kube-apiserver'), [
      `--etcd-servers=http://127.0.0.1:${etcdPort}`,
      `--cert-dir=${path.join(dir, 'apiserver-certs')}`,
      `--bind-address=${nodeIp}`,
      `--advertise-address=${nodeIp}`,
      `--secure-port=${apiPort}`,
      `--tls-cert-file=${pki.file('apiserver.crt')}`,
      `--tls-private-key-file=${pki.file('apiserver.key')}`,
      `--client-ca-file=${pki.file('ca.crt')}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${pki.file('sa.pub')}`,
      `--service-account-signing-key-file=${pki.file('sa.key')}`,
      `--service-cluster-ip-range=${NODE_NETWORK.serviceCidr}`,
      '--authorization-mode=Node,RBAC',
      '--enable-admission-plugins=NodeRestriction',
      '--allow-privileged=true',
      `--kubelet-client-certificate=${pki.file('apiserver-kubelet-client.crt')}`,
      `--kubelet-client-key=${pki.file('apiserver-kubelet-client.key')}`,
      `--kubelet-certificate-authority=${pki.file('ca.crt')}`,
      '--kubelet-preferred-address-types=InternalIP',
      '--profiling=false',
      '--v=1',
      ...(opts.apiServerArgs ?? []),
    ]);
    fs.writeFileSync(kubeconfigPath, kubeconfig(server, pki.ca.certPem, 'admin', pki.cred('admin')));
    const kubectl = async (args: string[], input?: string): Promise<string> => runKubectl(kubectlPath, kubeconfigPath, args, input);
    await waitFor('kube-apiserver /readyz', async () => {
      alive(apiserver);
      return (await kubectl(['get', '--raw', '/readyz'])).trim() === 'ok' ? true : undefined;
    }, { timeoutMs: 120_000, intervalMs: 500 });

    const writeKubeconfig = (user: string): string => {
      const file = path.join(dir, `${user}.kubeconfig`);
      fs.writeFileSync(file, kubeconfig(server, pki.ca.certPem, user, pki.cred(user)));
      return file;
    };
    const kcmPort = await freePort();
    const kcm = launch('kube-controller-manager', path.join(binDir, 'kube-controller-manager'), [
      `--kubeconfig=${writeKubeconfig('kcm')}`,
      '--controllers=*',
      '--use-service-account-credentials=true',
      `--service-account-private-key-file=${pki.file('sa.key')}`,
      `--root-ca-file=${pki.file('ca.crt')}`,
      `--cluster-signing-cert-file=${pki.file('ca.crt')}`,
      `--cluster-signing-key-file=${pki.file('ca.key')}`,
      '--leader-elect=false',
      '--bind-address=127.0.0.1',
      `--secure-port=${kcmPort}`,
      `--cert-dir=${path.join(dir, 'kcm-certs')}`,
      '--profiling=false',
      '--v=1',
    ]);
    const schedulerPort = await freePort();
    const scheduler = launch('kube-scheduler', path.join(nodeBinDir, 'kube-scheduler'), [
      `--kubeconfig=${writeKubeconfig('scheduler')}`,
      '--leader-elect=false',
      '--bind-address=127.0.0.1',
      `--secure-port=${schedulerPort}`,
      '--profiling=false',
      '--v=1',
    ]);

    fs.mkdirSync(paths.cniConfDir, { recursive: true });
    fs.writeFileSync(path.join(paths.cniConfDir, '10-rollguard-node.conflist'), cniConfig(paths));
    fs.mkdirSync(path.dirname(paths.containerdSocket), { recursive: true });
    const containerdToml = path.join(dir, 'containerd.toml');
    fs.writeFileSync(containerdToml, containerdConfig(paths));
    const containerd = launch('containerd', 'containerd', ['--config', containerdToml]);
    await waitFor('containerd', () => {
      alive(containerd);
      ctr(['version']);
      return true;
    }, { timeoutMs: 30_000, intervalMs: 200 });
    // whatever an earlier run that died left in containerd
    removeAllContainers(ctr);
    for (const archive of opts.imageArchives) ctr(['images', 'import', archive]);

    const kubeletPort = await freePort();
    const kubeletHealthz = await freePort();
    const kubeletYaml = path.join(dir, 'kubelet.json');
    fs.writeFileSync(
      kubeletYaml,
      kubeletConfig({
        paths,
        caFile: pki.file('ca.crt'),
        tlsCertFile: pki.file('kubelet-serving.crt'),
        tlsKeyFile: pki.file('kubelet-serving.key'),
        port: kubeletPort,
        healthzPort: kubeletHealthz,
      }),
    );
    const kubelet = launch('kubelet', path.join(nodeBinDir, 'kubelet'), [
      `--config=${kubeletYaml}`,
      `--kubeconfig=${writeKubeconfig('kubelet')}`,
      `--root-dir=${paths.kubeletRoot}`,
      `--cert-dir=${path.join(dir, 'kubelet-certs')}`,
      `--hostname-override=${NODE_NETWORK.nodeName}`,
      `--node-ip=${nodeIp}`,
      '--v=1',
    ]);
    const proxyHealthz = await freePort();
    const proxyYaml = path.join(dir, 'kube-proxy.json');
    fs.writeFileSync(
      proxyYaml,
      kubeProxyConfig({ kubeconfig: writeKubeconfig('kube-proxy'), healthzPort: proxyHealthz, metricsPort: await freePort() }),
    );
    const kubeProxy = launch('kube-proxy', path.join(nodeBinDir, 'kube-proxy'), [`--config=${proxyYaml}`, '--v=1']);

    await waitFor(`node ${NODE_NETWORK.nodeName} Ready`, async () => {
      for (const p of [kcm, scheduler, containerd, kubelet, kubeProxy]) alive(p);
      const ready = await kubectl(['get', 'node', NODE_NETWORK.nodeName, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}']);
      return ready.trim() === 'True' ? true : undefined;
    }, { timeoutMs: 120_000, intervalMs: 500 });
    await waitFor('the default ServiceAccount and kube-root-ca.crt', async () => {
      await kubectl(['get', 'serviceaccount', 'default', '-n', 'default']);
      await kubectl(['get', 'configmap', 'kube-root-ca.crt', '-n', 'default']);
      return true;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    await waitFor('kube-proxy /healthz', async () => {
      alive(kubeProxy);
      return (await fetch(`http://127.0.0.1:${proxyHealthz}/healthz`)).ok ? true : undefined;
    }, { timeoutMs: 60_000, intervalMs: 500 });

    return { server, kubeconfigPath, dir, ca: pki.ca, kubectlPath, kubectl, logTail, stop };
  } catch (err) {
    const tail = logTail(30);
    await stop();
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${tail}`, { cause: err });
  }
}

async function runKubectl(kubectlPath: string, kubeconfigPath: string, args: string[], input?: string): Promise<string> {
  try {
    if (input === undefined) {
      return (await execFileAsync(kubectlPath, ['--kubeconfig', kubeconfigPath, ...args], { maxBuffer: 64 * 1024 * 1024 })).stdout;
    }
    return execFileSync(kubectlPath, ['--kubeconfig', kubeconfigPath, ...args], { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
  } catch (err) {
    const { stderr = '', stdout = '' } = err as { stderr?: string | Buffer; stdout?: string | Buffer };
    throw new Error(`kubectl ${args.join(' ')} failed: ${(String(stderr) + String(stdout)).trim() || String(err)}`, { cause: err });
  }
}

/** Kills and removes every container of containerd's k8s.io namespace, and the network namespaces their sandboxes held. */
function removeAllContainers(ctr: (args: string[]) => string): void {
  const ids = ctr(['containers', 'list', '--quiet']).split('\n').filter(Boolean);
  const netns = new Set<string>();
  for (const id of ids) {
    try {
      const info = JSON.parse(ctr(['containers', 'info', id])) as { Spec?: { linux?: { namespaces?: Array<{ type: string; path?: string }> } } };
      for (const ns of info.Spec?.linux?.namespaces ?? []) if (ns.type === 'network' && ns.path) netns.add(ns.path);
    } catch {
      // its spec is unreadable: the container goes all the same
    }
    for (const args of [['tasks', 'kill', '--signal', 'SIGKILL', id], ['tasks', 'delete', '--force', id], ['containers', 'delete', id]]) {
      try {
        ctr(args);
      } catch {
        // no task, or already gone
      }
    }
  }
  for (const ns of netns) removeNetns(ns);
}

/**
 * Takes the machine's one real node: refuses while another live process holds it, and kills
 * what an owner that died left running.
 */
function claimNode(): void {
  try {
    const owner = Number(fs.readFileSync(OWNER_FILE, 'utf8'));
    if (owner !== process.pid && processAlive(owner)) throw new Error(`a real node runs already on this machine (pid ${owner} owns ${RUN_DIR})`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  if (fs.existsSync(PIDS_FILE)) {
    for (const pid of fs.readFileSync(PIDS_FILE, 'utf8').split('\n').map(Number).filter((p) => p > 0)) {
      if (processAlive(pid) && isOwnProcess(pid)) process.kill(pid, 'SIGKILL');
    }
  }
  unmountBelow(RUN_DIR);
  fs.rmSync(RUN_DIR, { recursive: true, force: true });
  fs.writeFileSync(PIDS_FILE, '');
  fs.writeFileSync(OWNER_FILE, String(process.pid));
}

function isOwnProcess(pid: number): boolean {
  try {
    return OWN_BINARIES.test(fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
  } catch {
    return false;
  }
}

interface Pki {
  ca: KeyPairPem;
  cred(user: string): KeyPairPem;
  file(name: string): string;
}

/** The cluster's PKI: one CA for serving, client and kubelet certificates, and the ServiceAccount signing key. */
async function writePki(dir: string): Promise<Pki> {
  const pkiDir = path.join(dir, 'pki');
  fs.mkdirSync(pkiDir, { recursive: true });
  const file = (name: string): string => path.join(pkiDir, name);
  const common = { validitySeconds: CERT_VALIDITY_SECONDS, keyBits: 2048 };
  const ca = await createCertificateAuthority({ ...common, commonName: 'rollguard-node-ca' });
  const write = (name: string, pair: KeyPairPem): void => {
    fs.writeFileSync(file(`${name}.crt`), pair.certPem);
    fs.writeFileSync(file(`${name}.key`), pair.keyPem, { mode: 0o600 });
  };
  write('ca', ca);
  const { nodeIp, kubernetesServiceIp, nodeName } = NODE_NETWORK;
  write(
    'apiserver',
    await createSignedCertificate(ca, {
      ...common,
      commonName: 'kube-apiserver',
      usage: 'server',
      dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc', 'kubernetes.default.svc.cluster.local'],
      ipAddresses: [nodeIp, '127.0.0.1', kubernetesServiceIp],
    }),
  );
  write('kubelet-serving', await createSignedCertificate(ca, { ...common, commonName: nodeName, usage: 'server', dnsNames: [nodeName], ipAddresses: [nodeIp] }));
  const clients: Record<string, { commonName: string; organizations?: string[] }> = {
    admin: { commonName: 'rollguard-admin', organizations: ['system:masters'] },
    kcm: { commonName: 'system:kube-controller-manager' },
    scheduler: { commonName: 'system:kube-scheduler' },
    'kube-proxy': { commonName: 'system:kube-proxy' },
    kubelet: { commonName: `system:node:${nodeName}`, organizations: ['system:nodes'] },
    'apiserver-kubelet-client': { commonName: 'kube-apiserver-kubelet-client', organizations: ['system:masters'] },
  };
  const creds = new Map<string, KeyPairPem>();
  for (const [name, subject] of Object.entries(clients)) {
    const pair = await createSignedCertificate(ca, { ...common, ...subject, usage: 'client' });
    write(name, pair);
    creds.set(name, pair);
  }
  const sa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  fs.writeFileSync(file('sa.pub'), sa.publicKey.export({ type: 'spki', format: 'pem' }));
  fs.writeFileSync(file('sa.key'), sa.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  const cred = (user: string): KeyPairPem => {
    const pair = creds.get(user);
    if (!pair) throw new Error(`no client certificate for ${user}`);
    return pair;
  };
  return { ca, cred, file };
}

