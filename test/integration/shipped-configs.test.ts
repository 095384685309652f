import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  AdmissionregistrationV1Api,
  AppsV1Api,
  AuthenticationV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  loadAllYaml,
  type KubernetesObject,
  type V1LabelSelector,
  type V1PolicyRule,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installArgoRolloutsCrd } from '../../src/dev/argo-rollouts.js';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { HANDOVER_REQUEST_ANNOTATION } from '../../src/handover/state.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { EVENT_DUE_ANNOTATION } from '../../src/restarter/event-due.js';
import { DIGEST_KEY_SECRET } from '../../src/restarter/digest-key.js';
import { LAST_STEP_ANNOTATION } from '../../src/rollout/last-step.js';
import { WANTED_REPLICAS_ANNOTATION } from '../../src/rollout/scale-down-hold.js';
import { createNamespace, daemonSet, deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { refusal } from '../env/refusal.js';

// Issue 25, "every shipped configuration lets rollguard do its job": each kustomize overlay and
// component of deploy/ and each documented Helm value set is rendered, its RBAC and fence are
// applied, and rollguard's ServiceAccount (a real token of it) makes each write its contract
// (docs/security.md) names, for each kind: all must pass. The writes the contract does not name
// must be denied (by the fence where there is one; by RBAC always for what RBAC never grants).
// Writes are dry runs (RBAC and admission judge them, nothing is stored), so the workloads are
// made once and shared by every configuration. rbac.test.ts runs rollguard itself against
// three of these; this file covers the breadth.

const ROLLGUARD_NAMESPACE = 'rollguard-system';
/** the namespace deploy/overlays/one-namespace is written for */
const ONE_NAMESPACE = 'apps';
const HANDOVER_REQUEST = HANDOVER_REQUEST_ANNOTATION;
const FENCE_KINDS = ['ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'];
const APPLIED_KINDS = ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'MutatingWebhookConfiguration', 'ValidatingWebhookConfiguration', ...FENCE_KINDS];
const WORKLOAD_RESOURCES = ['configmaps', 'secrets', 'statefulsets', 'deployments', 'daemonsets', 'pods', 'rollouts'];
const ROLLOUTS = { group: 'argoproj.io', version: 'v1alpha1', plural: 'rollouts' } as const;

interface Config {
  name: string;
  render(ctx: { workloads: string }): string;
  /** the fullname the rendering gives its objects and its ServiceAccount */
  fullname: string;
  /** what the configuration ships, and so which of the contract's writes rollguard makes in it */
  webhook: boolean;
  /** rollguard keeps the caBundle (no cert-manager) */
  caBundle: boolean;
  /** rollguard keeps its own TLS Secret */
  tlsSecret: boolean;
  fence: boolean;
  compat?: 'stackable';
  /** Argo Rollouts support turned on (--argo-rollouts): Rollouts are written too */
  argoRollouts?: boolean;
  /** the namespaces rollguard is narrowed to; undefined: cluster-wide */
  scope?: (ctx: { workloads: string }) => string[];
}

const kubectl = (): string => path.join(controlPlaneBinaries(), 'kubectl');
const kustomize = (dir: string): string => execFileSync(kubectl(), ['kustomize', path.resolve(dir)], { encoding: 'utf8' });
/** deploy/base with components, as a user's kustomization would compose them */
const withComponents = (...components: string[]): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-kustomize-'));
  const rel = (p: string): string => path.relative(dir, path.resolve(p));
  fs.writeFileSync(
    path.join(dir, 'kustomization.yaml'),
    ['apiVersion: kustomize.config.k8s.io/v1beta1', 'kind: Kustomization', `resources: [${rel('deploy/base')}]`, `components: [${components.map(rel).join(', ')}]`, ''].join('\n'),
  );
  try {
    return execFileSync(kubectl(), ['kustomize', '--load-restrictor=LoadRestrictionsNone', dir], { encoding: 'utf8' });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
};
let helmBinary: string | undefined;
const helm = (release: string, args: string[]): string => {
  helmBinary ??= path.join(execFileSync('bash', [path.resolve('test/env/build-tools.sh')], { encoding: 'utf8' }).trim().split('\n').pop() ?? '', 'helm');
  return execFileSync(helmBinary, ['template', release, path.resolve('deploy/helm/rollguard'), '--namespace', ROLLGUARD_NAMESPACE, ...args], { encoding: 'utf8' });
};
const set = (...values: string[]): string[] => values.flatMap((v) => ['--set', v]);

const full = { webhook: true, caBundle: true, tlsSecret: true, fence: true };
const CONFIGS: Config[] = [
  { name: 'kustomize deploy/base', fullname: 'rollguard', render: () => kustomize('deploy/base'), ...full },
  { name: 'kustomize overlays/one-namespace', fullname: 'rollguard', render: () => kustomize('deploy/overlays/one-namespace'), ...full, scope: () => [ONE_NAMESPACE] },
  { name: 'kustomize overlays/no-webhook', fullname: 'rollguard', render: () => kustomize('deploy/overlays/no-webhook'), ...full, webhook: false, caBundle: false },
  { name: 'kustomize overlays/cert-manager', fullname: 'rollguard', render: () => kustomize('deploy/overlays/cert-manager'), ...full, caBundle: false, tlsSecret: false },
  { name: 'kustomize overlays/stackable', fullname: 'rollguard', render: () => kustomize('deploy/overlays/stackable'), ...full, compat: 'stackable' },
  { name: 'kustomize base + components/stackable-compat', fullname: 'rollguard', render: () => withComponents('deploy/components/stackable-compat'), ...full, compat: 'stackable' },
  { name: 'kustomize overlays/argo-rollouts', fullname: 'rollguard', render: () => kustomize('deploy/overlays/argo-rollouts'), ...full, argoRollouts: true },
  {
    name: 'kustomize base + components/argo-rollouts + components/stackable-compat',
    fullname: 'rollguard',
    render: () => withComponents('deploy/components/argo-rollouts', 'deploy/components/stackable-compat'),
    ...full,
    argoRollouts: true,
    compat: 'stackable',
  },
  { name: 'kustomize base + components/no-fence', fullname: 'rollguard', render: () => withComponents('deploy/components/no-fence'), ...full, fence: false },
  { name: 'kustomize base + components/no-network-policy', fullname: 'rollguard', render: () => withComponents('deploy/components/no-network-policy'), ...full },
  { name: 'kustomize base + components/no-ca-injection', fullname: 'rollguard', render: () => withComponents('deploy/components/no-ca-injection'), ...full, caBundle: false },
  { name: 'helm defaults (release rollguard)', fullname: 'rollguard', render: () => helm('rollguard', []), ...full },
  { name: 'helm defaults (release shop)', fullname: 'shop-rollguard', render: () => helm('shop', []), ...full },
  { name: 'helm webhook.enabled=false', fullname: 'rollguard', render: () => helm('rollguard', set('webhook.enabled=false')), ...full, webhook: false, caBundle: false },
  { name: 'helm tls.certManager.enabled=true', fullname: 'rollguard', render: () => helm('rollguard', set('tls.certManager.enabled=true')), ...full, caBundle: false, tlsSecret: false },
  { name: 'helm compat=stackable', fullname: 'rollguard', render: () => helm('rollguard', set('compat=stackable')), ...full, compat: 'stackable' },
  { name: 'helm argoRollouts.enabled=true', fullname: 'rollguard', render: () => helm('rollguard', set('argoRollouts.enabled=true')), ...full, argoRollouts: true },
  {
    name: 'helm argoRollouts.enabled=true rbac.scope=namespaces',
    fullname: 'rollguard',
    render: ({ workloads }) => helm('rollguard', set('argoRollouts.enabled=true', 'rbac.scope=namespaces', `rbac.namespaces={${workloads}}`)),
    ...full,
    argoRollouts: true,
    scope: ({ workloads }) => [workloads],
  },
  { name: 'helm fence.enabled=false', fullname: 'rollguard', render: () => helm('rollguard', set('fence.enabled=false')), ...full, fence: false },
  {
    name: 'helm rbac.scope=namespaces',
    fullname: 'rollguard',
    render: ({ workloads }) => helm('rollguard', set('rbac.scope=namespaces', `rbac.namespaces={${workloads}}`)),
    ...full,
    scope: ({ workloads }) => [workloads],
  },
  ...['monitoring', 'openshift', 'platform'].map((file) => ({
    name: `helm -f deploy/helm/values/${file}.yaml`,
    fullname: 'rollguard',
    render: () => helm('rollguard', ['-f', path.resolve(`deploy/helm/values/${file}.yaml`)]),
    ...full,
  })),
];

/**
 * Renames an installation's objects and identity (`rollguard`, `rollguard-*`, but not
 * `rollguard-system` nor the `rollguard.io` keys) to a name of this test's own: uniformly, as
 * a Helm release name does, so that no object collides with another test file's deploy/base
 * and no ClusterRole of one configuration lends a right to another.
 */
const rename = (text: string, to: string): string => text.replace(/\brollguard(?!-system)(?=[-'":,\]\s}]|$)/gm, to);


function narrowedTo(selector: V1LabelSelector | undefined): string[] | undefined {
  const exprs = selector?.matchExpressions ?? [];
  const byName = exprs.find((e) => e.key === 'kubernetes.io/metadata.name' && e.operator === 'In');
  if (byName) return [...(byName.values ?? [])].sort();
  const label = selector?.matchLabels?.['kubernetes.io/metadata.name'];
  return label === undefined ? undefined : [label];
}

describe('every shipped configuration lets rollguard do its job', () => {
  const { kc, core, apps } = testCluster();
  const admin = KubernetesObjectApi.makeApiClient(kc);
  const custom = kc.makeApiClient(CustomObjectsApi);
  let workloads: string;
  let madeOneNamespace = false;
  /** the previous configuration's fence: removed once the next one is in place (see afterAll) */
  let previousFence: KubernetesObject[] = [];

  async function makeWorkloads(namespace: string): Promise<void> {
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } }) });
    await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('plain', { replicas: 1 }) });
    // a scale-down the webhook held: rollguard applies it
    await apps.createNamespacedStatefulSet({ namespace, body: statefulSet('held', { replicas: 2, labels: { [ENABLED_LABEL]: 'true' }, annotations: { [WANTED_REPLICAS_ANNOTATION]: '1' } }) });
    await apps.createNamespacedDeployment({ namespace, body: deployment('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } }) });
    await apps.createNamespacedDaemonSet({ namespace, body: daemonSet('agent', { labels: { [ENABLED_LABEL]: 'true' } }) });
    const rollout = deployment('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    await custom.createNamespacedCustomObject({ ...ROLLOUTS, namespace, body: { ...rollout, apiVersion: `${ROLLOUTS.group}/${ROLLOUTS.version}`, kind: 'Rollout' } });
    for (const pod of ['web-0', 'plain-0']) await waitFor(`pod ${namespace}/${pod}`, () => core.readNamespacedPod({ name: pod, namespace }).catch(() => undefined));
    // a handover request on a pod of an opted-in set: rollguard removes it
    await core.patchNamespacedPod({ name: 'web-0', namespace, body: [{ op: 'add', path: '/metadata/annotations', value: { [HANDOVER_REQUEST]: 'requested' } }] });
  }

  beforeAll(async () => {
    // Argo Rollouts' Rollout CRD (cluster-wide, shared, never deleted): the argo configurations write a Rollout
    await installArgoRolloutsCrd(kc);
    workloads = await createNamespace(core, 'shipped');
    await core.createNamespace({ body: { metadata: { name: ROLLGUARD_NAMESPACE } } }).catch((err: unknown) => {
      if ((err as { code?: number }).code !== 409) throw err;
    });
    await core.createNamespace({ body: { metadata: { name: ONE_NAMESPACE } } }).then(
      () => (madeOneNamespace = true),
      (err: unknown) => {
        if ((err as { code?: number }).code !== 409) throw err;
      },
    );
    await Promise.all([makeWorkloads(workloads), makeWorkloads(ONE_NAMESPACE)]);
  });

  afterAll(async () => {
    // The fence last, as an upgrade does it: kube-apiserver 1.36 stops the informer of a paramKind
    // for good once no policy of it is bound (docs/security.md). The shared control plane keeps
    // the StatefulSet paramKind bound all along (test/env/statefulset-params.ts).
    for (const obj of previousFence) await admin.delete(obj).catch(() => undefined);
    await core.deleteNamespace({ name: workloads }).catch(() => undefined);
    if (madeOneNamespace) await core.deleteNamespace({ name: ONE_NAMESPACE }).catch(() => undefined);
  });

  it.each(CONFIGS.map((c, i) => ({ ...c, index: i })))('$name', async (config) => {
    printControlPlaneLogsOnFailure();
    const name = `rgsc${config.index}`;
    const fullname = rename(config.fullname, name);
    const username = `system:serviceaccount:${ROLLGUARD_NAMESPACE}:${fullname}`;
    const scope = config.scope?.({ workloads });
    const inScope = scope?.[0] ?? workloads;
    const objects = (loadAllYaml(rename(config.render({ workloads }), name)) as KubernetesObject[]).filter((o) => APPLIED_KINDS.includes(o.kind ?? ''));
    const byKind = (kind: string): KubernetesObject[] => objects.filter((o) => o.kind === kind);
    const hooks = [...byKind('MutatingWebhookConfiguration'), ...byKind('ValidatingWebhookConfiguration')] as (KubernetesObject & {
      webhooks?: { name: string; namespaceSelector?: V1LabelSelector; objectSelector?: V1LabelSelector; clientConfig: { caBundle?: string } }[];
    })[];

    // what it renders: the webhooks, the fence and the account its RBAC binds
    expect(hooks.length > 0, 'webhook configurations rendered').toBe(config.webhook);
    expect(byKind('ValidatingAdmissionPolicy').length > 0, 'fence rendered').toBe(config.fence);
    expect(byKind('ServiceAccount').map((o) => o.metadata?.name)).toEqual([fullname]);
    if (scope) {
      // a narrowed configuration narrows every webhook entry and every binding it renders
      for (const hook of hooks) for (const entry of hook.webhooks ?? []) expect(narrowedTo(entry.namespaceSelector), `${hook.kind} entry ${entry.name}`).toEqual([...scope].sort());
      for (const binding of byKind('RoleBinding')) expect([...scope, ROLLGUARD_NAMESPACE], `RoleBinding ${binding.metadata?.name}`).toContain(binding.metadata?.namespace);
      const clusterRoles = new Map(byKind('ClusterRole').map((r) => [r.metadata?.name, (r as { rules?: V1PolicyRule[] }).rules ?? []]));
      for (const binding of byKind('ClusterRoleBinding')) {
        const rules = clusterRoles.get((binding as { roleRef?: { name?: string } }).roleRef?.name) ?? [];
        const workloadRights = rules.flatMap((r) => r.resources ?? []).filter((r) => WORKLOAD_RESOURCES.includes(r.split('/')[0]!));
        expect(workloadRights, `ClusterRoleBinding ${binding.metadata?.name} grants rights over workloads cluster-wide`).toEqual([]);
      }
    }

    const applied: KubernetesObject[] = [];
    const fence: KubernetesObject[] = [];
    const cleanUp = async (): Promise<void> => {
      for (const obj of applied.reverse()) await admin.delete(obj).catch(() => undefined);
    };
    try {
      for (const obj of objects) {
        if (obj.kind === 'MutatingWebhookConfiguration' || obj.kind === 'ValidatingWebhookConfiguration') {
          // inert copies: the same names and entries, matching no object, so the webhook (no
          // server behind it here) reviews nothing of the other tests'
          const inert = structuredClone(obj) as (typeof hooks)[number];
          for (const entry of inert.webhooks ?? []) entry.namespaceSelector = { matchLabels: { 'rollguard.test/never': 'true' } };
          await admin.create(inert);
        } else {
          await admin.create(obj);
        }
        (FENCE_KINDS.includes(obj.kind ?? '') ? fence : applied).push(obj);
      }
      for (const obj of previousFence) await admin.delete(obj).catch(() => undefined);
      previousFence = fence;

      // a token of the rendered ServiceAccount
      const token = await core.createNamespacedServiceAccountToken({ name: fullname, namespace: ROLLGUARD_NAMESPACE, body: { spec: { audiences: [], expirationSeconds: 600 } } });
      const cluster = kc.getCurrentCluster()!;
      const saConfig = new KubeConfig();
      saConfig.loadFromOptions({
        clusters: [{ name: 'test', server: cluster.server, caData: cluster.caData, caFile: cluster.caFile, skipTLSVerify: false }],
        users: [{ name: fullname, token: token.status!.token }],
        contexts: [{ name: fullname, cluster: 'test', user: fullname }],
        currentContext: fullname,
      });
      const sa = {
        core: saConfig.makeApiClient(CoreV1Api),
        apps: saConfig.makeApiClient(AppsV1Api),
        admission: saConfig.makeApiClient(AdmissionregistrationV1Api),
        authn: saConfig.makeApiClient(AuthenticationV1Api),
        leases: saConfig.makeApiClient(CoordinationV1Api),
        custom: saConfig.makeApiClient(CustomObjectsApi),
      };
      const who = await sa.authn.createSelfSubjectReview({ body: {} });
      expect(who.status?.userInfo?.username).toBe(username);

      const dryRun = 'All';
      if (config.fence) {
        // policies take effect once the API server has loaded them: wait for this fence to deny,
        // so that no write below passes only for being early
        await waitUntil(`${config.name}: the fence to deny another Secret`, async () => {
          const denied = await refusal(() => sa.core.createNamespacedSecret({ namespace: ROLLGUARD_NAMESPACE, dryRun, body: { metadata: { name: 'fence-probe' } } }));
          return denied?.includes(`ValidatingAdmissionPolicy '${fullname}-fence-writes'`) === true || `answer: ${denied ?? 'created'}`;
        });
      }
      const annotate = (p: string, key: string, value: string) => [{ op: 'add', path: `${p}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`, value }];
      const template = '/spec/template/metadata/annotations';
      // the first write makes the map: the sets are created without annotations
      const templateAnnotation = (key: string) => [{ op: 'add', path: template, value: { [key]: 'v1' } }];
      // the set annotations are the controllers' too (deployment.kubernetes.io/revision, ...): keep them
      type Ops = object[] | ((annotations: Record<string, string>) => object[]);
      const setAnnotation = (key: string): Ops => (annotations) => [{ op: 'add', path: '/metadata/annotations', value: { ...annotations, [key]: '2026-12-02T00:00:00Z' } }];
      const ops = async (body: Ops, read: () => Promise<{ metadata?: { annotations?: Record<string, string> } }>): Promise<object[]> =>
        typeof body === 'function' ? body((await read()).metadata?.annotations ?? {}) : body;
      const patchOf = (ns: string) => ({
        statefulSet: (body: Ops) => async () =>
          sa.apps.patchNamespacedStatefulSet({ name: 'web', namespace: ns, dryRun, body: await ops(body, () => apps.readNamespacedStatefulSet({ name: 'web', namespace: ns })) }),
        deployment: (body: Ops) => async () =>
          sa.apps.patchNamespacedDeployment({ name: 'web', namespace: ns, dryRun, body: await ops(body, () => apps.readNamespacedDeployment({ name: 'web', namespace: ns })) }),
        daemonSet: (body: Ops) => async () =>
          sa.apps.patchNamespacedDaemonSet({ name: 'agent', namespace: ns, dryRun, body: await ops(body, () => apps.readNamespacedDaemonSet({ name: 'agent', namespace: ns })) }),
        rollout: (body: Ops) => async () =>
          sa.custom.patchNamespacedCustomObject({
            ...ROLLOUTS,
            name: 'web',
            namespace: ns,
            dryRun,
            body: await ops(body, async () => (await custom.getNamespacedCustomObject({ ...ROLLOUTS, name: 'web', namespace: ns })) as { metadata?: { annotations?: Record<string, string> } }),
          }),
      });
      const p = patchOf(inScope);
      const caBundle = Buffer.from('-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n').toString('base64');

      type Write = [what: string, write: () => Promise<unknown>];
      const allowed: Write[] = [
        ['read the watched kinds', () => Promise.all(
          [sa.core.listNamespacedConfigMap({ namespace: inScope }), sa.core.listNamespacedSecret({ namespace: inScope }), sa.core.listNamespacedPod({ namespace: inScope }),
            sa.apps.listNamespacedStatefulSet({ namespace: inScope }), sa.apps.listNamespacedDeployment({ namespace: inScope }), sa.apps.listNamespacedDaemonSet({ namespace: inScope })])],
        ['annotate the template of a StatefulSet', p.statefulSet(templateAnnotation('configmap.rollguard.io/cfg'))],
        ['annotate the template of a Deployment', p.deployment(templateAnnotation('secret.rollguard.io/sec'))],
        ['annotate the template of a DaemonSet', p.daemonSet(templateAnnotation('configmap.rollguard.io/cfg'))],
        ['record a restart on a StatefulSet', p.statefulSet(setAnnotation('rollguard.io/last-restart-at'))],
        ['record a restart on a Deployment', p.deployment(setAnnotation('rollguard.io/last-restart-at'))],
        ['record a restart on a DaemonSet', p.daemonSet(setAnnotation('rollguard.io/last-restart-at'))],
        ['record a handover in flight on a StatefulSet', p.statefulSet(setAnnotation('rollguard.io/handover-state'))],
        ['record an Event due on a StatefulSet', p.statefulSet(setAnnotation(EVENT_DUE_ANNOTATION))],
        ['record an Event due on a Deployment', p.deployment(setAnnotation(EVENT_DUE_ANNOTATION))],
        ['record an Event due on a DaemonSet', p.daemonSet(setAnnotation(EVENT_DUE_ANNOTATION))],
        ['record the digests on a Deployment', p.deployment(setAnnotation('rollguard.io/digests'))],
        ['record the digests on a DaemonSet', p.daemonSet(setAnnotation('rollguard.io/digests'))],
        ['step the partition of a StatefulSet', p.statefulSet((annotations) => [{ op: 'add', path: '/spec/updateStrategy/rollingUpdate', value: { partition: 1 } }, { op: 'add', path: '/metadata/annotations', value: { ...annotations, [LAST_STEP_ANNOTATION]: '2026-12-02T00:00:00Z' } }])],
        ['apply a held scale-down', () =>
          sa.apps.patchNamespacedStatefulSet({
            name: 'held',
            namespace: inScope,
            dryRun,
            body: [{ op: 'replace', path: '/spec/replicas', value: 1 }, { op: 'remove', path: `/metadata/annotations/${WANTED_REPLICAS_ANNOTATION.replace(/\//g, '~1')}` }],
          })],
        ['annotate a pod of an opted-in set', () => sa.core.patchNamespacedPod({ name: 'web-0', namespace: inScope, body: [{ op: 'add', path: '/metadata/annotations', value: { 'example.com/demote': 'true' } }], dryRun })],
        ['remove the handover request of a pod', () =>
          sa.core.patchNamespacedPod({ name: 'web-0', namespace: inScope, dryRun, body: [{ op: 'remove', path: `/metadata/annotations/${HANDOVER_REQUEST.replace(/\//g, '~1')}` }] })],
        ['delete a pod of an opted-in set', () => sa.core.deleteNamespacedPod({ name: 'web-0', namespace: inScope, dryRun })],
        ['record an Event', () => sa.core.createNamespacedEvent({
          namespace: inScope,
          dryRun,
          body: { metadata: { name: `web.${name}` }, involvedObject: { kind: 'StatefulSet', name: 'web', namespace: inScope }, reason: 'ConfigChanged', message: 'm', type: 'Normal' },
        })],
        ['take the Lease', () => sa.leases.createNamespacedLease({ namespace: ROLLGUARD_NAMESPACE, dryRun, body: { metadata: { name: `${fullname}-leader` }, spec: { holderIdentity: 'x' } } })],
        // one name whatever the release (src/restarter/digest-key.ts), and so in the chart's RBAC and fence
        ['create the digest key Secret', () => sa.core.createNamespacedSecret({ namespace: ROLLGUARD_NAMESPACE, dryRun, body: { metadata: { name: rename(DIGEST_KEY_SECRET, name) }, stringData: { k: 'v' } } })],
      ];
      if (config.tlsSecret) {
        allowed.push(['create the TLS Secret', () => sa.core.createNamespacedSecret({ namespace: ROLLGUARD_NAMESPACE, dryRun, body: { metadata: { name: `${fullname}-webhook-tls` }, stringData: { k: 'v' } } })]);
      }
      if (config.caBundle) {
        for (const hook of hooks) {
          const patch = () =>
            hook.kind === 'MutatingWebhookConfiguration'
              ? sa.admission.patchMutatingWebhookConfiguration({ name: fullname, dryRun, body: (hook.webhooks ?? []).map((_, i) => ({ op: 'add', path: `/webhooks/${i}/clientConfig/caBundle`, value: caBundle })) })
              : sa.admission.patchValidatingWebhookConfiguration({ name: fullname, dryRun, body: (hook.webhooks ?? []).map((_, i) => ({ op: 'add', path: `/webhooks/${i}/clientConfig/caBundle`, value: caBundle })) });
          allowed.push([`keep the caBundle of ${hook.kind}`, () => Promise.all([patch(), (hook.kind === 'MutatingWebhookConfiguration' ? sa.admission.listMutatingWebhookConfiguration() : sa.admission.listValidatingWebhookConfiguration())])]);
        }
      }
      if (config.argoRollouts) {
        allowed.push(
          ['read the Rollouts', () => sa.custom.listNamespacedCustomObject({ ...ROLLOUTS, namespace: inScope })],
          ['annotate the template of a Rollout', p.rollout(templateAnnotation('configmap.rollguard.io/cfg'))],
          ['record a restart on a Rollout', p.rollout(setAnnotation('rollguard.io/last-restart-at'))],
          ['record the digests on a Rollout', p.rollout(setAnnotation('rollguard.io/digests'))],
        );
      }
      if (config.compat === 'stackable') {
        allowed.push(['annotate the template of a StatefulSet with a Stackable key', p.statefulSet(templateAnnotation('configmap.restarter.stackable.tech/cfg'))]);
        allowed.push(['evict a pod at its expiry', () => sa.core.createNamespacedPodEviction({ name: 'web-0', namespace: inScope, body: { metadata: { name: 'web-0', namespace: inScope }, deleteOptions: { dryRun: ['All'] } } })]);
      }

      const outcomes: Record<string, string> = {};
      for (const [what, write] of allowed) {
        // RBAC and the fence take effect once the API server has loaded them
        await waitUntil(`${config.name}: ${what}`, async () => {
          outcomes[what] = (await refusal(write)) ?? 'allowed';
          return outcomes[what] === 'allowed' || outcomes[what];
        }, { timeoutMs: 10_000 }).catch(() => undefined);
      }
      expect(outcomes, 'every write of the contract is allowed').toEqual(Object.fromEntries(allowed.map(([what]) => [what, 'allowed'])));

      // never granted by RBAC, in any configuration
      const denied: Write[] = [
        ['create a ConfigMap', () => sa.core.createNamespacedConfigMap({ namespace: inScope, dryRun, body: { metadata: { name: 'x' } } })],
        ['delete a StatefulSet', () => sa.apps.deleteNamespacedStatefulSet({ name: 'web', namespace: inScope, dryRun })],
        ['create a Secret among the workloads', () => sa.core.createNamespacedSecret({ namespace: inScope, dryRun, body: { metadata: { name: 'stolen' } } })],
        ['delete a Rollout', () => sa.custom.deleteNamespacedCustomObject({ ...ROLLOUTS, name: 'web', namespace: inScope, dryRun })],
      ];
      // without Argo Rollouts support, no right over Rollouts at all
      if (!config.argoRollouts) denied.push(['annotate the template of a Rollout without Argo Rollouts support', p.rollout(templateAnnotation('configmap.rollguard.io/cfg'))]);
      if (scope) {
        const outside = scope.includes(ONE_NAMESPACE) ? workloads : ONE_NAMESPACE;
        const q = patchOf(outside);
        denied.push(
          ['annotate a StatefulSet outside its namespaces', q.statefulSet(templateAnnotation('configmap.rollguard.io/cfg'))],
          ['annotate a Deployment outside its namespaces', q.deployment(templateAnnotation('configmap.rollguard.io/cfg'))],
          ['delete a pod outside its namespaces', () => sa.core.deleteNamespacedPod({ name: 'web-0', namespace: outside, dryRun })],
        );
      }
      // allowed by RBAC, denied by the fence
      if (config.fence) {
        const image = [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'evil.example/x:1' }];
        denied.push(
          ["change a StatefulSet's image", p.statefulSet(image)],
          ["change a Deployment's image", p.deployment(image)],
          ["change a DaemonSet's image", p.daemonSet(image)],
          ['apply a held scale-down at another count', () =>
            sa.apps.patchNamespacedStatefulSet({ name: 'held', namespace: inScope, dryRun, body: [{ op: 'replace', path: '/spec/replicas', value: 0 }, { op: 'remove', path: `/metadata/annotations/${WANTED_REPLICAS_ANNOTATION.replace(/\//g, '~1')}` }] })],
          ['scale a Deployment', p.deployment([{ op: 'replace', path: '/spec/replicas', value: 5 }])],
          ['write a partition-step annotation on a Deployment', p.deployment(setAnnotation(LAST_STEP_ANNOTATION))],
          ["rewrite a user's setting", p.statefulSet(setAnnotation('rollguard.io/health-url'))],
          ['delete a pod of a set that did not opt in', () => sa.core.deleteNamespacedPod({ name: 'plain-0', namespace: inScope, dryRun })],
          ["move a pod's label", () => sa.core.patchNamespacedPod({ name: 'web-0', namespace: inScope, dryRun, body: annotate('/metadata/labels', 'role', 'primary') })],
          ['write another Secret', () => sa.core.createNamespacedSecret({ namespace: ROLLGUARD_NAMESPACE, dryRun, body: { metadata: { name: 'stolen' } } })],
          ['take another Lease', () => sa.leases.createNamespacedLease({ namespace: ROLLGUARD_NAMESPACE, dryRun, body: { metadata: { name: 'stolen' }, spec: {} } })],
        );
        if (config.argoRollouts) {
          denied.push(
            ["change a Rollout's image", p.rollout(image)],
            ["restart a Rollout with Argo's spec.restartAt", p.rollout([{ op: 'add', path: '/spec/restartAt', value: '2026-12-02T00:00:00Z' }])],
            ['scale a Rollout', p.rollout([{ op: 'replace', path: '/spec/replicas', value: 5 }])],
            ['write a partition-step annotation on a Rollout', p.rollout(setAnnotation(LAST_STEP_ANNOTATION))],
          );
        }
        if (config.caBundle) {
          denied.push(["widen its webhook's rules", () =>
            sa.admission.patchMutatingWebhookConfiguration({ name: fullname, dryRun, body: [{ op: 'replace', path: '/webhooks/0/rules/0/resources', value: ['*'] }] })]);
        }
      }
      const refusals: Record<string, string> = {};
      for (const [what, write] of denied) {
        // the pod-deletes policy reads its StatefulSets from an informer: it may need a moment
        await waitUntil(`${config.name}: ${what} denied`, async () => {
          refusals[what] = (await refusal(write)) ?? 'allowed';
          return refusals[what].startsWith('403 ') || refusals[what];
        }, { timeoutMs: 10_000 }).catch(() => undefined);
      }
      expect(Object.entries(refusals).filter(([, r]) => !r.startsWith('403 ')), 'every write outside the contract is denied').toEqual([]);
      if (config.fence) {
        for (const what of ["change a StatefulSet's image", "change a Deployment's image", 'delete a pod of a set that did not opt in', 'write another Secret', ...(config.argoRollouts ? ["change a Rollout's image"] : [])]) {
          expect(refusals[what], `${what}: by the fence`).toContain(`ValidatingAdmissionPolicy '${fullname}-fence-`);
        }
      }
    } finally {
      await cleanUp();
    }
  });
});
