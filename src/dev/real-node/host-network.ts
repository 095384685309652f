import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { NODE_NETWORK } from './configs.js';

const FENCE_CHAIN = 'ROLLGUARD-NODE-FENCE';
const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';
/** Chains a kubelet makes whatever it is told; a later run would find their DROP of non-loopback traffic to 127/8. */
const KUBELET_CHAINS: Array<[table: string, chain: string]> = [
  ['filter', 'KUBE-FIREWALL'],
  ['filter', 'KUBE-KUBELET-CANARY'],
  ['nat', 'KUBE-KUBELET-CANARY'],
  ['mangle', 'KUBE-KUBELET-CANARY'],
  ['mangle', 'KUBE-IPTABLES-HINT'],
];

function run(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function attempt(cmd: string, args: string[]): boolean {
  try {
    run(cmd, args);
    return true;
  } catch {
    return false;
  }
}

/**
 * The node's network on this machine: the pod bridge carrying the node's address, the Service
 * range routed to an empty bridge (a ClusterIP kube-proxy did not rewrite goes nowhere, never out
 * of the machine), and a fence in FORWARD: the pod bridge forwards only to itself.
 * Returns what `removeHostNetwork` needs to restore.
 */
export function setUpHostNetwork(): { ipForward: string } {
  removeHostNetwork();
  const ipForward = fs.readFileSync(IP_FORWARD, 'utf8').trim();
  const { podBridge, serviceBridge, nodeIp, podCidr, serviceCidr } = NODE_NETWORK;
  const prefix = podCidr.split('/')[1]!;
  run('ip', ['link', 'add', podBridge, 'type', 'bridge']);
  run('ip', ['addr', 'add', `${nodeIp}/${prefix}`, 'dev', podBridge]);
  run('ip', ['link', 'set', podBridge, 'up']);
  run('ip', ['link', 'add', serviceBridge, 'type', 'bridge']);
  run('ip', ['link', 'set', serviceBridge, 'up']);
  run('ip', ['route', 'add', serviceCidr, 'dev', serviceBridge]);
  run('iptables', ['-w', '-N', FENCE_CHAIN]);
  run('iptables', ['-w', '-A', FENCE_CHAIN, '-i', podBridge, '-o', podBridge, '-j', 'ACCEPT']);
  run('iptables', ['-w', '-A', FENCE_CHAIN, '-i', podBridge, '-j', 'DROP']);
  run('iptables', ['-w', '-A', FENCE_CHAIN, '-o', podBridge, '-j', 'DROP']);
  run('iptables', ['-w', '-I', 'FORWARD', '1', '-j', FENCE_CHAIN]);
  // a pod reaching another through a ClusterIP is forwarded bridge to bridge (the fence allows nothing else)
  fs.writeFileSync(IP_FORWARD, '1');
  return { ipForward };
}

/** Undoes `setUpHostNetwork` and whatever kube-proxy and the kubelet left in iptables; safe to repeat. */
export function removeHostNetwork(saved?: { ipForward: string }, kubeProxy?: string): void {
  if (saved) fs.writeFileSync(IP_FORWARD, saved.ipForward);
  if (kubeProxy) attempt(kubeProxy, ['--cleanup']);
  while (attempt('iptables', ['-w', '-D', 'FORWARD', '-j', FENCE_CHAIN]));
  attempt('iptables', ['-w', '-F', FENCE_CHAIN]);
  attempt('iptables', ['-w', '-X', FENCE_CHAIN]);
  for (const [table, chain] of KUBELET_CHAINS) {
    for (const parent of ['INPUT', 'OUTPUT', 'FORWARD', 'PREROUTING', 'POSTROUTING']) {
      while (attempt('iptables', ['-w', '-t', table, '-D', parent, '-j', chain]));
    }
    attempt('iptables', ['-w', '-t', table, '-F', chain]);
    attempt('iptables', ['-w', '-t', table, '-X', chain]);
  }
  attempt('ip', ['route', 'del', NODE_NETWORK.serviceCidr, 'dev', NODE_NETWORK.serviceBridge]);
  for (const bridge of [NODE_NETWORK.serviceBridge, NODE_NETWORK.podBridge]) attempt('ip', ['link', 'del', bridge]);
}

/** Unmounts every mount at or below `dir`, deepest first (the kubelet's volumes, containerd's rootfs and shm). */
export function unmountBelow(dir: string): void {
  const mounts = fs
    .readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[1]?.replace(/\\040/g, ' '))
    .filter((m): m is string => m !== undefined && (m === dir || m.startsWith(`${dir}/`)))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) attempt('umount', ['-l', m]);
}

/** Removes a network namespace the CNI plugin's sandbox used, once no process holds it. */
export function removeNetns(path: string): void {
  attempt('umount', ['-l', path]);
  fs.rmSync(path, { force: true });
}
