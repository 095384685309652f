import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  AdmissionregistrationV1Api,
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  loadAllYaml,
  type KubernetesObject,
  type V1PolicyRule,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installArgoRolloutsCrd } from '../../src/dev/argo-rollouts.js';
import { controlPlaneBinaries, kubeconfig } from '../../src/dev/control-plane.js';
import { createNamespace, daemonSet, deployment, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { createSignedCertificate } from '../../src/tls/certificates.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';
import { EXPIRES_AT_PREFIX } from '../../src/compat/expiry.js';
import { STACKABLE_ENABLED_LABEL, enabledLabels } from '../../src/compat/stackable.js';
import { evictionGuardEntry, webhookEntryName } from '../../src/dev/webhook-registration.js';
import { HEALTH_GATED_ANNOTATION, HEALTH_GATED_VALUE } from '../../src/rollout/decision.js';
import { LAST_STEP_ANNOTATION } from '../../src/rollout/last-step.js';
import { WANTED_REPLICAS_ANNOTATION } from '../../src/rollout/scale-down-hold.js';
import { HANDOVER_ANNOTATE_ANNOTATION, PRIMARY_SELECTOR_ANNOTATION } from '../../src/handover/settings.js';
import { refusal } from '../env/refusal.js';

const ROLLGUARD_NAMESPACE = 'rollguard-system';

/** One way of installing rollguard's rights: what it renders and the names rollguard then uses. */
interface Mode {
  name: string;
  /** the service account, and the prefix of every object name */
  account: string;
  render(workloads: string): string;
  /** --compat of the rendering: rollguard runs with it, and the scenario walks its paths too */
  compat?: 'stackable';
  /** --argo-rollouts (Helm argoRollouts.enabled): rollguard runs with it, and the scenario rolls a Rollout too */
  argoRollouts?: boolean;
}

const ROLLOUTS = { group: 'argoproj.io', version: 'v1alpha1', plural: 'rollouts' } as const;

const kubectlKustomize = (dir: string): string =>
  execFileSync(path.join(controlPlaneBinaries(), 'kubectl'), ['kustomize', path.resolve(dir)], { encoding: 'utf8' });

const MODES: Mode[] = [
  { name: 'cluster-wide (deploy/base)', account: 'rollguard', render: () => kubectlKustomize('deploy/base') },
  {
    // another release, so that none of the ClusterRoles above can lend it a right
    name: 'namespaced (Helm rbac.scope=namespaces)',
    account: 'rgns-rollguard',
    render: (workloads) => {
      const tools = execFileSync('bash', [path.resolve('test/env/build-tools.sh')], { encoding: 'utf8' }).trim().split('\n').pop() ?? '';
      return execFileSync(
        path.join(tools, 'helm'),
        ['template', 'rgns', path.resolve('deploy/helm/rollguard'), '--namespace', ROLLGUARD_NAMESPACE, '--set', 'rbac.scope=namespaces', '--set', `rbac.namespaces={${workloads}}`],
        { encoding: 'utf8' },
      );
    },
  },
  {
    // --compat stackable widens RBAC (pods/eviction) and the fence (Stackable keys, evictions)
    name: 'cluster-wide, --compat stackable (Helm compat=stackable)',
    account: 'rgstk-rollguard',
    compat: 'stackable',
    render: () => {
      const tools = execFileSync('bash', [path.resolve('test/env/build-tools.sh')], { encoding: 'utf8' }).trim().split('\n').pop() ?? '';
      return execFileSync(path.join(tools, 'helm'), ['template', 'rgstk', path.resolve('deploy/helm/rollguard'), '--namespace', ROLLGUARD_NAMESPACE, '--set', 'compat=stackable'], {
        encoding: 'utf8',
      });
    },
  },
  {
    // argoRollouts.enabled widens RBAC (rollouts list, watch, patch), the webhook and the fence (fence-rollouts)
    name: 'cluster-wide, --argo-rollouts (Helm argoRollouts.enabled)',
    account: 'rgargo-rollguard',
    argoRollouts: true,
    render: () => {
      const tools = execFileSync('bash', [path.resolve('test/env/build-tools.sh')], { encoding: 'utf8' }).trim().split('\n').pop() ?? '';
      return execFileSync(path.join(tools, 'helm'), ['template', 'rgargo', path.resolve('deploy/helm/rollguard'), '--namespace', ROLLGUARD_NAMESPACE, '--set', 'argoRollouts.enabled=true'], {
        encoding: 'utf8',
      });
    },
  },
];
const FENCE_KINDS = ['ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'];
const FENCE_PROBE = 'fence-probe';

interface AuditEvent {
  user: { username: string };
  verb: string;
  objectRef?: { resource?: string; subresource?: string; apiGroup?: string; namespace?: string; name?: string };
  responseStatus?: { code?: number };
  stage: string;
}

/** "group/resource verb", the unit RBAC grants in */
type Grant = string;

function grantsOf(rules: V1PolicyRule[]): Set<Grant> {
  const out = new Set<Grant>();
  for (const r of rules) for (const g of r.apiGroups ?? []) for (const res of r.resources ?? []) for (const v of r.verbs) out.add(`${g}/${res} ${v}`);
  return out;
}


// The test of record for deploy/'s RBAC and its fence: rollguard runs as its own service
// account with only the roles and ValidatingAdmissionPolicies of deploy/base, does every kind
// of work, and the API server's audit log tells what it called. Nothing may be forbidden, and
// nothing granted may go unused. Then, as that account, every write its contract does not
// name is tried and must be denied by a policy of the fence (RBAC alone would allow each).
// The fence binds its service account everywhere: every mode's is removed once the file is done.
// Removing it is safe for the files that follow only because the shared control plane keeps
// the StatefulSet paramKind bound all along (test/env/statefulset-params.ts): kube-apiserver 1.36
// stops the params informer for good once none is bound (docs/security.md).
const fences: KubernetesObject[] = [];
afterAll(async () => {
  const client = KubernetesObjectApi.makeApiClient(testCluster().kc);
  for (const obj of fences) await client.delete(obj).catch(() => undefined);
});

describe.each(MODES)('RBAC and fence, $name', (mode) => {
  const { kc, core, apps } = testCluster();
  const SERVICE_ACCOUNT = `system:serviceaccount:${ROLLGUARD_NAMESPACE}:${mode.account}`;
  const fencePolicy = (part: string): string => `${mode.account}-fence-${part}`;
  const webhookConfiguration = mode.account;
  let sa: { core: CoreV1Api; apps: AppsV1Api; admission: AdmissionregistrationV1Api; custom: CustomObjectsApi };
  const custom = kc.makeApiClient(CustomObjectsApi);
  const fence: KubernetesObject[] = [];
  /** objects of a mode of its own, removed afterwards (deploy/base's may be another test file's too) */
  const created: KubernetesObject[] = [];
  let workloads: string;
  let rollguard: RollguardProcess | undefined;
  let kubelet: FakeKubelet;
  const rbacRules: V1PolicyRule[] = [];
  const auditLog = path.join(inject('controlPlaneDir'), 'audit.log');

  beforeAll(async () => {
    // cluster-wide and shared: installed if absent, never deleted
    if (mode.argoRollouts) await installArgoRolloutsCrd(kc);
    workloads = await createNamespace(core, 'rbac');
    kubelet = new FakeKubelet(kc, workloads).start();
    // the chart renders no Namespace (helm install --create-namespace makes it)
    await core.createNamespace({ body: { metadata: { name: ROLLGUARD_NAMESPACE } } }).catch((err: unknown) => {
      if ((err as { code?: number }).code !== 409) throw err;
    });
    const rendered = mode.render(workloads);
    const objects = (loadAllYaml(rendered) as KubernetesObject[]).filter((o) =>
      ['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', ...FENCE_KINDS].includes(o.kind ?? ''),
    );
    const client = KubernetesObjectApi.makeApiClient(kc);
    for (const obj of objects) {
      try {
        await client.create(obj);
        if (mode.account !== 'rollguard' && obj.kind !== 'Namespace') created.push(obj);
      } catch (err) {
        if ((err as { code?: number }).code !== 409) throw err;
      }
      if (obj.kind === 'ClusterRole' || obj.kind === 'Role') rbacRules.push(...((obj as { rules?: V1PolicyRule[] }).rules ?? []));
      if (FENCE_KINDS.includes(obj.kind ?? '')) {
        fence.push(obj);
        fences.push(obj);
      }
    }
    expect(fence.length, 'deploy/base ships the fence').toBeGreaterThanOrEqual(2);

    // a client certificate whose user name is the service account's: RBAC sees rollguard's own identity
    const pki = path.join(inject('controlPlaneDir'), 'pki');
    const ca = { certPem: fs.readFileSync(path.join(pki, 'ca.crt'), 'utf8'), keyPem: fs.readFileSync(path.join(pki, 'ca.key'), 'utf8') };
    const cred = await createSignedCertificate(ca, {
      commonName: SERVICE_ACCOUNT,
      organizations: ['system:serviceaccounts', `system:serviceaccounts:${ROLLGUARD_NAMESPACE}`],
      usage: 'client',
      validitySeconds: 3600,
      keyBits: 2048,
    });
    const saKubeconfig = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-rbac-')), 'sa.kubeconfig');
    fs.writeFileSync(saKubeconfig, kubeconfig(kc.getCurrentCluster()!.server, ca.certPem, mode.account, cred));
    const saConfig = new KubeConfig();
    saConfig.loadFromFile(saKubeconfig);
    sa = {
      core: saConfig.makeApiClient(CoreV1Api),
      apps: saConfig.makeApiClient(AppsV1Api),
      admission: saConfig.makeApiClient(AdmissionregistrationV1Api),
      custom: saConfig.makeApiClient(CustomObjectsApi),
    };
    // policies take effect once the API server has loaded them: wait for one to deny
    await waitUntil('the fence to deny rollguard a Secret of another name', async () => {
      const denied = await refusal(() =>
        sa.core.createNamespacedSecret({ namespace: ROLLGUARD_NAMESPACE, dryRun: 'All', body: { metadata: { name: FENCE_PROBE } } }),
      );
      return denied?.includes(fencePolicy('writes')) === true || `answer: ${denied ?? 'created'}`;
    });

    rollguard = await startRollguardProcess({
      name: 'rbac',
      kubeconfigPath: saKubeconfig,
      args: [
        `--namespace=${ROLLGUARD_NAMESPACE}`,
        `--watch-namespaces=${workloads}`,
        '--debounce=0s',
        `--webhook-configuration=${webhookConfiguration}`,
        `--eviction-webhook-configuration=${webhookConfiguration}`,
        `--tls-secret=${mode.account}-webhook-tls`,
        `--lease-name=${mode.account}-leader`,
        '--rollout-min-step-interval=0s',
        '--rollout-min-ready=0s',
        ...(mode.compat ? [`--compat=${mode.compat}`] : []),
        ...(mode.argoRollouts ? ['--argo-rollouts'] : []),
      ],
    });
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    await admission.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: webhookConfiguration },
        webhooks: enabledLabels(mode.compat ?? '').map((label) => ({
          name: webhookEntryName(label),
          clientConfig: { url: `https://127.0.0.1:${rollguard!.webhookPort}/mutate` },
          rules: [
            { operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: label === ENABLED_LABEL ? ['statefulsets', 'deployments', 'daemonsets'] : ['statefulsets'] },
            ...(mode.argoRollouts && label === ENABLED_LABEL ? [{ operations: ['CREATE', 'UPDATE'], apiGroups: [ROLLOUTS.group], apiVersions: [ROLLOUTS.version], resources: [ROLLOUTS.plural] }] : []),
          ],
          objectSelector: { matchLabels: { [label]: 'true' } },
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': workloads } },
          failurePolicy: 'Ignore',
          sideEffects: 'None',
          admissionReviewVersions: ['v1'],
          timeoutSeconds: 5,
        })),
      },
    });
    // the eviction guard's configuration: rollguard keeps its caBundle too (list, watch, patch)
    await admission.createValidatingWebhookConfiguration({
      body: {
        metadata: { name: webhookConfiguration },
        webhooks: [evictionGuardEntry(rollguard.webhookPort, { matchLabels: { 'kubernetes.io/metadata.name': workloads } })],
      },
    });
    await rollguard.waitReady();
  });

  afterAll(async () => {
    await rollguard?.kill();
    await kubelet?.stop();
    await kc.makeApiClient(AdmissionregistrationV1Api).deleteMutatingWebhookConfiguration({ name: webhookConfiguration }).catch(() => undefined);
    await kc.makeApiClient(AdmissionregistrationV1Api).deleteValidatingWebhookConfiguration({ name: webhookConfiguration }).catch(() => undefined);
    await core.deleteNamespace({ name: workloads }).catch(() => undefined);
    const client = KubernetesObjectApi.makeApiClient(kc);
    for (const obj of created.filter((o) => !FENCE_KINDS.includes(o.kind ?? ''))) await client.delete(obj).catch(() => undefined);
  });

  it('does its work with only the roles it is given, through its fence, and uses every verb they grant', async () => {
    printControlPlaneLogsOnFailure();
    // the webhook path: a labelled set stored already annotated
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    await core.createNamespacedSecret({ namespace: workloads, body: { metadata: { name: 'sec' }, stringData: { p: 'x' } } });
    const set = statefulSet('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }, { secretRef: { name: 'sec' } }];
    await apps.createNamespacedStatefulSet({ namespace: workloads, body: set });
    // the same for the other kinds: list, watch and patch of Deployments and DaemonSets
    const web = deployment('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    web.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    await apps.createNamespacedDeployment({ namespace: workloads, body: web });
    const agent = daemonSet('agent', { labels: { [ENABLED_LABEL]: 'true' } });
    agent.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
    await apps.createNamespacedDaemonSet({ namespace: workloads, body: agent });
    // --argo-rollouts: list, watch and patch of Rollouts (the CRD only; no Argo controller runs)
    if (mode.argoRollouts) {
      const rollout = deployment('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
      rollout.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }];
      await custom.createNamespacedCustomObject({ ...ROLLOUTS, namespace: workloads, body: { ...rollout, apiVersion: `${ROLLOUTS.group}/${ROLLOUTS.version}`, kind: 'Rollout' } });
    }
    // the reconcile path: a change, a patch and an Event
    await core.patchNamespacedConfigMap({ name: 'cfg', namespace: workloads, body: [{ op: 'replace', path: '/data/a', value: '2' }] });
    await waitFor('the ConfigMap change to roll web, its Deployment and the DaemonSet', async () => {
      const generations = [
        (await apps.readNamespacedStatefulSet({ name: 'web', namespace: workloads })).metadata?.generation ?? 0,
        (await apps.readNamespacedDeployment({ name: 'web', namespace: workloads })).metadata?.generation ?? 0,
        (await apps.readNamespacedDaemonSet({ name: 'agent', namespace: workloads })).metadata?.generation ?? 0,
        ...(mode.argoRollouts
          ? [((await custom.getNamespacedCustomObject({ ...ROLLOUTS, name: 'web', namespace: workloads })) as { metadata?: { generation?: number } }).metadata?.generation ?? 0]
          : []),
      ];
      return generations.every((g) => g >= 2) ? true : undefined;
    });
    await waitUntil('a ConfigChanged Event', async () => {
      const events = await core.listNamespacedEvent({ namespace: workloads });
      return events.items.some((e) => e.reason === 'ConfigChanged') || `reasons: ${events.items.map((e) => e.reason).join(',')}`;
    });
    // the health-gated path: partition steps with rollguard's own set annotation, through the fence
    const gated = statefulSet('gated', {
      replicas: 2,
      labels: { [ENABLED_LABEL]: 'true' },
      annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE },
    });
    gated.spec!.podManagementPolicy = 'Parallel';
    await apps.createNamespacedStatefulSet({ namespace: workloads, body: gated });
    const atRest = await waitFor('gated at rest, its partition held at 2', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'gated', namespace: workloads });
      const st = s.status;
      return s.spec?.updateStrategy?.rollingUpdate?.partition === 2 && st?.readyReplicas === 2 && st.currentRevision === st.updateRevision
        ? s
        : undefined;
    });
    await apps.patchNamespacedStatefulSet({
      name: 'gated',
      namespace: workloads,
      body: [{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'registry.example/app:2' }],
    });
    await waitUntil('gated rolled out by partition steps', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'gated', namespace: workloads });
      const st = s.status;
      const done =
        st?.updateRevision !== atRest.status?.updateRevision &&
        st?.currentRevision === st?.updateRevision &&
        st?.updatedReplicas === 2 &&
        s.spec?.updateStrategy?.rollingUpdate?.partition === 2 &&
        s.metadata?.annotations?.[LAST_STEP_ANNOTATION] !== undefined;
      return done || `partition ${s.spec?.updateStrategy?.rollingUpdate?.partition}, revisions ${st?.currentRevision}→${st?.updateRevision}`;
    }, { timeoutMs: 60_000 });
    // a handover's annotation of a pod of an opted-in set, and the removal of a request, pass the fence
    await sa.core.patchNamespacedPod({
      name: 'gated-1',
      namespace: workloads,
      body: [{ op: 'add', path: '/metadata/annotations', value: { 'example.com/demote': 'true', 'rollguard.io/handover': 'requested' } }],
    });
    await sa.core.patchNamespacedPod({ name: 'gated-1', namespace: workloads, body: [{ op: 'remove', path: '/metadata/annotations/rollguard.io~1handover' }] });
    // rollguard's delete of a pod of an opted-in set passes the fence
    await sa.core.deleteNamespacedPod({ name: 'gated-0', namespace: workloads });
    await walkHeldScaleDown();
    if (mode.compat === 'stackable') await walkStackablePaths();

    const calls = await waitFor('rollguard requests in the audit log, a Lease renewal among them', () => {
      const events = fs
        .readFileSync(auditLog, 'utf8')
        .split('\n')
        .filter((l) => l.includes(SERVICE_ACCOUNT))
        .map((l) => JSON.parse(l) as AuditEvent)
        .filter((e) => e.objectRef?.name !== FENCE_PROBE)
        .filter((e) => e.user.username === SERVICE_ACCOUNT && (e.stage === 'ResponseComplete' || e.stage === 'ResponseStarted') && e.objectRef?.resource);
      return events.some((e) => e.objectRef?.resource === 'leases' && e.verb === 'update') ? events : undefined;
    });
    const forbidden = calls.filter((c) => c.responseStatus?.code === 403).map((c) => `${c.verb} ${c.objectRef?.apiGroup ?? ''}/${c.objectRef?.resource}`);
    expect(forbidden, 'requests the roles of deploy/base forbid').toEqual([]);
    // through the fence, rollguard learned who it is: the webhook tells the loop's writes from a user's by it
    expect(rollguard!.logLines().map((l) => l.serviceAccount)).toContain(SERVICE_ACCOUNT);

    const used = new Set(
      calls.map((c) => `${c.objectRef?.apiGroup ?? ''}/${c.objectRef?.resource}${c.objectRef?.subresource ? `/${c.objectRef.subresource}` : ''} ${c.verb}`),
    );
    const granted = grantsOf(rbacRules);
    // granted for paths this scenario does not walk; each with the reason it exists
    const exercisedElsewhere = new Map<Grant, string>([
      ['/pods delete', 'health-gated rollback deletes a stuck pod (test/integration/rollout-*.test.ts)'],
      ['/pods get', 'the eviction guard reads the pod being evicted (test/integration/handover.test.ts)'],
      ['/events patch', 'a repeated Event is counted up instead of written again'],
      ['/services get', 'a health URL naming a Service of the set\'s namespace (test/integration/rollout-health-target.test.ts)'],
      ['coordination.k8s.io/leases create', 'only the first replica ever creates the Lease; another test file may have'],
      ['/secrets create', 'only the first replica ever creates the TLS Secret; another test file may have'],
      ['/secrets update', 'a certificate renewal rewrites the TLS Secret (test/integration/tls-*.test.ts)'],
      ['discovery.k8s.io/endpointslices list', 'replacing a compromised CA checks every replica (test/integration/tls-rotate-now.test.ts)'],
    ]);
    const unused = [...granted].filter((g) => !used.has(g) && !exercisedElsewhere.has(g)).sort();
    expect(unused, 'granted but never used: drop them from deploy/ (base rbac.yaml, the chart\'s rbac.yaml)').toEqual([]);
  });

  /**
   * A held scale-down through the fence: the webhook holds it in the user's write, rollguard
   * applies it (replicas = the recorded count, the record removed); the record a scale-subresource
   * hold writes passes too (a server dry run, which the fence judges like any write).
   */
  async function walkHeldScaleDown(): Promise<void> {
    const held = statefulSet('held', {
      replicas: 2,
      labels: { [ENABLED_LABEL]: 'true' },
      annotations: { [HEALTH_GATED_ANNOTATION]: HEALTH_GATED_VALUE, [PRIMARY_SELECTOR_ANNOTATION]: 'role=primary', [HANDOVER_ANNOTATE_ANNOTATION]: 'example.com/demote=true' },
    });
    held.spec!.podManagementPolicy = 'Parallel';
    await apps.createNamespacedStatefulSet({ namespace: workloads, body: held });
    await waitFor('pod held-0', () => core.readNamespacedPod({ name: 'held-0', namespace: workloads }).catch(() => undefined));
    await core.patchNamespacedPod({ name: 'held-0', namespace: workloads, body: [{ op: 'add', path: '/metadata/labels/role', value: 'primary' }] });
    await waitUntil('held at rest with 2 Ready pods', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'held', namespace: workloads });
      return (s.status?.readyReplicas === 2 && s.spec?.updateStrategy?.rollingUpdate?.partition === 2) || `ready ${s.status?.readyReplicas}`;
    }, { timeoutMs: 60_000 });
    const stored = await apps.patchNamespacedStatefulSet({ name: 'held', namespace: workloads, body: [{ op: 'replace', path: '/spec/replicas', value: 1 }] });
    expect(stored.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION], 'the webhook held the scale-down').toBe('1');
    await waitUntil('rollguard to apply the held scale-down through the fence', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'held', namespace: workloads });
      return (s.spec?.replicas === 1 && s.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION] === undefined) || `replicas ${s.spec?.replicas}, wanted ${s.metadata?.annotations?.[WANTED_REPLICAS_ANNOTATION]}`;
    }, { timeoutMs: 30_000 });
    await sa.apps.patchNamespacedStatefulSet({
      name: 'held',
      namespace: workloads,
      dryRun: 'All',
      body: [{ op: 'add', path: '/metadata/annotations/rollguard.io~1wanted-replicas', value: '0' }],
    });
  }

  /** --compat stackable: a Stackable set rolled through the fence, and a pod evicted at its expires-at time. */
  async function walkStackablePaths(): Promise<void> {
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: 'stk-cfg' }, data: { a: '1' } } });
    const stk = statefulSet('stk', { replicas: 1, labels: { [STACKABLE_ENABLED_LABEL]: 'true' } });
    stk.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'stk-cfg' } }];
    await apps.createNamespacedStatefulSet({ namespace: workloads, body: stk });
    const pod = await waitFor('pod stk-0', () => core.readNamespacedPod({ name: 'stk-0', namespace: workloads }).catch(() => undefined));
    await core.patchNamespacedConfigMap({ name: 'stk-cfg', namespace: workloads, body: [{ op: 'replace', path: '/data/a', value: '2' }] });
    await waitFor('the ConfigMap change to roll stk through the fence', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'stk', namespace: workloads });
      return (s.metadata?.generation ?? 0) >= 2 ? true : undefined;
    });
    // a pod whose certificate expires now: evicted by rollguard's own account (pods/eviction create)
    const victim = await waitFor('a pod stk-0 of the new revision', async () => {
      const p = await core.readNamespacedPod({ name: 'stk-0', namespace: workloads }).catch(() => undefined);
      return p && p.metadata?.uid !== pod.metadata?.uid && !p.metadata?.deletionTimestamp ? p : undefined;
    });
    await core.patchNamespacedPod({
      name: 'stk-0',
      namespace: workloads,
      body: [{ op: 'add', path: '/metadata/annotations', value: { [`${EXPIRES_AT_PREFIX}tls`]: new Date().toISOString() } }],
    });
    await waitUntil('stk-0 evicted at its expires-at time', async () => {
      const events = await core.listNamespacedEvent({ namespace: workloads });
      return events.items.some((e) => e.reason === 'Expired' && e.involvedObject.uid === victim.metadata?.uid) || `reasons: ${events.items.map((e) => e.reason).join(',')}`;
    });
  }

  it('is denied, by a policy of the fence and not by RBAC, every write its contract does not name', async () => {
    printControlPlaneLogsOnFailure();
    const set = { name: 'web', namespace: workloads };
    const patchSet = (ops: object[]) => () => sa.apps.patchNamespacedStatefulSet({ ...set, body: ops });
    const patchDeployment = (ops: object[]) => () => sa.apps.patchNamespacedDeployment({ ...set, body: ops });
    const patchDaemonSet = (ops: object[]) => () => sa.apps.patchNamespacedDaemonSet({ name: 'agent', namespace: workloads, body: ops });
    const patchRollout = (ops: object[]) => () => sa.custom.patchNamespacedCustomObject({ ...ROLLOUTS, ...set, body: ops });
    await apps.createNamespacedStatefulSet({ namespace: workloads, body: statefulSet('plain', { replicas: 1 }) });
    await core.createNamespacedPod({
      namespace: workloads,
      body: { metadata: { name: 'loose' }, spec: { containers: [{ name: 'app', image: 'registry.example/app:1' }] } },
    });
    await waitFor('pod plain-0', () => core.readNamespacedPod({ name: 'plain-0', namespace: workloads }).catch(() => undefined));
    const hooks = (await kc.makeApiClient(AdmissionregistrationV1Api).readMutatingWebhookConfiguration({ name: webhookConfiguration })).webhooks!;
    // a record on a set rollguard does not hold (no primary selector): only replicas = its count could apply it
    await apps.patchNamespacedStatefulSet({ ...set, body: [{ op: 'add', path: '/metadata/annotations', value: { ...(await apps.readNamespacedStatefulSet(set)).metadata?.annotations, [WANTED_REPLICAS_ANNOTATION]: '0' } }] });
    const webAnnotations = (await apps.readNamespacedStatefulSet(set)).metadata?.annotations ?? {};

    const attempts: [what: string, policy: string, says: string, write: () => Promise<unknown>][] = [
      ['patch an image', fencePolicy('statefulsets'), 'this write changes spec.template.spec', patchSet([{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'evil.example/x:1' }])],
      ['add a container', fencePolicy('statefulsets'), 'this write changes spec.template.spec', patchSet([{ op: 'add', path: '/spec/template/spec/containers/-', value: { name: 'miner', image: 'evil.example/x:1' } }])],
      ['change a template label', fencePolicy('statefulsets'), 'this write changes spec.template.metadata.labels', patchSet([{ op: 'add', path: '/spec/template/metadata/labels/extra', value: 'x' }])],
      ['scale the set', fencePolicy('statefulsets'), 'this write changes spec.replicas', patchSet([{ op: 'replace', path: '/spec/replicas', value: 5 }])],
      ['record a scale-down on a set without a primary selector', fencePolicy('statefulsets'), 'rollguard writes rollguard.io/wanted-replicas only as a count below replicas', patchSet([{ op: 'add', path: '/metadata/annotations', value: { ...webAnnotations, [WANTED_REPLICAS_ANNOTATION]: '1' } }])],
      ['apply a held scale-down at another count than the recorded one', fencePolicy('statefulsets'), 'this write changes spec.replicas', patchSet([{ op: 'replace', path: '/spec/replicas', value: 2 }, { op: 'remove', path: '/metadata/annotations/rollguard.io~1wanted-replicas' }])],
      ["rewrite the user's health URL", fencePolicy('statefulsets'), 'this write changes rollguard.io/health-url', patchSet([{ op: 'add', path: '/metadata/annotations', value: { 'rollguard.io/health-url': 'http://169.254.169.254/' } }])],
      ['add a foreign template annotation', fencePolicy('statefulsets'), 'this write changes example.com/x', patchSet([{ op: 'add', path: '/spec/template/metadata/annotations/example.com~1x', value: '1' }])],
      ['patch the image of a Deployment', fencePolicy('deployments-daemonsets'), 'this write changes spec.template.spec', patchDeployment([{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'evil.example/x:1' }])],
      ['scale a Deployment', fencePolicy('deployments-daemonsets'), 'this write changes spec.replicas', patchDeployment([{ op: 'replace', path: '/spec/replicas', value: 5 }])],
      ['pause a Deployment', fencePolicy('deployments-daemonsets'), 'this write changes spec.paused', patchDeployment([{ op: 'add', path: '/spec/paused', value: true }])],
      ["change a DaemonSet's update strategy", fencePolicy('deployments-daemonsets'), 'this write changes spec.updateStrategy', patchDaemonSet([{ op: 'replace', path: '/spec/updateStrategy', value: { type: 'OnDelete' } }])],
      ['write a partition-step annotation on a DaemonSet', fencePolicy('deployments-daemonsets'), 'this write changes rollguard.io/last-step-at', patchDaemonSet([{ op: 'add', path: '/metadata/annotations/rollguard.io~1last-step-at', value: '2026-12-01T00:00:00Z' }])],
      ['add a foreign template annotation to a DaemonSet', fencePolicy('deployments-daemonsets'), 'this write changes example.com/x', patchDaemonSet([{ op: 'add', path: '/spec/template/metadata/annotations/example.com~1x', value: '1' }])],
      ['delete a pod of a set that did not opt in', fencePolicy('pod-deletes'), 'plain-0 belongs to plain', () => sa.core.deleteNamespacedPod({ name: 'plain-0', namespace: workloads })],
      ['delete a pod no StatefulSet owns', fencePolicy('writes'), 'loose has no such owner', () => sa.core.deleteNamespacedPod({ name: 'loose', namespace: workloads })],
      ['annotate a pod of a set that did not opt in', fencePolicy('pod-deletes'), 'plain-0 belongs to plain', () =>
        sa.core.patchNamespacedPod({ name: 'plain-0', namespace: workloads, body: [{ op: 'add', path: '/metadata/annotations', value: { 'example.com/x': '1' } }] })],
      ['annotate a pod no StatefulSet owns', fencePolicy('writes'), 'loose has no such owner', () =>
        sa.core.patchNamespacedPod({ name: 'loose', namespace: workloads, body: [{ op: 'add', path: '/metadata/annotations', value: { 'example.com/x': '1' } }] })],
      ["move a pod's role label", fencePolicy('pods'), 'this write changes metadata.labels', () =>
        sa.core.patchNamespacedPod({ name: 'web-0', namespace: workloads, body: [{ op: 'add', path: '/metadata/labels/role', value: 'primary' }] })],
      ["change a pod's spec", fencePolicy('pods'), 'this write changes spec', () =>
        sa.core.patchNamespacedPod({ name: 'web-0', namespace: workloads, body: [{ op: 'add', path: '/spec/activeDeadlineSeconds', value: 1 }] })],
      ['write another Secret', fencePolicy('writes'), `not ${ROLLGUARD_NAMESPACE}/stolen`, () => sa.core.createNamespacedSecret({ namespace: ROLLGUARD_NAMESPACE, body: { metadata: { name: 'stolen' }, stringData: { k: 'v' } } })],
      ['change the webhook rules', fencePolicy('webhook-ca'), 'this write changes webhooks statefulsets.rollguard.io', () =>
        sa.admission.patchMutatingWebhookConfiguration({
          name: webhookConfiguration,
          body: [{ op: 'replace', path: '/webhooks/0/rules/0/resources', value: ['*'] }],
        })],
      ['point the webhook elsewhere', fencePolicy('webhook-ca'), 'this write changes webhooks statefulsets.rollguard.io', () =>
        sa.admission.patchMutatingWebhookConfiguration({
          name: webhookConfiguration,
          body: [{ op: 'replace', path: '/webhooks/0/clientConfig', value: { ...hooks[0]!.clientConfig, url: 'https://evil.example/' } }],
        })],
      ["widen the eviction guard's rules", fencePolicy('webhook-ca'), 'ValidatingWebhookConfiguration; this write changes webhooks evictions.rollguard.io', () =>
        sa.admission.patchValidatingWebhookConfiguration({
          name: webhookConfiguration,
          body: [{ op: 'replace', path: '/webhooks/0/rules/0/resources', value: ['*'] }],
        })],
      ["make the eviction guard fail closed", fencePolicy('webhook-ca'), 'this write changes webhooks evictions.rollguard.io', () =>
        sa.admission.patchValidatingWebhookConfiguration({
          name: webhookConfiguration,
          body: [{ op: 'replace', path: '/webhooks/0/failurePolicy', value: 'Fail' }],
        })],
    ];
    if (mode.argoRollouts) {
      attempts.push(
        ['patch the image of a Rollout', fencePolicy('rollouts'), 'this write changes spec.template.spec', patchRollout([{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'evil.example/x:1' }])],
        ['scale a Rollout', fencePolicy('rollouts'), 'this write changes spec.replicas', patchRollout([{ op: 'replace', path: '/spec/replicas', value: 5 }])],
        ["restart a Rollout with Argo's own spec.restartAt", fencePolicy('rollouts'), 'this write changes spec.restartAt', patchRollout([{ op: 'add', path: '/spec/restartAt', value: '2026-12-01T00:00:00Z' }])],
        ['write a partition-step annotation on a Rollout', fencePolicy('rollouts'), 'this write changes rollguard.io/last-step-at', patchRollout([{ op: 'add', path: '/metadata/annotations/rollguard.io~1last-step-at', value: '2026-12-01T00:00:00Z' }])],
        ['add a foreign template annotation to a Rollout', fencePolicy('rollouts'), 'this write changes example.com/x', patchRollout([{ op: 'add', path: '/spec/template/metadata/annotations/example.com~1x', value: '1' }])],
      );
    }
    const outcomes: Record<string, string> = {};
    for (const [what, policy, says, write] of attempts) {
      // the pod-deletes policy reads its StatefulSets from an informer of the API server: it may need a moment
      await waitUntil(`${what} to be denied by ${policy}`, async () => {
        const denied = await refusal(write);
        outcomes[what] = denied ?? 'allowed';
        return denied?.includes(`ValidatingAdmissionPolicy '${policy}'`) === true || `answer: ${outcomes[what]}`;
      }, { timeoutMs: 10_000 });
      // the denial says what was wrong with the write
      expect(outcomes[what], what).toContain(says);
    }
    for (const [what, message] of Object.entries(outcomes)) expect(message, what).toMatch(/^403 /);
    // the denials left everything as it was
    const web = await apps.readNamespacedStatefulSet(set);
    expect(web.spec!.template.spec!.containers.map((c) => c.image)).toEqual(['registry.example/app:1']);
    const webDeployment = await apps.readNamespacedDeployment(set);
    expect([webDeployment.spec!.replicas, webDeployment.spec!.paused, webDeployment.spec!.template.spec!.containers[0]!.image]).toEqual([1, undefined, 'registry.example/app:1']);
    expect((await apps.readNamespacedDaemonSet({ name: 'agent', namespace: workloads })).spec!.updateStrategy?.type).toBe('RollingUpdate');
    expect(await core.readNamespacedPod({ name: 'loose', namespace: workloads })).toBeDefined();
  });
});
