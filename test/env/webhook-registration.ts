import { AdmissionregistrationV1Api, type KubeConfig } from '@kubernetes/client-node';
import { ENABLED_LABEL } from '../../src/restarter/annotations.js';

export interface WebhookRegistration {
  name: string;
  delete(): Promise<void>;
}

/**
 * Registers rollguard's webhook by URL on loopback, as envtest does, for the StatefulSets of one
 * namespace. The caBundle is left empty: rollguard injects it (pass it --webhook-configuration=name).
 */
export async function registerWebhook(
  kc: KubeConfig,
  opts: {
    name: string;
    port: number;
    namespace: string;
    failurePolicy?: 'Ignore' | 'Fail';
    timeoutSeconds?: number;
    /** The webhook's own name, as the API server's metrics label it; unique per test on a shared control plane. */
    webhookName?: string;
  },
): Promise<WebhookRegistration> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  await api.createMutatingWebhookConfiguration({
    body: {
      metadata: { name: opts.name },
      webhooks: [
        {
          name: opts.webhookName ?? 'statefulsets.rollguard.io',
          clientConfig: { url: `https://127.0.0.1:${opts.port}/mutate` },
          rules: [{ operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: ['statefulsets'] }],
          objectSelector: { matchLabels: { [ENABLED_LABEL]: 'true' } },
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': opts.namespace } },
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
