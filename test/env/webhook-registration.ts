import type { KubeConfig, V1ValidatingWebhook } from '@kubernetes/client-node';
import { registerWebhook as registerDevWebhook, type WebhookRegistration } from '../../src/dev/webhook-registration.js';

export type { WebhookRegistration };

/** rollguard's webhook by URL on loopback for the labelled workloads (StatefulSets, Deployments, DaemonSets; Rollouts with argoRollouts) of one namespace. */
export function registerWebhook(
  kc: KubeConfig,
  opts: { name: string; port: number; namespace: string; failurePolicy?: 'Ignore' | 'Fail'; timeoutSeconds?: number; compat?: 'stackable'; evictionGuard?: boolean; argoRollouts?: boolean },
): Promise<WebhookRegistration> {
  const { namespace, ...rest } = opts;
  return registerDevWebhook(kc, { ...rest, namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } } });
}

/** A webhook entry with the caBundle a test read from rollguard's own registration. */
export function withCaBundle(entry: V1ValidatingWebhook, caBundle: string | undefined): V1ValidatingWebhook {
  return { ...entry, clientConfig: { ...entry.clientConfig, caBundle } };
}
