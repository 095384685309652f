/**
 * What a real node is configured with: addresses, and the config files of containerd, the CNI
 * bridge, the kubelet and kube-proxy. Pure: the values go in, the files' text comes out.
 */

/** Every address stays on this machine: the node's on the pod bridge, the Services' routed to an empty one. */
export const NODE_NETWORK = {
  nodeName: 'rollguard-node',
  podBridge: 'rgnode0',
  podCidr: '10.244.0.0/24',
  nodeIp: '10.244.0.1',
  serviceBridge: 'rgsvc0',
  serviceCidr: '10.96.0.0/24',
  /** the `kubernetes` Service's ClusterIP, the first of the range */
  kubernetesServiceIp: '10.96.0.1',
} as const;

/** The pod sandbox image, made locally by build-images.sh under the name the kubelet of this version expects. */
export const PAUSE_IMAGE = 'registry.k8s.io/pause:3.10.1';

export interface NodePaths {
  /** containerd's images and snapshots: kept between runs, so a warm run imports nothing new */
  containerdRoot: string;
  /** containerd's state, socket, the CNI config and IPAM state: one run's */
  runDir: string;
  containerdSocket: string;
  cniConfDir: string;
  cniIpamDir: string;
  kubeletRoot: string;
}

export function nodePaths(persistentDir: string, runDir: string): NodePaths {
  return {
    containerdRoot: `${persistentDir}/containerd`,
    runDir,
    containerdSocket: `${runDir}/containerd/containerd.sock`,
    cniConfDir: `${runDir}/cni`,
    cniIpamDir: `${runDir}/cni-ipam`,
    kubeletRoot: `${runDir}/kubelet`,
  };
}

export function containerdConfig(paths: NodePaths): string {
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return [
    'version = 2',
    `root = ${JSON.stringify(paths.containerdRoot)}`,
    `state = ${JSON.stringify(`${paths.runDir}/containerd/state`)}`,
    '[grpc]',
    `  address = ${JSON.stringify(paths.containerdSocket)}`,
    '[ttrpc]',
    `  address = ${JSON.stringify(`${paths.containerdSocket}.ttrpc`)}`,
    '[debug]',
    '  level = "warn"',
    // no metrics listener: nothing of this node listens beyond its sockets and loopback
    '[metrics]',
    '  address = ""',
    `[${cri}]`,
    `  sandbox_image = ${JSON.stringify(PAUSE_IMAGE)}`,
    // without CAP_SYS_RESOURCE no process here may lower its oom_score_adj
    '  restrict_oom_score_adj = true',
    '  stream_server_address = "127.0.0.1"',
    '  stream_server_port = "0"',
    '  enable_selinux = false',
    `[${cri}.containerd]`,
    '  snapshotter = "overlayfs"',
    '  default_runtime_name = "runc"',
    `[${cri}.containerd.runtimes.runc]`,
    '  runtime_type = "io.containerd.runc.v2"',
    `[${cri}.containerd.runtimes.runc.options]`,
    '  BinaryName = "/usr/sbin/runc"',
    '  SystemdCgroup = false',
    `[${cri}.cni]`,
    '  bin_dir = "/usr/lib/cni"',
    `  conf_dir = ${JSON.stringify(paths.cniConfDir)}`,
    '',
  ].join('\n');
}

/**
 * The pod network: one bridge, the node's address its gateway, no masquerade. A pod has routes to
 * the pod range and the Service range only, so nothing it sends can leave the machine.
 */
export function cniConfig(paths: NodePaths): string {
  return JSON.stringify(
    {
      cniVersion: '1.0.0',
      name: 'rollguard-node',
      plugins: [
        {
          type: 'bridge',
          bridge: NODE_NETWORK.podBridge,
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            dataDir: paths.cniIpamDir,
            ranges: [[{ subnet: NODE_NETWORK.podCidr, gateway: NODE_NETWORK.nodeIp }]],
            routes: [{ dst: NODE_NETWORK.serviceCidr }],
          },
        },
      ],
    },
    null,
    2,
  );
}

export interface KubeletConfigInput {
  paths: NodePaths;
  caFile: string;
  tlsCertFile: string;
  tlsKeyFile: string;
  port: number;
  healthzPort: number;
}

export function kubeletConfig(input: KubeletConfigInput): string {
  return JSON.stringify(
    {
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      address: NODE_NETWORK.nodeIp,
      port: input.port,
      readOnlyPort: 0,
      healthzBindAddress: '127.0.0.1',
      healthzPort: input.healthzPort,
      authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: input.caFile } },
      authorization: { mode: 'Webhook' },
      tlsCertFile: input.tlsCertFile,
      tlsPrivateKeyFile: input.tlsKeyFile,
      containerRuntimeEndpoint: `unix://${input.paths.containerdSocket}`,
      cgroupDriver: 'cgroupfs',
      // this machine has cgroup v1; the kubelet then warns and runs
      failCgroupV1: false,
      // without CAP_SYS_RESOURCE the kubelet cannot give itself a negative score
      oomScoreAdj: 0,
      failSwapOn: false,
      // no cluster DNS: pods get the machine's resolv.conf; in-cluster clients use KUBERNETES_SERVICE_HOST
      resolvConf: '/etc/resolv.conf',
      // the images are made locally and cannot be pulled again: never collect them, never evict for disk
      imageGCHighThresholdPercent: 100,
      imageGCLowThresholdPercent: 99,
      evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
      serializeImagePulls: false,
      maxPods: 60,
      // the kubelet's KUBE-FIREWALL rules would drop non-loopback traffic to 127/8 long after it stops
      makeIPTablesUtilChains: false,
    },
    null,
    2,
  );
}

export interface KubeProxyConfigInput {
  kubeconfig: string;
  healthzPort: number;
  metricsPort: number;
}

export function kubeProxyConfig(input: KubeProxyConfigInput): string {
  return JSON.stringify(
    {
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      mode: 'iptables',
      hostnameOverride: NODE_NETWORK.nodeName,
      clusterCIDR: NODE_NETWORK.podCidr,
      clientConnection: { kubeconfig: input.kubeconfig },
      healthzBindAddress: `127.0.0.1:${input.healthzPort}`,
      metricsBindAddress: `127.0.0.1:${input.metricsPort}`,
      // a NodePort opens on the node's address only, never on the machine's interfaces
      nodePortAddresses: [`${NODE_NETWORK.nodeIp}/32`],
      // a pod reaching a pod through a ClusterIP on the same bridge gets its answer back through the node
      iptables: { masqueradeAll: true, localhostNodePorts: false },
      // leave the machine's conntrack sysctls alone (no permission to raise them here)
      conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
    },
    null,
    2,
  );
}
