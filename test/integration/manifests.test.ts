import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  ApiException,
  KubernetesObjectApi,
  VersionApi,
  loadAllYaml,
  type KubernetesObject,
  type V1ClusterRole,
  type V1ClusterRoleBinding,
  type V1Container,
  type V1Deployment,
  type V1MutatingWebhookConfiguration,
  type V1Namespace,
  type V1NetworkPolicy,
  type V1PodSpec,
  type V1PolicyRule,
  type V1Role,
  type V1RoleBinding,
  type V1Service,
  type V1StatefulSet,
  type V1ValidatingAdmissionPolicy,
  type V1ValidatingAdmissionPolicyBinding,
  type V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { envName, FLAGS, parseArgs, type Config } from '../../src/config.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { referencedObjects } from '../../src/restarter/references.js';
import { isHealthGated } from '../../src/rollout/decision.js';
import { handoverSettings } from '../../src/handover/settings.js';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { goTool } from '../env/tools.js';
import { dockerfileNodeOptions } from '../env/dockerfile-node-options.js';

// Renders every way of installing rollguard (kustomize base and overlays, the Helm chart
// with several value sets, the examples) and has the real API server accept each object
// with a server-side dry-run, then checks what a user would check by hand.

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const DEPLOY = path.join(ROOT, 'deploy');
const OWN_NAMESPACE = 'rollguard-system';
// cert-manager's CRDs are not installed in the test API server, so its Issuers and
// Certificates cannot be dry-run; every other object of the cert-manager renderings is.
const CERT_MANAGER_API = /^cert-manager\.io\//;
/** the namespace deploy/overlays/one-namespace watches */
const ONE_NAMESPACE = 'apps';
const run = promisify(execFile);

type Objects = KubernetesObject[];

interface Rendering {
  name: string;
  render: (ctx: RenderContext) => Promise<string>;
}

interface RenderContext {
  kubectl: string;
  helm: string;
  kubeVersion: string;
  /** a namespace of this test's own */
  namespace: string;
}

const kustomize =
  (dir: string) =>
  ({ kubectl }: RenderContext): Promise<string> =>
    output(kubectl, ['kustomize', path.join(DEPLOY, dir)]);

/** `helm template` with --set values and value files of deploy/helm/values/ (the documented value sets). */
const helmTemplate =
  (release: string, values: string[], namespace?: string, valueFiles: string[] = []) =>
  (ctx: RenderContext): Promise<string> =>
    output(ctx.helm, [
      'template',
      release,
      path.join(DEPLOY, 'helm/rollguard'),
      '--namespace',
      namespace ?? ctx.namespace,
      '--kube-version',
      ctx.kubeVersion,
      ...valueFiles.flatMap((f) => ['-f', path.join(DEPLOY, 'helm/values', f)]),
      ...values.flatMap((v) => ['--set', v]),
    ]);

const RENDERINGS: Rendering[] = [
  { name: 'kustomize base', render: kustomize('base') },
  { name: 'kustomize no-webhook', render: kustomize('overlays/no-webhook') },
  { name: 'kustomize cert-manager', render: kustomize('overlays/cert-manager') },
  { name: 'kustomize one-namespace', render: kustomize('overlays/one-namespace') },
  { name: 'kustomize stackable', render: kustomize('overlays/stackable') },
  { name: 'kustomize argo-rollouts', render: kustomize('overlays/argo-rollouts') },
  { name: 'helm defaults', render: helmTemplate('rollguard', [], OWN_NAMESPACE) },
  { name: 'helm compat=stackable', render: helmTemplate('rollguard', ['compat=stackable'], OWN_NAMESPACE) },
  { name: 'helm argoRollouts.enabled=true', render: helmTemplate('rollguard', ['argoRollouts.enabled=true'], OWN_NAMESPACE) },
  { name: 'helm webhook.enabled=false', render: helmTemplate('rollguard', ['webhook.enabled=false'], OWN_NAMESPACE) },
  { name: 'helm tls.certManager.enabled=true', render: helmTemplate('rollguard', ['tls.certManager.enabled=true'], OWN_NAMESPACE) },
  {
    name: 'helm rbac.scope=namespaces',
    render: (ctx) => helmTemplate('rollguard', ['rbac.scope=namespaces', `rbac.namespaces={${ctx.namespace},${ONE_NAMESPACE}}`], OWN_NAMESPACE)(ctx),
  },
  { name: 'helm serviceAccountToken.expirationSeconds=600', render: helmTemplate('rollguard', ['serviceAccountToken.expirationSeconds=600'], OWN_NAMESPACE) },
  { name: 'helm values/openshift.yaml', render: helmTemplate('rollguard', [], OWN_NAMESPACE, ['openshift.yaml']) },
  { name: 'helm values/platform.yaml', render: helmTemplate('rollguard', [], OWN_NAMESPACE, ['platform.yaml']) },
  {
    // another release name and namespace: every name that points at another object must follow
    name: 'helm release "rg", one replica, no leader election',
    render: helmTemplate('rg', [
      'replicaCount=1',
      'leaderElection=false',
      'logLevel=debug',
      'extraArgs[0]=--debounce=10s',
      'nodeSelector.kubernetes\\.io/os=linux',
      'tolerations[0].key=dedicated',
      'tolerations[0].operator=Exists',
    ]),
  },
];

describe('deploy manifests', () => {
  const { kc, core } = testCluster();
  const kapi = KubernetesObjectApi.makeApiClient(kc);
  const rendered = new Map<string, Objects>();
  let ctx: RenderContext;
  let restricted: string;

  beforeAll(async () => {
    const suffix = Math.random().toString(36).slice(2, 8);
    ctx = {
      kubectl: tool(controlPlaneBinaries(), 'kubectl', 'src/dev/build-binaries.sh'),
      helm: await goTool('helm'),
      kubeVersion: (await kc.makeApiClient(VersionApi).getCode()).gitVersion,
      namespace: `manifests-${suffix}`,
    };
    await core.createNamespace({ body: { metadata: { name: ctx.namespace } } });
    // Pod Security admission is the check of record for the pod templates' securityContext
    restricted = `manifests-restricted-${suffix}`;
    await core.createNamespace({
      body: { metadata: { name: restricted, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } } },
    });
    for (const r of RENDERINGS) rendered.set(r.name, parseManifests(await r.render(ctx), r.name));
    await core.createNamespace({ body: { metadata: { name: ONE_NAMESPACE } } }).catch((err: unknown) => {
      if (!(err instanceof ApiException && err.code === 409)) throw err;
    });

    // Namespaced objects can only be dry-run into a namespace that exists. Created for
    // real from the base and left in place: other test files may deploy into it.
    const ns = only<V1Namespace>(objectsOf('kustomize base'), 'Namespace', OWN_NAMESPACE);
    await core.createNamespace({ body: ns }).catch((err: unknown) => {
      if (!(err instanceof ApiException && err.code === 409)) throw err;
    });
  });
  afterAll(async () => {
    for (const name of [ctx?.namespace, restricted]) if (name) await core.deleteNamespace({ name });
  });
  beforeEach(() => printControlPlaneLogsOnFailure());

  /**
   * Validates the object exactly as rendered. Where another test made an object of that name
   * real (the namespace, deploy/'s RBAC, a webhook configuration), a dry-run replace validates it
   * whole, where an apply would merge it with what is there.
   */
  async function dryRunCreateOrReplace(obj: KubernetesObject): Promise<void> {
    try {
      await kapi.create(obj, undefined, 'All');
    } catch (err) {
      if ((err as { code?: number }).code !== 409) throw err;
      const existing = await kapi.read({ apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata!.name!, namespace: obj.metadata?.namespace } });
      await kapi.replace({ ...obj, metadata: { ...obj.metadata, resourceVersion: existing.metadata?.resourceVersion } }, undefined, 'All');
    }
  }

  function objectsOf(rendering: string): Objects {
    const objects = rendered.get(rendering);
    if (!objects) throw new Error(`rendering "${rendering}" is not there; have ${[...rendered.keys()].join(', ')}`);
    return objects;
  }

  it.each(RENDERINGS.map((r) => r.name))('%s: the API server accepts every object (server-side dry-run)', async (name) => {
    const objects = objectsOf(name);
    const accepted: string[] = [];
    for (const obj of objects) {
      if (CERT_MANAGER_API.test(obj.apiVersion ?? '')) continue;
      try {
        await dryRunCreateOrReplace(obj);
      } catch (err) {
        throw new Error(`${name}: the API server rejected ${describeObject(obj)}: ${apiError(err)}`, { cause: err });
      }
      accepted.push(describeObject(obj));
    }
    expect(accepted.length).toBeGreaterThanOrEqual(8);
  });

  it.each(RENDERINGS.map((r) => r.name))('%s: the grace period outlasts the shutdown timeout and the flags parse', (name) => {
    const objects = objectsOf(name);
    const deploy = only<V1Deployment>(objects, 'Deployment');
    const config = rollguardConfig(deploy);
    const graceMs = (deploy.spec!.template.spec!.terminationGracePeriodSeconds ?? 30) * 1000;
    expect(config.shutdownTimeout).toBeLessThan(graceMs);
    expect(config.shutdownDelay).toBeLessThan(config.shutdownTimeout);
    expect(config.namespace).toBe(deploy.metadata!.namespace);
  });

  it.each(RENDERINGS.map((r) => r.name))('%s: every container runs as non-root with a read-only root filesystem', (name) => {
    const spec = only<V1Deployment>(objectsOf(name), 'Deployment').spec!.template.spec!;
    const containers = [...(spec.initContainers ?? []), ...spec.containers];
    expect(containers.length).toBeGreaterThan(0);
    for (const c of containers) {
      const sc = c.securityContext ?? {};
      const what = `${name}: container ${c.name}`;
      expect(sc.runAsNonRoot ?? spec.securityContext?.runAsNonRoot, `${what} runAsNonRoot`).toBe(true);
      expect(sc.runAsUser ?? spec.securityContext?.runAsUser, `${what} runAsUser`).not.toBe(0);
      expect(sc.readOnlyRootFilesystem, `${what} readOnlyRootFilesystem`).toBe(true);
      expect(sc.allowPrivilegeEscalation, `${what} allowPrivilegeEscalation`).toBe(false);
      expect(sc.capabilities?.drop, `${what} capabilities.drop`).toContain('ALL');
    }
  });

  it.each(RENDERINGS.map((r) => r.name))('%s: the kubelet injects no Service links, which would set ROLLGUARD_* flags', (name) => {
    const objects = objectsOf(name);
    const spec = only<V1Deployment>(objects, 'Deployment').spec!.template.spec!;
    // a Service "rollguard-webhook" gives every pod of its namespace ROLLGUARD_WEBHOOK_PORT=tcp://<ip>:443,
    // the env of --webhook-port (found on a real kubelet: rollguard exited 2); any user's Service named rollguard-* may do the same
    const flagEnv = new Set(FLAGS.map((f) => envName(f.name)));
    const links = objects
      .filter((o) => o.kind === 'Service')
      .flatMap((o) => {
        const prefix = (o.metadata?.name ?? '').toUpperCase().replaceAll('-', '_');
        return [`${prefix}_SERVICE_HOST`, `${prefix}_SERVICE_PORT`, `${prefix}_PORT`];
      });
    expect(spec.enableServiceLinks, `${name}: enableServiceLinks (its Services' links that are rollguard flags: ${links.filter((l) => flagEnv.has(l)).join(', ') || 'none'})`).toBe(false);
  });

  it.each(['kustomize base', 'kustomize cert-manager', 'helm defaults', 'helm tls.certManager.enabled=true', 'helm values/openshift.yaml', 'helm values/platform.yaml'])(
    '%s: the pod passes Pod Security "restricted"',
    async (name) => {
      const spec = only<V1Deployment>(objectsOf(name), 'Deployment').spec!.template.spec!;
      await core
        .createNamespacedPod({ namespace: restricted, dryRun: 'All', body: { metadata: { name: 'rollguard' }, spec } })
        .catch((err: unknown) => {
          throw new Error(`${name}: ${apiError(err)}`);
        });
      // the namespace does enforce: the same pod as root is turned away
      const rootSpec: V1PodSpec = { ...spec, securityContext: { ...spec.securityContext, runAsNonRoot: false, runAsUser: 0 } };
      rootSpec.containers = spec.containers.map((c) => ({ ...c, securityContext: { ...c.securityContext, runAsNonRoot: false, runAsUser: 0 } }));
      const rejected = await core
        .createNamespacedPod({ namespace: restricted, dryRun: 'All', body: { metadata: { name: 'rollguard' }, spec: rootSpec } })
        .then(
          () => undefined,
          (err: unknown) => err,
        );
      expect(rejected instanceof ApiException && rejected.code === 403, `root pod not rejected: ${apiError(rejected)}`).toBe(true);
    },
  );

  it.each(RENDERINGS.map((r) => r.name))('%s: RBAC grants what the configuration uses, to the pod\'s ServiceAccount', (name) => {
    const objects = objectsOf(name);
    const deploy = only<V1Deployment>(objects, 'Deployment');
    const config = rollguardConfig(deploy);
    const namespace = deploy.metadata!.namespace!;
    const clusterRules = rulesFor(objects, deploy, 'cluster');
    const ownRules = rulesFor(objects, deploy, namespace);
    const namespaced = config.watchNamespaces.length > 0 && !clusterRules.some((r) => r.resources?.includes('statefulsets'));
    const allows = (rules: V1PolicyRule[], group: string, resource: string, verb: string, resourceName?: string): boolean =>
      rules.some(
        (r) =>
          (r.apiGroups ?? []).includes(group) &&
          r.resources?.includes(resource) &&
          r.verbs.includes(verb) &&
          (!r.resourceNames?.length || (resourceName !== undefined && r.resourceNames.includes(resourceName))),
      );

    for (const [group, resource, verbs] of [
      // get: the leader digests a changed object's data
      ['', 'configmaps', ['get', 'list', 'watch']],
      ['', 'secrets', ['get', 'list', 'watch']],
      ['apps', 'statefulsets', ['list', 'watch', 'patch']],
      ['apps', 'deployments', ['list', 'watch', 'patch']],
      ['apps', 'daemonsets', ['list', 'watch', 'patch']],
      ['', 'pods', ['list', 'watch', 'delete']],
      ['', 'events', ['create', 'patch']],
      ['', 'services', ['get']],
    ] as const) {
      for (const scope of namespaced ? config.watchNamespaces : ['cluster']) {
        const rules = scope === 'cluster' ? clusterRules : rulesFor(objects, deploy, scope);
        for (const verb of verbs) expect(allows(rules, group, resource, verb), `${verb} ${group}/${resource} in ${scope}`).toBe(true);
      }
      if (namespaced) expect(clusterRules.some((r) => r.resources?.includes(resource)), `no cluster-wide ${resource}`).toBe(false);
    }
    // the expires-at Pod restarter evicts, only under --compat stackable
    for (const scope of namespaced ? config.watchNamespaces : ['cluster']) {
      const rules = scope === 'cluster' ? clusterRules : rulesFor(objects, deploy, scope);
      expect(allows(rules, '', 'pods/eviction', 'create'), `create pods/eviction in ${scope}`).toBe(config.compat === 'stackable');
      // Argo Rollouts' Rollouts, only with --argo-rollouts
      for (const verb of ['list', 'watch', 'patch']) expect(allows(rules, 'argoproj.io', 'rollouts', verb), `${verb} argoproj.io/rollouts in ${scope}`).toBe(config.argoRollouts);
    }

    for (const [resource, injected] of [
      ['mutatingwebhookconfigurations', config.webhookConfiguration],
      ['validatingwebhookconfigurations', config.evictionWebhookConfiguration],
    ] as const) {
      if (injected !== '') {
        for (const verb of ['list', 'watch']) expect(allows(clusterRules, 'admissionregistration.k8s.io', resource, verb), `${verb} ${resource}`).toBe(true);
        expect(allows(clusterRules, 'admissionregistration.k8s.io', resource, 'patch', injected)).toBe(true);
        expect(allows(clusterRules, 'admissionregistration.k8s.io', resource, 'patch', 'someone-elses-webhook')).toBe(false);
      } else {
        expect(clusterRules.filter((r) => r.resources?.includes(resource)), `no ${resource} rules when rollguard injects nothing there`).toEqual([]);
      }
    }
    expect(allows(ownRules, 'coordination.k8s.io', 'leases', 'update')).toBe(config.leaderElection);
    // the digest key Secret in every configuration; update (a renewal) only with self-managed TLS
    expect(allows(ownRules, '', 'secrets', 'create'), 'the digest key Secret').toBe(true);
    expect(allows(ownRules, '', 'secrets', 'update', config.tlsSecret), 'the TLS Secret only with self-managed TLS').toBe(config.tlsCertFile === '');
  });

  it('kustomize base: the webhook takes CREATE and UPDATE of opted-in StatefulSets, Deployments and DaemonSets, fails open, and skips rollguard-system', () => {
    const objects = objectsOf('kustomize base');
    const mwc = only<V1MutatingWebhookConfiguration>(objects, 'MutatingWebhookConfiguration');
    const config = rollguardConfig(only<V1Deployment>(objects, 'Deployment'));
    expect(mwc.metadata!.name).toBe(config.webhookConfiguration);
    expect(mwc.webhooks).toHaveLength(2);
    const hook = mwc.webhooks![0]!;
    expect(hook.name).toBe('statefulsets.rollguard.io');
    expect(hook.failurePolicy).toBe('Ignore');
    expect(hook.objectSelector).toEqual({ matchLabels: { [ENABLED_LABEL]: 'true' } });
    expect(hook.namespaceSelector?.matchExpressions).toEqual([
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: [OWN_NAMESPACE] },
    ]);
    expect(hook.rules).toEqual([
      expect.objectContaining({ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['statefulsets', 'deployments', 'daemonsets'] }),
    ]);
    expect(hook.sideEffects).toBe('None');
    expect(hook.reinvocationPolicy).toBe('IfNeeded');
    expect(hook.admissionReviewVersions).toEqual(['v1']);
    expect(hook.timeoutSeconds).toBeLessThanOrEqual(5);
    expect(hook.clientConfig.caBundle ?? '', 'rollguard injects the caBundle').toBe('');
    // the scale subresource: a Scale has no labels, so no objectSelector; it records on the set (not on a dry run)
    const scale = mwc.webhooks![1]!;
    expect([scale.name, scale.objectSelector, scale.failurePolicy, scale.sideEffects]).toEqual(['scale.statefulsets.rollguard.io', undefined, 'Ignore', 'NoneOnDryRun']);
    expect(scale.rules).toEqual([expect.objectContaining({ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['statefulsets/scale'] })]);
    expect(scale.namespaceSelector).toEqual(hook.namespaceSelector);
    expect(scale.clientConfig.caBundle ?? '', 'rollguard injects the caBundle').toBe('');
  });

  it.each(['kustomize base', 'helm defaults', 'helm rbac.scope=namespaces'])(
    '%s: the eviction guard takes CREATE pods/eviction by namespace, fails open, marks nothing on a dry run, and rollguard keeps its caBundle',
    (name) => {
      const objects = objectsOf(name);
      const deploy = only<V1Deployment>(objects, 'Deployment');
      const config = rollguardConfig(deploy);
      const vwc = only<V1ValidatingWebhookConfiguration>(objects, 'ValidatingWebhookConfiguration');
      expect(vwc.metadata!.name).toBe(config.evictionWebhookConfiguration);
      const hook = vwc.webhooks![0]!;
      expect(vwc.webhooks).toHaveLength(1);
      expect(hook.name).toBe('evictions.rollguard.io');
      expect(hook.clientConfig.service).toEqual({ name: config.serviceName, namespace: config.namespace, path: '/validate-eviction', port: 443 });
      expect(hook.clientConfig.caBundle ?? '', 'rollguard injects the caBundle').toBe('');
      expect(hook.rules).toEqual([expect.objectContaining({ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods/eviction'] })]);
      // an objectSelector would match the Eviction's labels, not the pod's
      expect(hook.objectSelector ?? {}).toEqual({});
      expect(hook.failurePolicy).toBe('Ignore');
      expect(hook.sideEffects).toBe('NoneOnDryRun');
      expect(hook.admissionReviewVersions).toEqual(['v1']);
      // the guard and the mutating webhook select the same namespaces
      const mwc = only<V1MutatingWebhookConfiguration>(objects, 'MutatingWebhookConfiguration');
      expect(hook.namespaceSelector).toEqual(mwc.webhooks![0]!.namespaceSelector);
    },
  );

  it.each(['kustomize base', 'helm release "rg", one replica, no leader election'])(
    '%s: the webhook Service leads to the webhook port, the probes to the admin port',
    (name) => {
      const objects = objectsOf(name);
      const deploy = only<V1Deployment>(objects, 'Deployment');
      const config = rollguardConfig(deploy);
      const container = rollguardContainer(deploy);
      const service = only<V1Service>(objects, 'Service', config.serviceName);
      const port = service.spec!.ports!.find((p) => p.port === 443);
      const target = container.ports!.find((p) => p.name === port?.targetPort || p.containerPort === port?.targetPort);
      expect(target?.containerPort).toBe(config.webhookPort);
      expect(service.spec!.selector).toEqual(deploy.spec!.selector.matchLabels);

      const mwc = objects.filter((o) => o.kind === 'MutatingWebhookConfiguration') as V1MutatingWebhookConfiguration[];
      for (const hook of mwc.flatMap((m) => m.webhooks ?? [])) {
        const path = hook.name === 'scale.statefulsets.rollguard.io' ? '/mutate-scale' : '/mutate';
        expect(hook.clientConfig.service).toEqual({ name: config.serviceName, namespace: config.namespace, path, port: 443 });
        expect(hook.namespaceSelector?.matchExpressions?.[0]?.values).toEqual([config.namespace]);
      }

      const adminPort = container.ports!.find((p) => p.name === 'admin')?.containerPort;
      expect(adminPort).toBe(config.adminPort);
      expect(container.readinessProbe?.httpGet).toMatchObject({ path: '/readyz', port: 'admin' });
      expect(container.livenessProbe?.httpGet).toMatchObject({ path: '/healthz', port: 'admin' });
    },
  );

  it.each(['kustomize stackable', 'helm compat=stackable'])('%s: one webhook entry per opt-in label, and the fence widened for the Stackable keys and evictions', (name) => {
    const objects = objectsOf(name);
    expect(rollguardConfig(only<V1Deployment>(objects, 'Deployment')).compat).toBe('stackable');
    const hooks = only<V1MutatingWebhookConfiguration>(objects, 'MutatingWebhookConfiguration').webhooks ?? [];
    expect(hooks.map((h) => [h.name, h.objectSelector])).toEqual([
      ['statefulsets.rollguard.io', { matchLabels: { [ENABLED_LABEL]: 'true' } }],
      ['stackable-statefulsets.rollguard.io', { matchLabels: { 'restarter.stackable.tech/enabled': 'true' } }],
      ['scale.statefulsets.rollguard.io', undefined],
    ]);
    expect(hooks[1]).toEqual({ ...hooks[0], name: hooks[1]!.name, objectSelector: hooks[1]!.objectSelector });
    const policy = (n: string): string => JSON.stringify(objects.find((o) => o.kind === 'ValidatingAdmissionPolicy' && o.metadata?.name === n));
    expect(policy('rollguard-fence-statefulsets')).toContain("'configmap.restarter.stackable.tech/', 'secret.restarter.stackable.tech/'");
    expect(policy('rollguard-fence-writes')).toContain("'/pods/eviction': ['CREATE']");
  });

  it.each(RENDERINGS.map((r) => r.name))('%s: rollouts in the webhook, RBAC and fence only with --argo-rollouts', (name) => {
    const objects = objectsOf(name);
    const config = rollguardConfig(only<V1Deployment>(objects, 'Deployment'));
    const argo = name.includes('argo');
    expect(config.argoRollouts).toBe(argo);
    const hooks = objects.filter((o) => o.kind === 'MutatingWebhookConfiguration').flatMap((o) => (o as V1MutatingWebhookConfiguration).webhooks ?? []);
    for (const hook of hooks) {
      const namesRollouts = (hook.rules ?? []).some((r) => r.apiGroups?.includes('argoproj.io') && r.resources?.includes('rollouts'));
      expect(namesRollouts, `${hook.name} names rollouts`).toBe(argo && hook.name === 'statefulsets.rollguard.io');
    }
    const policies = objects.filter((o) => o.kind === 'ValidatingAdmissionPolicy' || o.kind === 'ValidatingAdmissionPolicyBinding').map((o) => `${o.kind} ${o.metadata?.name}`);
    const fenced = policies.length > 0;
    expect(policies.filter((p) => p.endsWith('-fence-rollouts'))).toEqual(argo && fenced ? ['ValidatingAdmissionPolicy rollguard-fence-rollouts', 'ValidatingAdmissionPolicyBinding rollguard-fence-rollouts'] : []);
    if (argo && fenced) {
      const writes = objects.find((o) => o.kind === 'ValidatingAdmissionPolicy' && o.metadata?.name === 'rollguard-fence-writes') as { spec?: { matchConstraints?: { excludeResourceRules?: unknown[] } } };
      expect(writes.spec?.matchConstraints?.excludeResourceRules, 'fence-writes leaves rollouts to fence-rollouts').toEqual([
        { apiGroups: ['argoproj.io'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'], resources: ['rollouts', 'rollouts/*'] },
      ]);
    }
  });

  it.each(['kustomize no-webhook', 'helm webhook.enabled=false'])('%s: no webhook configuration and nothing to inject', (name) => {
    const objects = objectsOf(name);
    expect(objects.filter((o) => o.kind === 'MutatingWebhookConfiguration' || o.kind === 'ValidatingWebhookConfiguration')).toEqual([]);
    const config = rollguardConfig(only<V1Deployment>(objects, 'Deployment'));
    expect([config.webhookConfiguration, config.evictionWebhookConfiguration]).toEqual(['', '']);
  });

  it('helm webhook.evictionGuard=false: the admission webhook without the eviction guard, and no rights over validating configurations', async () => {
    const objects = parseManifests(await helmTemplate('rollguard', ['webhook.evictionGuard=false'], OWN_NAMESPACE)(ctx), 'helm no eviction guard');
    expect(objects.filter((o) => o.kind === 'ValidatingWebhookConfiguration')).toEqual([]);
    expect(objects.filter((o) => o.kind === 'MutatingWebhookConfiguration')).toHaveLength(1);
    const config = rollguardConfig(only<V1Deployment>(objects, 'Deployment'));
    expect([config.webhookConfiguration, config.evictionWebhookConfiguration]).toEqual(['rollguard', '']);
    const rules = (objects.filter((o) => o.kind === 'ClusterRole') as V1ClusterRole[]).flatMap((r) => r.rules ?? []);
    expect(rules.filter((r) => r.resources?.includes('validatingwebhookconfigurations'))).toEqual([]);
  });

  it.each(['kustomize cert-manager', 'helm tls.certManager.enabled=true'])(
    '%s: cert-manager issues the mounted certificate and injects the caBundle; rollguard does neither',
    (name) => {
      const objects = objectsOf(name);
      const deploy = only<V1Deployment>(objects, 'Deployment');
      const config = rollguardConfig(deploy);
      expect([config.webhookConfiguration, config.evictionWebhookConfiguration]).toEqual(['', '']);

      const mwc = only<V1MutatingWebhookConfiguration>(objects, 'MutatingWebhookConfiguration');
      const injectFrom = mwc.metadata!.annotations?.['cert-manager.io/inject-ca-from'] ?? '';
      const vwc = only<V1ValidatingWebhookConfiguration>(objects, 'ValidatingWebhookConfiguration');
      expect(vwc.metadata!.annotations?.['cert-manager.io/inject-ca-from'], 'the eviction guard gets the same CA').toBe(injectFrom);
      const [certNamespace, certName] = injectFrom.split('/');
      expect(certNamespace).toBe(config.namespace);
      const cert = only<CertManagerCertificate>(objects, 'Certificate', certName);
      expect(cert.spec.dnsNames).toContain(`${config.serviceName}.${config.namespace}.svc`);
      const issuer = only<KubernetesObject>(objects, 'Issuer', cert.spec.issuerRef.name);
      expect(issuer.metadata!.namespace).toBe(config.namespace);

      // the files rollguard reads come from the Secret the Certificate writes
      const container = rollguardContainer(deploy);
      const volumes = deploy.spec!.template.spec!.volumes ?? [];
      for (const file of [config.tlsCertFile, config.tlsKeyFile]) {
        const mount = container.volumeMounts?.find((m) => file.startsWith(`${m.mountPath}/`));
        expect(mount, `a volume mount that holds ${file}`).toBeDefined();
        expect(volumes.find((v) => v.name === mount!.name)?.secret?.secretName).toBe(cert.spec.secretName);
      }
      expect(config.tlsCertFile.endsWith('/tls.crt') && config.tlsKeyFile.endsWith('/tls.key')).toBe(true);
    },
  );

  it('the Helm chart with its defaults makes the same choices as the kustomize base', () => {
    const base = objectsOf('kustomize base');
    const chart = objectsOf('helm defaults');
    const names = (objects: Objects): string[] =>
      objects
        .filter((o) => o.kind !== 'Namespace')
        .map(describeObject)
        .sort();
    expect(names(chart)).toEqual(names(base));

    for (const kind of ['ClusterRole', 'Role'] as const) {
      for (const role of base.filter((o) => o.kind === kind) as V1Role[]) {
        expect(only<V1Role>(chart, kind, role.metadata!.name).rules, `${kind} ${role.metadata!.name}`).toEqual(role.rules);
      }
    }
    expect(only<V1MutatingWebhookConfiguration>(chart, 'MutatingWebhookConfiguration').webhooks).toEqual(
      only<V1MutatingWebhookConfiguration>(base, 'MutatingWebhookConfiguration').webhooks,
    );
    expect(only<V1ValidatingWebhookConfiguration>(chart, 'ValidatingWebhookConfiguration').webhooks).toEqual(
      only<V1ValidatingWebhookConfiguration>(base, 'ValidatingWebhookConfiguration').webhooks,
    );
    for (const kind of ['ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'] as const) {
      const baseObjects = base.filter((o) => o.kind === kind);
      expect(baseObjects.length, `the base ships ${kind}`).toBeGreaterThan(0);
      // CEL does not care how kustomize and helm fold the lines of an expression
      const squashed = (spec: unknown): unknown => JSON.parse(JSON.stringify(spec).replace(/(?:\\n|\s)+/g, ' '));
      for (const obj of baseObjects as (KubernetesObject & { spec: unknown })[]) {
        const inChart = only<KubernetesObject & { spec: unknown }>(chart, kind, obj.metadata!.name);
        expect(squashed(inChart.spec), `${kind} ${obj.metadata!.name}`).toEqual(squashed(obj.spec));
      }
    }

    const baseDeploy = only<V1Deployment>(base, 'Deployment');
    const chartDeploy = only<V1Deployment>(chart, 'Deployment');
    expect(rollguardConfig(chartDeploy)).toEqual(rollguardConfig(baseDeploy));
    const podChoices = (d: V1Deployment): unknown => {
      const spec = d.spec!.template.spec!;
      const c = rollguardContainer(d);
      return {
        replicas: d.spec!.replicas,
        strategy: d.spec!.strategy,
        grace: spec.terminationGracePeriodSeconds,
        podSecurity: spec.securityContext,
        spread: spec.topologySpreadConstraints?.map((t) => [t.topologyKey, t.maxSkew, t.whenUnsatisfiable, t.matchLabelKeys]),
        affinity: spec.affinity,
        ports: c.ports,
        readiness: c.readinessProbe,
        liveness: c.livenessProbe,
        resources: c.resources,
        securityContext: c.securityContext,
        env: c.env,
      };
    };
    expect(podChoices(chartDeploy)).toEqual(podChoices(baseDeploy));
    expect(only<KubernetesObject & { spec: { minAvailable: number } }>(chart, 'PodDisruptionBudget').spec.minAvailable).toBe(1);
  });

  it.each(['kustomize base', 'helm defaults'])('%s: Node takes the NODE_OPTIONS and holds the young generation to 2 x 16 MiB, and the Dockerfile sets the same', async (name) => {
    const options = rollguardContainer(only<V1Deployment>(objectsOf(name), 'Deployment')).env?.find((e) => e.name === 'NODE_OPTIONS')?.value;
    expect(options, 'NODE_OPTIONS is set').toBeDefined();
    // garbage in batches, as list pages make it; unset, V8 grew this machine's new space to 64 MiB and more
    const script = `
      const v8 = require('node:v8');
      let batch = [], most = 0;
      for (let i = 0; i < 2e6; i++) {
        batch.push({ i, s: 'x' + i });
        if (batch.length > 20000) batch = [];
        if (i % 1000 === 0) most = Math.max(most, v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size);
      }
      console.log(JSON.stringify({ sourceMaps: process.sourceMapsEnabled, newSpaceMiB: most / 1048576 }));`;
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--input-type=commonjs', '-e', script], { env: { ...process.env, NODE_OPTIONS: options } });
    expect(stderr).toBe('');
    const seen = JSON.parse(stdout) as { sourceMaps: boolean; newSpaceMiB: number };
    // the image ships no source maps (a minified bundle's map cost 35 MB at start-up): parsing none is the choice
    expect(seen.sourceMaps).toBe(false);
    expect(seen.newSpaceMiB).toBeLessThanOrEqual(32);
    expect(dockerfileNodeOptions()).toBe(options);
  });

  it.each(['kustomize base', 'helm defaults', 'helm release "rg", one replica, no leader election'])(
    '%s: the NetworkPolicy selects rollguard\'s pods, opens the webhook port to all and the admin port to the monitoring namespace only',
    (name) => {
      const objects = objectsOf(name);
      const deploy = only<V1Deployment>(objects, 'Deployment');
      const policy = only<V1NetworkPolicy>(objects, 'NetworkPolicy');
      expect(policy.metadata!.namespace).toBe(deploy.metadata!.namespace);
      expect(deploy.spec!.template.metadata!.labels).toMatchObject(policy.spec!.podSelector?.matchLabels ?? { none: 'selected' });
      expect(policy.spec!.policyTypes).toEqual(['Ingress']);
      const rules = policy.spec!.ingress!;
      const ports = (rule: (typeof rules)[number]): unknown[] => (rule.ports ?? []).map((p) => p.port);
      // YAML's "from" is "_from" in the client's model
      expect(rules.filter((r) => r._from === undefined).map(ports), 'open to all').toEqual([['webhook']]);
      expect(rules.filter((r) => r._from !== undefined).map((r) => ({ ports: ports(r), from: r._from }))).toEqual([
        {
          ports: ['admin'],
          from: [{ namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: ['monitoring'] }] } }],
        },
      ]);
      const container = rollguardContainer(deploy);
      for (const port of ['webhook', 'admin']) expect(container.ports!.some((p) => p.name === port), `container port ${port}`).toBe(true);
    },
  );

  it('helm networkPolicy.enabled=false and fence.enabled=false leave the NetworkPolicy and the fence out', async () => {
    const objects = parseManifests(await helmTemplate('rollguard', ['networkPolicy.enabled=false', 'fence.enabled=false'], OWN_NAMESPACE)(ctx), 'helm opt-outs');
    expect(objects.filter((o) => ['NetworkPolicy', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'].includes(o.kind ?? ''))).toEqual([]);
  });

  it.each(['kustomize base', 'helm release "rg", one replica, no leader election'])(
    '%s: the fence names this installation\'s service account, TLS Secret, Lease and webhook configuration',
    (name) => {
      const objects = objectsOf(name);
      const deploy = only<V1Deployment>(objects, 'Deployment');
      const config = rollguardConfig(deploy);
      const account = `system:serviceaccount:${deploy.metadata!.namespace}:${deploy.spec!.template.spec!.serviceAccountName}`;
      const policies = objects.filter((o) => o.kind === 'ValidatingAdmissionPolicy') as V1ValidatingAdmissionPolicy[];
      expect(policies.map((p) => p.metadata!.name!.replace(/^.*-fence-/, '')).sort()).toEqual(['deployments-daemonsets', 'pod-deletes', 'pods', 'statefulsets', 'webhook-ca', 'writes']);
      for (const policy of policies) {
        expect(policy.spec!.matchConditions, policy.metadata!.name).toEqual([
          { name: 'rollguard-service-account', expression: `request.userInfo.username == '${account}'` },
        ]);
        const bindings = objects.filter((o) => o.kind === 'ValidatingAdmissionPolicyBinding') as V1ValidatingAdmissionPolicyBinding[];
        expect(bindings.filter((b) => b.spec!.policyName === policy.metadata!.name).map((b) => b.spec!.validationActions)).toEqual([['Deny']]);
      }
      const writes = JSON.stringify(policies.find((p) => p.metadata!.name!.endsWith('-fence-writes'))!.spec!.validations);
      expect(writes).toContain(`variables.objectName == '${config.tlsSecret}'`);
      expect(writes).toContain(`variables.objectName == '${config.leaseName}'`);
      expect(writes).toContain(`variables.objectNamespace == '${config.namespace}'`);
      const webhook = objects.find((o) => o.kind === 'MutatingWebhookConfiguration')?.metadata?.name ?? config.webhookConfiguration;
      expect(writes).toContain(`variables.objectName == '${webhook}'`);
    },
  );

  it.each(['kustomize one-namespace', 'helm rbac.scope=namespaces'])(
    '%s: rights, --watch-namespaces and the webhook namespaceSelector name the same namespaces',
    (name) => {
      const objects = objectsOf(name);
      const deploy = only<V1Deployment>(objects, 'Deployment');
      const config = rollguardConfig(deploy);
      expect(config.watchNamespaces.length).toBeGreaterThan(0);
      const clusterWide = rulesFor(objects, deploy, 'cluster').flatMap((r) => r.resources ?? []);
      expect(clusterWide.sort()).toEqual(['mutatingwebhookconfigurations', 'mutatingwebhookconfigurations', 'validatingwebhookconfigurations', 'validatingwebhookconfigurations']);
      for (const kind of ['MutatingWebhookConfiguration', 'ValidatingWebhookConfiguration']) {
        const hook = only<V1MutatingWebhookConfiguration>(objects, kind).webhooks![0]!;
        expect(hook.namespaceSelector?.matchExpressions, kind).toEqual([{ key: 'kubernetes.io/metadata.name', operator: 'In', values: config.watchNamespaces }]);
      }
      // the same rules as the base's ClusterRole, in each namespace
      const base = only<V1ClusterRole>(objectsOf('kustomize base'), 'ClusterRole', 'rollguard');
      for (const ns of config.watchNamespaces) expect(rulesFor(objects, deploy, ns), ns).toEqual(base.rules);
      // its own namespace gets what it writes there: the Events of a certificate rotation
      expect(rulesFor(objects, deploy, deploy.metadata!.namespace!).some((r) => r.resources?.includes('events') && r.verbs.includes('create'))).toBe(true);
    },
  );

  it('helm serviceAccountToken.expirationSeconds: a projected token of that lifetime where the automount put it, and nothing below 600', async () => {
    const spec = only<V1Deployment>(objectsOf('helm serviceAccountToken.expirationSeconds=600'), 'Deployment').spec!.template.spec!;
    expect(spec.automountServiceAccountToken).toBe(false);
    const mount = spec.containers[0]!.volumeMounts?.find((m) => m.mountPath === '/var/run/secrets/kubernetes.io/serviceaccount');
    expect(mount?.readOnly).toBe(true);
    const sources = spec.volumes?.find((v) => v.name === mount?.name)?.projected?.sources ?? [];
    // the three files client-node reads in a pod: token, ca.crt, namespace
    expect(sources.find((s) => s.serviceAccountToken)?.serviceAccountToken).toEqual({ path: 'token', expirationSeconds: 600 });
    expect(sources.find((s) => s.configMap)?.configMap).toEqual({ name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] });
    expect(sources.find((s) => s.downwardAPI)?.downwardAPI?.items).toEqual([{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }]);
    // the default keeps the kubelet's automount
    const defaults = only<V1Deployment>(objectsOf('helm defaults'), 'Deployment').spec!.template.spec!;
    expect([defaults.automountServiceAccountToken, defaults.volumes]).toEqual([undefined, undefined]);
    const failure = await helmTemplate('rollguard', ['serviceAccountToken.expirationSeconds=300'], OWN_NAMESPACE)(ctx).then(
      () => 'rendered',
      (err: unknown) => String(err),
    );
    expect(failure).toContain('serviceAccountToken.expirationSeconds must be 0 or at least 600');
  });

  it('the Helm chart refuses rbac.scope=namespaces without namespaces, and an unknown scope', async () => {
    for (const [values, message] of [
      [['rbac.scope=namespaces'], 'rbac.scope=namespaces needs rbac.namespaces'],
      // the schema turns it away before the template's own check
      [['rbac.scope=everything'], "at '/rbac/scope': value must be one of 'cluster', 'namespaces'"],
    ] as const) {
      const failure = await helmTemplate('rollguard', [...values], OWN_NAMESPACE)(ctx).then(
        () => 'rendered',
        (err: unknown) => String(err),
      );
      expect(failure).toContain(message);
    }
  });

  it('the Helm chart passes values through and leaves out what one replica without a lease does not need', () => {
    const objects = objectsOf('helm release "rg", one replica, no leader election');
    const deploy = only<V1Deployment>(objects, 'Deployment');
    const config = rollguardConfig(deploy);
    expect(deploy.metadata!.name).toBe('rg-rollguard');
    expect(deploy.spec!.replicas).toBe(1);
    expect(config).toMatchObject({ leaderElection: false, logLevel: 'debug', debounce: 10_000, namespace: ctx.namespace });
    expect(deploy.spec!.template.spec!.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux' });
    expect(deploy.spec!.template.spec!.tolerations).toEqual([{ key: 'dedicated', operator: 'Exists' }]);
    // a budget of one with one replica would block every node drain
    expect(objects.filter((o) => o.kind === 'PodDisruptionBudget')).toEqual([]);
    const mwc = only<V1MutatingWebhookConfiguration>(objects, 'MutatingWebhookConfiguration');
    expect(mwc.metadata!.name).toBe(config.webhookConfiguration);
  });

  it.each(['kustomize base', 'helm defaults', 'helm release "rg", one replica, no leader election'])(
    '%s: the replicas spread over nodes when the scheduler can, counted by this release\'s pods of one revision',
    (name) => {
      const deploy = only<V1Deployment>(objectsOf(name), 'Deployment');
      const template = deploy.spec!.template;
      expect(template.spec!.affinity).toBeUndefined();
      const [constraint, ...more] = template.spec!.topologySpreadConstraints ?? [];
      expect(more).toEqual([]);
      // ScheduleAnyway: a one-node cluster still runs both replicas
      expect(constraint).toMatchObject({ maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'ScheduleAnyway', matchLabelKeys: ['pod-template-hash'] });
      expect(template.metadata!.labels).toMatchObject(constraint!.labelSelector!.matchLabels!);
      expect(deploy.spec!.selector.matchLabels).toMatchObject(constraint!.labelSelector!.matchLabels!);
    },
  );

  it('helm values/openshift.yaml: no fixed user or group anywhere in the pod (restricted-v2 assigns them), still non-root and restricted', () => {
    const spec = only<V1Deployment>(objectsOf('helm values/openshift.yaml'), 'Deployment').spec!.template.spec!;
    const contexts = [spec.securityContext ?? {}, ...spec.containers.map((c) => c.securityContext ?? {})];
    for (const sc of contexts) expect([(sc as { runAsUser?: number }).runAsUser, (sc as { runAsGroup?: number }).runAsGroup]).toEqual([undefined, undefined]);
    expect(spec.securityContext).toEqual({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
    expect(spec.containers[0]!.securityContext).toEqual({
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
  });

  it('helm values/platform.yaml: the image by digest, priority class, pod labels beside the selector, spread over zones and nodes, the large-cluster memory', () => {
    const objects = objectsOf('helm values/platform.yaml');
    const deploy = only<V1Deployment>(objects, 'Deployment');
    const template = deploy.spec!.template;
    const container = rollguardContainer(deploy);
    expect(container.image).toBe(`registry.example.com/platform/rollguard@sha256:${'0'.repeat(64)}`);
    expect(template.spec!.priorityClassName).toBe('system-cluster-critical');
    expect(template.metadata!.labels).toEqual({ team: 'platform', ...deploy.spec!.selector.matchLabels });
    // the selector is immutable: a pod label must never reach it
    expect(deploy.spec!.selector.matchLabels).toEqual({ 'app.kubernetes.io/name': 'rollguard', 'app.kubernetes.io/instance': 'rollguard' });
    expect(template.metadata!.annotations).toEqual({ 'example.com/owner': 'platform-team' });
    expect(template.spec!.topologySpreadConstraints!.map((t) => [t.topologyKey, t.whenUnsatisfiable, t.labelSelector?.matchLabels])).toEqual([
      ['topology.kubernetes.io/zone', 'ScheduleAnyway', deploy.spec!.selector.matchLabels],
      ['kubernetes.io/hostname', 'ScheduleAnyway', deploy.spec!.selector.matchLabels],
    ]);
    expect(container.resources).toEqual({ requests: { cpu: '100m', memory: '256Mi' }, limits: { memory: '384Mi' } });
    expect(rollguardConfig(deploy).maxRestartsPerSecond).toBe(10);
  });

  it('the Helm chart refuses leaderElection=false with more than one replica', async () => {
    const failure = await helmTemplate('rollguard', ['leaderElection=false', 'replicaCount=2'], OWN_NAMESPACE)(ctx).then(
      () => 'rendered',
      (err: unknown) => String(err),
    );
    expect(failure).toContain('leaderElection=false needs replicaCount=1');
  });

  it('the examples apply into any namespace: an opted-in set and a health-gated one, with their config', async () => {
    const dir = path.join(DEPLOY, 'examples');
    const files = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f));
    const objects = files.flatMap((f) => parseManifests(fs.readFileSync(path.join(dir, f), 'utf8'), `examples/${f}`));
    expect(objects.filter((o) => o.metadata?.namespace !== undefined).map(describeObject), 'objects with a namespace').toEqual([]);

    for (const obj of objects) {
      const inNamespace = { ...obj, metadata: { ...obj.metadata, namespace: ctx.namespace } };
      await kapi.create(inNamespace, undefined, 'All').catch((err: unknown) => {
        throw new Error(`examples: the API server rejected ${describeObject(obj)}: ${apiError(err)}`);
      });
    }

    const all = objects.filter((o) => o.kind === 'StatefulSet') as V1StatefulSet[];
    expect(all.map((s) => s.metadata!.name).sort()).toEqual(['db', 'web', 'web-gated']);
    // db: the handover demo (deploy/examples/db.yaml), health-gated with a primary selector
    const db = all.find((s) => s.metadata!.name === 'db')!;
    expect(isHealthGated(db)).toBe(true);
    expect(handoverSettings(db)).toMatchObject({ ok: true, settings: { action: { kind: 'http', port: 8008, path: '/switchover' } } });
    expect(referencedObjects(db.spec!.template)).toEqual([{ kind: 'ConfigMap', name: 'db-config' }]);
    const sets = all.filter((s) => s !== db);
    for (const set of sets) {
      const name = set.metadata!.name!;
      expect(set.metadata!.labels?.[ENABLED_LABEL], `${name} opted in`).toBe('true');
      expect(set.spec!.replicas).toBe(3);
      expect(isHealthGated(set), `${name} health-gated`).toBe(name === 'web-gated');
      // what rollguard itself finds in the template
      expect(referencedObjects(set.spec!.template)).toEqual([
        { kind: 'ConfigMap', name: 'app-config' },
        { kind: 'Secret', name: 'app-secret' },
      ]);
      const spec = set.spec!.template.spec!;
      expect(spec.volumes?.some((v) => v.configMap?.name === 'app-config' || v.secret?.secretName === 'app-secret')).toBe(true);
      expect(spec.containers.some((c) => (c.envFrom ?? []).length > 0)).toBe(true);
      const service = only<V1Service>(objects, 'Service', set.spec!.serviceName);
      expect(service.spec!.clusterIP, `${service.metadata!.name} is headless`).toBe('None');
    }
    only<KubernetesObject>(objects, 'ConfigMap', 'app-config');
    only<KubernetesObject>(objects, 'Secret', 'app-secret');
  });
});

interface CertManagerCertificate extends KubernetesObject {
  spec: { secretName: string; dnsNames: string[]; issuerRef: { name: string; kind?: string } };
}

async function output(command: string, args: string[]): Promise<string> {
  try {
    return (await run(command, args, { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 })).stdout;
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr ?? '';
    throw new Error(`${path.basename(command)} ${args.join(' ')} failed: ${stderr.trim() || String(err)}`, { cause: err });
  }
}

function tool(dir: string, name: string, from: string): string {
  const file = path.join(dir, name);
  if (!fs.existsSync(file)) throw new Error(`${from} printed ${dir}, which has no ${name}`);
  return file;
}

/** Every object of a multi-document YAML stream; documents with nothing but comments are dropped. */
function parseManifests(text: string, source: string): Objects {
  const docs = text.split(/^---[ \t]*$/m).filter((doc) => doc.split('\n').some((l) => l.trim() !== '' && !l.trim().startsWith('#')));
  const objects = docs.flatMap((doc) => loadAllYaml(doc) as Objects);
  for (const obj of objects) {
    if (!obj.apiVersion || !obj.kind || !obj.metadata?.name) throw new Error(`${source}: an object without apiVersion, kind or name`);
  }
  return objects;
}

function only<T extends KubernetesObject>(objects: Objects, kind: string, name?: string): T {
  const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata?.name === name));
  if (found.length !== 1) {
    throw new Error(`expected one ${kind}${name ? ` named ${name}` : ''}, found ${found.length} among ${objects.map(describeObject).join(', ')}`);
  }
  return found[0] as T;
}

function describeObject(obj: KubernetesObject): string {
  return `${obj.kind}/${obj.metadata?.namespace ? `${obj.metadata.namespace}/` : ''}${obj.metadata?.name}`;
}

function apiError(err: unknown): string {
  if (err instanceof ApiException) {
    const body = err.body as { message?: string } | string | undefined;
    return `${err.code} ${typeof body === 'string' ? body : (body?.message ?? JSON.stringify(body))}`;
  }
  return err instanceof Error ? err.message : String(err);
}

function rollguardContainer(deploy: V1Deployment): V1Container {
  const container = deploy.spec!.template.spec!.containers.find((c) => c.name === 'rollguard');
  if (!container) throw new Error(`Deployment ${deploy.metadata?.name} has no container named rollguard`);
  return container;
}

/**
 * The configuration `rollguard serve` would run with: the container's args and env put
 * through rollguard's own parser, with the downward API and $(VAR) references resolved
 * as the kubelet does. An unknown flag or a bad value fails here.
 */
function rollguardConfig(deploy: V1Deployment): Config {
  const container = rollguardContainer(deploy);
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) {
    if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') env[e.name] = deploy.metadata!.namespace!;
    else if (e.valueFrom) throw new Error(`env ${e.name} of ${describeObject(deploy)}: a source this test does not resolve`);
    else env[e.name] = (e.value ?? '').replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (ref, name: string) => env[name] ?? ref);
  }
  const [command, ...args] = container.args ?? [];
  expect(command, `${describeObject(deploy)} runs "rollguard serve"`).toBe('serve');
  return parseArgs(args, env, 'serve').config;
}

/** Rules bound to the Deployment's ServiceAccount: cluster-wide, or in one namespace. */
function rulesFor(objects: Objects, deploy: V1Deployment, scope: 'cluster' | string): V1PolicyRule[] {
  const sa = deploy.spec!.template.spec!.serviceAccountName;
  const namespace = deploy.metadata!.namespace;
  const bindingKind = scope === 'cluster' ? 'ClusterRoleBinding' : 'RoleBinding';
  const bindings = objects.filter(
    (o) =>
      o.kind === bindingKind &&
      (scope === 'cluster' || o.metadata?.namespace === scope) &&
      (o as V1RoleBinding | V1ClusterRoleBinding).subjects?.some(
        (s) => s.kind === 'ServiceAccount' && s.name === sa && s.namespace === namespace,
      ),
  ) as (V1RoleBinding | V1ClusterRoleBinding)[];
  return bindings.flatMap((b) => {
    const role = objects.find(
      (o) =>
        o.kind === b.roleRef.kind &&
        o.metadata?.name === b.roleRef.name &&
        (b.roleRef.kind === 'ClusterRole' || o.metadata?.namespace === b.metadata?.namespace),
    ) as V1Role | V1ClusterRole | undefined;
    if (!role) throw new Error(`${describeObject(b)} refers to ${b.roleRef.kind} ${b.roleRef.name}, which is not in the rendering`);
    return role.rules ?? [];
  });
}
