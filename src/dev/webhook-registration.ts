import { AdmissionregistrationV1Api, type KubeConfig, type V1LabelSelector, type V1MutatingWebhook, type V1ValidatingWebhook } from '@kubernetes/client-node';
import { enabledLabels, type CompatMode } from '../compat/stackable.js';
import { APPS_WORKLOAD_KINDS, WORKLOAD_RESOURCES } from '../kube/workloads.js';
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
  /** 'stackable': a second entry for Stackable's opt-in label (one objectSelector cannot OR two labels). */
  compat?: CompatMode;
  /** also the eviction guard: a ValidatingWebhookConfiguration of the same name for `CREATE pods/eviction` */
  evictionGuard?: boolean;
  /** also Argo Rollouts' Rollouts (rollguard runs with --argo-rollouts): a rule for argoproj.io/v1alpha1 rollouts in rollguard's entry */
  argoRollouts?: boolean;
}

/** The rules of rollguard's own entry: the apps/v1 kinds, and Rollouts when asked. */
function workloadRules(argoRollouts: boolean): V1MutatingWebhook['rules'] {
  const apps = { operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: APPS_WORKLOAD_KINDS.map((k) => WORKLOAD_RESOURCES[k].plural) };
  const { group, version, plural } = WORKLOAD_RESOURCES.Rollout;
  return argoRollouts ? [apps, { operations: ['CREATE', 'UPDATE'], apiGroups: [group], apiVersions: [version], resources: [plural] }] : [apps];
}

/**
 * The eviction guard's entry, as deploy/base ships it but by URL on loopback: a namespaceSelector
 * (an objectSelector would see the Eviction). No caBundle: rollguard injects it, or the caller sets it.
 */
export function evictionGuardEntry(port: number, namespaceSelector: V1LabelSelector, timeoutSeconds = 5): V1ValidatingWebhook {
  return {
    name: 'evictions.rollguard.io',
    clientConfig: { url: `https://127.0.0.1:${port}/validate-eviction` },
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods/eviction'] }],
    namespaceSelector,
    failurePolicy: 'Ignore',
    sideEffects: 'NoneOnDryRun',
    admissionReviewVersions: ['v1'],
    timeoutSeconds,
  };
}

/** The webhook entry name for sets opted in by `label`. */
export function webhookEntryName(label: string): string {
  return label === ENABLED_LABEL ? 'statefulsets.rollguard.io' : 'stackable-statefulsets.rollguard.io';
}

/** The name of the entry for the scale subresource of StatefulSets. */
export const SCALE_WEBHOOK_NAME = 'scale.statefulsets.rollguard.io';

/**
 * The scale subresource's entry: a Scale carries no labels, so no objectSelector (the handler
 * looks the set up in its cache); it records a held scale-down on the set (NoneOnDryRun).
 */
function scaleWebhook(opts: WebhookRegistrationOptions): V1MutatingWebhook {
  return {
    name: SCALE_WEBHOOK_NAME,
    clientConfig: { url: `https://127.0.0.1:${opts.port}/mutate-scale` },
    rules: [{ operations: ['UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: ['statefulsets/scale'] }],
    namespaceSelector: opts.namespaceSelector,
    failurePolicy: opts.failurePolicy ?? 'Ignore',
    sideEffects: 'NoneOnDryRun',
    admissionReviewVersions: ['v1'],
    timeoutSeconds: opts.timeoutSeconds ?? 5,
  };
}

/**
 * Registers rollguard's webhook by URL on loopback, as envtest does. The caBundle is left empty:
 * rollguard injects it (it runs with --webhook-configuration=name, and for the eviction guard
 * --eviction-webhook-configuration=name).
 */
export async function registerWebhook(kc: KubeConfig, opts: WebhookRegistrationOptions): Promise<WebhookRegistration> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  await api.createMutatingWebhookConfiguration({
    body: {
      metadata: { name: opts.name },
      webhooks: [
        ...enabledLabels(opts.compat ?? '').map(
          (label): V1MutatingWebhook => ({
            name: webhookEntryName(label),
            clientConfig: { url: `https://127.0.0.1:${opts.port}/mutate` },
            // Stackable's opt-in is for StatefulSets; rollguard's own for the three kinds (and Rollouts with --argo-rollouts)
            rules: label === ENABLED_LABEL ? workloadRules(opts.argoRollouts ?? false) : [{ operations: ['CREATE', 'UPDATE'], apiGroups: ['apps'], apiVersions: ['v1'], resources: ['statefulsets'] }],
            objectSelector: { matchLabels: { [label]: 'true' } },
            namespaceSelector: opts.namespaceSelector,
            failurePolicy: opts.failurePolicy ?? 'Ignore',
            sideEffects: 'None',
            reinvocationPolicy: 'IfNeeded',
            admissionReviewVersions: ['v1'],
            timeoutSeconds: opts.timeoutSeconds ?? 5,
          }),
        ),
        scaleWebhook(opts),
      ],
    },
  });
  if (opts.evictionGuard) {
    await api.createValidatingWebhookConfiguration({ body: { metadata: { name: opts.name }, webhooks: [evictionGuardEntry(opts.port, opts.namespaceSelector, opts.timeoutSeconds)] } });
  }
  return {
    name: opts.name,
    delete: async () => {
      await api.deleteMutatingWebhookConfiguration({ name: opts.name }).catch(() => undefined);
      if (opts.evictionGuard) await api.deleteValidatingWebhookConfiguration({ name: opts.name }).catch(() => undefined);
    },
  };
}
