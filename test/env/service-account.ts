import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CoreV1Api, RbacAuthorizationV1Api, type KubeConfig } from '@kubernetes/client-node';

export interface ServiceAccountCredentials {
  /** a kubeconfig file with the account's token */
  kubeconfigPath: string;
  /** the username the API server knows it by */
  username: string;
  /** deletes the cluster-wide binding (the namespace holds the rest) */
  remove(): Promise<void>;
}

/**
 * A ServiceAccount bound to `clusterRole` cluster-wide, and a kubeconfig with a token of it: so
 * that rollguard runs as its own identity, apart from the test's (the admin's) writes, as it does
 * in a cluster.
 */
export async function serviceAccountCredentials(kc: KubeConfig, namespace: string, name: string, clusterRole = 'cluster-admin'): Promise<ServiceAccountCredentials> {
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  const binding = `${namespace}-${name}`;
  await rbac.createClusterRoleBinding({
    body: { metadata: { name: binding }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterRole }, subjects: [{ kind: 'ServiceAccount', name, namespace }] },
  });
  const token = await core.createNamespacedServiceAccountToken({ name, namespace, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the test kubeconfig has no current cluster');
  const ca = cluster.caData ?? fs.readFileSync(cluster.caFile!).toString('base64');
  const kubeconfigPath = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-sa-')), `${name}.kubeconfig`);
  fs.writeFileSync(
    kubeconfigPath,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'test', cluster: { server: cluster.server, 'certificate-authority-data': ca } }],
      users: [{ name, user: { token: token.status!.token } }],
      contexts: [{ name, context: { cluster: 'test', user: name, namespace } }],
      'current-context': name,
    }),
  );
  return {
    kubeconfigPath,
    username: `system:serviceaccount:${namespace}:${name}`,
    remove: async () => {
      await rbac.deleteClusterRoleBinding({ name: binding }).catch(() => undefined);
    },
  };
}
