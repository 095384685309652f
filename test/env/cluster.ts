import fs from 'node:fs';
import path from 'node:path';
import { AppsV1Api, CoreV1Api, KubeConfig, type V1DaemonSet, type V1Deployment, type V1StatefulSet } from '@kubernetes/client-node';
import { inject, onTestFailed } from 'vitest';

export interface TestCluster {
  kc: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
  kubeconfigPath: string;
}

/** Clients for the shared control plane that the integration project's global setup started. */
export function testCluster(): TestCluster {
  const kubeconfigPath = inject('kubeconfigPath');
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  return { kc, core: kc.makeApiClient(CoreV1Api), apps: kc.makeApiClient(AppsV1Api), kubeconfigPath };
}

/** A namespace of the test's own; deleted afterwards by the caller. */
export async function createNamespace(core: CoreV1Api, prefix: string): Promise<string> {
  const name = `${prefix}-${Math.random().toString(36).slice(2, 8)}`;
  await core.createNamespace({ body: { metadata: { name } } });
  return name;
}

/** On failure, prints the tail of every control plane log so the reason is in the test output. */
export function printControlPlaneLogsOnFailure(lines = 30): void {
  onTestFailed(() => {
    const dir = inject('controlPlaneDir');
    for (const name of ['kube-apiserver', 'kube-controller-manager', 'etcd']) {
      const file = path.join(dir, `${name}.log`);
      if (!fs.existsSync(file)) continue;
      const tail = fs.readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
      console.error(`--- last ${lines} lines of ${name} ---\n${tail}`);
    }
  });
}

export function statefulSet(
  name: string,
  opts: { replicas?: number; labels?: Record<string, string>; annotations?: Record<string, string>; image?: string } = {},
): V1StatefulSet {
  const selector = { app: name };
  return {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name, labels: opts.labels, annotations: opts.annotations },
    spec: {
      replicas: opts.replicas ?? 3,
      serviceName: name,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: selector },
        spec: { containers: [{ name: 'app', image: opts.image ?? 'registry.example/app:1' }] },
      },
    },
  };
}

export function deployment(
  name: string,
  opts: { replicas?: number; labels?: Record<string, string>; annotations?: Record<string, string>; image?: string } = {},
): V1Deployment {
  const selector = { app: name };
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, labels: opts.labels, annotations: opts.annotations },
    spec: {
      replicas: opts.replicas ?? 2,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: selector },
        spec: { containers: [{ name: 'app', image: opts.image ?? 'registry.example/app:1' }] },
      },
    },
  };
}

/** A DaemonSet: one pod per Node; the fake kubelet registers one Node and binds the pods the controller pins to it. */
export function daemonSet(
  name: string,
  opts: { labels?: Record<string, string>; annotations?: Record<string, string>; image?: string } = {},
): V1DaemonSet {
  const selector = { app: name };
  return {
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: { name, labels: opts.labels, annotations: opts.annotations },
    spec: {
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: selector },
        spec: { containers: [{ name: 'app', image: opts.image ?? 'registry.example/app:1' }] },
      },
    },
  };
}
