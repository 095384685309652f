import { AdmissionregistrationV1Api, type KubeConfig, type V1LabelSelector } from '@kubernetes/client-node';
import { WORKLOAD_PLURALS } from '../kube/workloads.js';
import { ENABLED_LABEL } from '../restarter/annotations.js';

export interface WebhookRegistration {
  name: string;
  delete(): Promise<void>;
}

export interface WebhookRegistrationOptions {
  name: string;
  port: number;
  /** the namespaces whose labelled StatefulSets, Deployments and DaemonSets go through the webhook */
  namespaceSelector: V1LabelSelector;
  failurePolicy?: 'Ignore' | 'Fail';
  timeoutSeconds?: number;
}

/**
 * Registers rollguard's webhook by URL on loopback, as envtest does. The caBundle is left empty:
 * rollguard injects it (it runs with --webhook-configuration=name).
 */
export async function registerWebhook(kc: KubeConfig, opts: WebhookRegistrationOptions): Promise<WebhookRegistration> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  await api.createMutatingWebhookConfiguration({
    body: {
      metadata: { name: opts.name },
      webhooks: [
        {
          name: 'statefulsets.rollguard.io',
          clientConfig: { url: `https://127.0.0.1:${opts.port}/mutate` },
          rules: [{ operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: Object.values(WORKLOAD_PLURALS) }],
          objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } },
          namespaceSelector: opts.namespaceSelector,
          failurePolicy: opts.failurePolicy ?? 'Ignore',
          sideEffects: 'None',
          reinvocationPolicy: 'IfNeeded',
          admissionReviewVersions: ['v1'],
          timeoutSeconds: opts.timeoutSeconds ?? 5,
        },
      ],
    },
  });
  return {
    name: opts.name,
    delete: async () => {
      await api.deleteMutatingWebhookConfiguration({ name: opts.name }).catch(() => undefined);
    },
  };
}
