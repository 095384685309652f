/** A realistic review: 4 containers and an init container, 20 env refs each, volumes, ~11 KB of JSON. */
export function review(uid: string): string {
  const env = Array.from({ length: 20 }, (_, i) => ({
    name: `SETTING_${i}`,
    valueFrom: i % 2 ? { configMapKeyRef: { name: `config-${i % 5}`, key: `k${i}` } } : { secretKeyRef: { name: `secret-${i % 3}`, key: `k${i}` } },
  }));
  const container = (name: string) => ({
    name,
    image: `registry.example/${name}:1.2.3`,
    env,
    envFrom: [{ configMapRef: { name: 'shared-config' } }],
    resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
    ports: [{ containerPort: 8080, name: 'http' }],
    readinessProbe: { httpGet: { path: '/ready', port: 8080 }, periodSeconds: 5 },
    volumeMounts: [{ name: 'config', mountPath: '/etc/app' }, { name: 'tls', mountPath: '/etc/tls' }],
  });
  const set = {
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: 'db', namespace: 'prod', labels: { 'rollguard.io/enabled': 'true', app: 'db' }, annotations: { owner: 'team-a' } },
    spec: {
      replicas: 3,
      serviceName: 'db',
      selector: { matchLabels: { app: 'db' } },
      template: {
        metadata: { labels: { app: 'db' }, annotations: { 'prometheus.io/scrape': 'true' } },
        spec: {
          containers: ['db', 'exporter', 'backup', 'proxy'].map(container),
          initContainers: [container('init')],
          volumes: [
            { name: 'config', configMap: { name: 'db-config' } },
            { name: 'tls', secret: { secretName: 'db-tls' } },
            { name: 'bundle', projected: { sources: [{ configMap: { name: 'ca-bundle' } }, { secret: { name: 'db-creds' } }] } },
          ],
        },
      },
    },
  };
  return reviewOf(uid, set);
}

export function reviewOf(uid: string, object: unknown, request: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid,
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      operation: 'CREATE',
      namespace: 'prod',
      name: 'db',
      object,
      userInfo: { username: 'admin' },
      ...request,
    },
  });
}
