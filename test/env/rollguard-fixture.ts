import { createNamespace, testCluster } from './cluster.js';
import { FakeKubelet, type FakeKubeletOptions } from '../../src/dev/fake-kubelet.js';
import { freePort } from './ports.js';
import { startRollguardProcess, type RollguardProcess } from './rollguard-process.js';
import { registerWebhook, type WebhookRegistration } from './webhook-registration.js';
import { serviceAccountCredentials, type ServiceAccountCredentials } from './service-account.js';

export interface RollguardFixture {
  /** where the test's workloads live; the fake kubelet plays their pods */
  ns: string;
  /** rollguard's own namespace (TLS Secret, Lease) */
  own: string;
  /** the kubeconfig rollguard runs with (another replica or a restarted one runs with it too) */
  kubeconfigPath: string;
  rollguard: RollguardProcess;
  kubelet: FakeKubelet;
  teardown(): Promise<void>;
}

export interface RollguardFixtureOptions {
  /** namespace prefix, and the process's name in logs */
  name: string;
  /** registered: rollguard's webhook by URL; unreachable: registered at a port where nothing listens */
  webhook: 'registered' | 'unreachable';
  /** flags beyond the namespaces and the webhook configuration */
  args?: string[];
  /** e.g. podIps 'distinct', for a fake application that listens on each pod's own address */
  kubelet?: FakeKubeletOptions;
  /** 'stackable': rollguard runs with --compat stackable and its webhook has the second entry */
  compat?: 'stackable';
  /**
   * 'service-account': rollguard runs with a token of a ServiceAccount of its own (bound to
   * cluster-admin), as in a cluster, so that the test's writes (the admin's) are a user's to it.
   * Omitted: it shares the test's credentials.
   */
  identity?: 'service-account';
  /** The kubeconfig rollguard runs with, made from the one it would get (e.g. through a fault proxy). */
  kubeconfig?: (kubeconfigPath: string) => string;
  /** rollguard's webhook also for Argo Rollouts' Rollouts (pass --argo-rollouts in args; the CRD is the test's to install) */
  argoRollouts?: boolean;
}

/**
 * rollguard as a real process in front of one namespace of its own, the way most integration
 * files need it; teardown stops and deletes everything it made, also after a failure.
 */
export async function startRollguardFixture(opts: RollguardFixtureOptions): Promise<RollguardFixture> {
  const { kc, core, kubeconfigPath } = testCluster();
  const ns = await createNamespace(core, opts.name);
  const own = await createNamespace(core, `${opts.name}-rollguard`);
  const kubelet = new FakeKubelet(kc, ns, opts.kubelet).start();
  let rollguard: RollguardProcess | undefined;
  let webhook: WebhookRegistration | undefined;
  let account: ServiceAccountCredentials | undefined;
  const teardown = async (): Promise<void> => {
    await rollguard?.kill();
    await webhook?.delete();
    await kubelet.stop();
    await account?.remove();
    await core.deleteNamespace({ name: ns }).catch(() => undefined);
    await core.deleteNamespace({ name: own }).catch(() => undefined);
  };
  try {
    if (opts.webhook === 'unreachable') {
      // nothing listens on this port: every call fails before TLS, and failurePolicy Ignore lets it through
      webhook = await registerWebhook(kc, { name: ns, port: await freePort(), namespace: ns, failurePolicy: 'Ignore', timeoutSeconds: 2, argoRollouts: opts.argoRollouts });
    }
    if (opts.identity === 'service-account') account = await serviceAccountCredentials(kc, own, 'rollguard');
    const runsWith = opts.kubeconfig ? opts.kubeconfig(account?.kubeconfigPath ?? kubeconfigPath) : (account?.kubeconfigPath ?? kubeconfigPath);
    rollguard = await startRollguardProcess({
      name: opts.name,
      kubeconfigPath: runsWith,
      args: [
        `--namespace=${own}`,
        `--watch-namespaces=${ns}`,
        `--webhook-configuration=${opts.webhook === 'registered' ? ns : ''}`,
        ...(opts.compat ? [`--compat=${opts.compat}`] : []),
        ...(opts.args ?? []),
      ],
    });
    if (opts.webhook === 'registered') webhook = await registerWebhook(kc, { name: ns, port: rollguard.webhookPort, namespace: ns, compat: opts.compat, argoRollouts: opts.argoRollouts });
    await rollguard.waitReady();
    return { ns, own, kubeconfigPath: runsWith, rollguard, kubelet, teardown };
  } catch (err) {
    await teardown();
    throw err;
  }
}
