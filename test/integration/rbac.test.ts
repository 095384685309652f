import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  AdmissionregistrationV1Api,
  KubernetesObjectApi,
  loadAllYaml,
  type KubernetesObject,
  type V1PolicyRule,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { controlPlaneBinaries, kubeconfig } from '../../src/dev/control-plane.js';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { FakeKubelet } from '../../src/dev/fake-kubelet.js';
import { startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { createSignedCertificate } from '../../src/tls/certificates.js';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';

const ROLLGUARD_NAMESPACE = 'rollguard-system';
const SERVICE_ACCOUNT = `system:serviceaccount:${ROLLGUARD_NAMESPACE}:rollguard`;

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

// The test of record for deploy/'s RBAC: rollguard runs as its own service account with only
// the roles of deploy/base, does every kind of work, and the API server's audit log tells
// what it called. Nothing may be forbidden, and nothing granted may go unused.
describe('RBAC of deploy/base', () => {
  const { kc, core, apps } = testCluster();
  let workloads: string;
  let rollguard: RollguardProcess | undefined;
  let kubelet: FakeKubelet;
  const rbacRules: V1PolicyRule[] = [];
  const auditLog = path.join(inject('controlPlaneDir'), 'audit.log');

  beforeAll(async () => {
    workloads = await createNamespace(core, 'rbac');
    kubelet = new FakeKubelet(kc, workloads).start();
    const kubectl = path.join(controlPlaneBinaries(), 'kubectl');
    const rendered = execFileSync(kubectl, ['kustomize', path.resolve('deploy/base')], { encoding: 'utf8' });
    const objects = (loadAllYaml(rendered) as KubernetesObject[]).filter((o) =>
      ['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding'].includes(o.kind ?? ''),
    );
    const client = KubernetesObjectApi.makeApiClient(kc);
    for (const obj of objects) {
      try {
        await client.create(obj);
      } catch (err) {
        if ((err as { code?: number }).code !== 409) throw err;
      }
      if (obj.kind === 'ClusterRole' || obj.kind === 'Role') rbacRules.push(...((obj as { rules?: V1PolicyRule[] }).rules ?? []));
    }

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
    fs.writeFileSync(saKubeconfig, kubeconfig(kc.getCurrentCluster()!.server, ca.certPem, 'rollguard', cred));

    rollguard = await startRollguardProcess({
      name: 'rbac',
      kubeconfigPath: saKubeconfig,
      args: [`--namespace=${ROLLGUARD_NAMESPACE}`, `--watch-namespaces=${workloads}`, '--debounce=0s', '--webhook-configuration=rollguard'],
    });
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    await admission.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: 'rollguard' },
        webhooks: [
          {
            name: 'statefulsets.rollguard.io',
            clientConfig: { url: `https://127.0.0.1:${rollguard.webhookPort}/mutate` },
            rules: [{ operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: ['statefulsets'] }],
            objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } },
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': workloads } },
            failurePolicy: 'Ignore',
            sideEffects: 'None',
            admissionReviewVersions: ['v1'],
            timeoutSeconds: 5,
          },
        ],
      },
    });
    await rollguard.waitReady();
  });

  afterAll(async () => {
    await rollguard?.kill();
    await kubelet?.stop();
    await kc.makeApiClient(AdmissionregistrationV1Api).deleteMutatingWebhookConfiguration({ name: 'rollguard' }).catch(() => undefined);
    await core.deleteNamespace({ name: workloads }).catch(() => undefined);
  });

  it('does its work with only the roles of deploy/base, and uses every verb they grant', async () => {
    printControlPlaneLogsOnFailure();
    // the webhook path: a labelled set stored already annotated
    await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: 'cfg' }, data: { a: '1' } } });
    await core.createNamespacedSecret({ namespace: workloads, body: { metadata: { name: 'sec' }, stringData: { p: 'x' } } });
    const set = statefulSet('web', { replicas: 1, labels: { [ENABLED_LABEL]: 'true' } });
    set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: 'cfg' } }, { secretRef: { name: 'sec' } }];
    await apps.createNamespacedStatefulSet({ namespace: workloads, body: set });
    // the reconcile path: a change, a patch and an Event
    await core.patchNamespacedConfigMap({ name: 'cfg', namespace: workloads, body: [{ op: 'replace', path: '/data/a', value: '2' }] });
    await waitFor('the ConfigMap change to roll web', async () => {
      const s = await apps.readNamespacedStatefulSet({ name: 'web', namespace: workloads });
      return (s.metadata?.generation ?? 0) >= 2 ? true : undefined;
    });
    await waitUntil('a ConfigChanged Event', async () => {
      const events = await core.listNamespacedEvent({ namespace: workloads });
      return events.items.some((e) => e.reason === 'ConfigChanged') || `reasons: ${events.items.map((e) => e.reason).join(',')}`;
    });

    const calls = await waitFor('rollguard requests in the audit log, a Lease renewal among them', () => {
      const events = fs
        .readFileSync(auditLog, 'utf8')
        .split('\n')
        .filter((l) => l.includes(SERVICE_ACCOUNT))
        .map((l) => JSON.parse(l) as AuditEvent)
        .filter((e) => e.user.username === SERVICE_ACCOUNT && (e.stage === 'ResponseComplete' || e.stage === 'ResponseStarted') && e.objectRef?.resource);
      return events.some((e) => e.objectRef?.resource === 'leases' && e.verb === 'update') ? events : undefined;
    });
    const forbidden = calls.filter((c) => c.responseStatus?.code === 403).map((c) => `${c.verb} ${c.objectRef?.apiGroup ?? ''}/${c.objectRef?.resource}`);
    expect(forbidden, 'requests the roles of deploy/base forbid').toEqual([]);

    const used = new Set(
      calls.map((c) => `${c.objectRef?.apiGroup ?? ''}/${c.objectRef?.resource}${c.objectRef?.subresource ? `/${c.objectRef.subresource}` : ''} ${c.verb}`),
    );
    const granted = grantsOf(rbacRules);
    // granted for paths this scenario does not walk; each with the reason it exists
    const exercisedElsewhere = new Map<Grant, string>([
      ['/pods delete', 'health-gated rollback deletes a stuck pod (test/integration/rollout-*.test.ts)'],
      ['/events patch', 'a repeated Event is counted up instead of written again'],
      ['coordination.k8s.io/leases create', 'only the first replica ever creates the Lease; another test file may have'],
      ['/secrets create', 'only the first replica ever creates the TLS Secret; another test file may have'],
      ['/secrets update', 'a certificate renewal rewrites the TLS Secret (test/integration/tls-*.test.ts)'],
    ]);
    const unused = [...granted].filter((g) => !used.has(g) && !exercisedElsewhere.has(g)).sort();
    expect(unused, 'granted but never used: drop them from deploy/base/rbac.yaml').toEqual([]);
  });
});
