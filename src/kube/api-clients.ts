import type {
  CoreV1Event,
  V1DaemonSet,
  V1Deployment,
  V1EndpointSliceList,
  V1Lease,
  V1MutatingWebhookConfiguration,
  V1Pod,
  V1Preconditions,
  V1Secret,
  V1SelfSubjectReview,
  V1Service,
  V1StatefulSet,
  V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import type { Operation } from 'fast-json-patch';
import { JSON_PATCH, clientFor, seg, type KubeAccess } from './kube-client.js';

// The calls the serving process makes, each named and shaped as client-node's generated API
// classes name and shape it (`readNamespacedPod({ name, namespace })`), so a part written
// against one takes the other; made with rollguard's own client (kube-client.ts), so that
// serving loads none of the generated API. Patches are JSON Patch, as every patch of rollguard's is.
// The model types are client-node's, imported as types only: their date fields are typed Date,
// what comes back holds the API server's string (nothing here reads a date but as a string or
// through `new Date(...)`, which takes either).

interface Named {
  name: string;
  namespace: string;
}
interface Signal {
  signal?: AbortSignal;
}

const ns = (namespace: string): string => `/api/v1/namespaces/${seg(namespace)}`;
const appsNs = (namespace: string): string => `/apis/apps/v1/namespaces/${seg(namespace)}`;

export interface CoreV1 {
  readNamespacedPod(p: Named): Promise<V1Pod>;
  patchNamespacedPod(p: Named & { body: Operation[] }): Promise<V1Pod>;
  deleteNamespacedPod(p: Named & { body?: { preconditions?: V1Preconditions } }): Promise<unknown>;
  createNamespacedPodEviction(p: Named & { body: unknown }): Promise<unknown>;
  readNamespacedSecret(p: Named): Promise<V1Secret>;
  createNamespacedSecret(p: { namespace: string; body: V1Secret }): Promise<V1Secret>;
  replaceNamespacedSecret(p: Named & { body: V1Secret }): Promise<V1Secret>;
  readNamespacedService(p: Named): Promise<V1Service>;
  createNamespacedEvent(p: { namespace: string; body: CoreV1Event }): Promise<CoreV1Event>;
  patchNamespacedEvent(p: Named & { body: Operation[] }): Promise<CoreV1Event>;
}

export function coreV1(access: KubeAccess): CoreV1 {
  const c = clientFor(access);
  return {
    readNamespacedPod: ({ name, namespace }) => c.call('GET', `${ns(namespace)}/pods/${seg(name)}`),
    patchNamespacedPod: ({ name, namespace, body }) => c.call('PATCH', `${ns(namespace)}/pods/${seg(name)}`, { body, contentType: JSON_PATCH }),
    deleteNamespacedPod: ({ name, namespace, body }) => c.call('DELETE', `${ns(namespace)}/pods/${seg(name)}`, body ? { body } : {}),
    createNamespacedPodEviction: ({ name, namespace, body }) => c.call('POST', `${ns(namespace)}/pods/${seg(name)}/eviction`, { body }),
    readNamespacedSecret: ({ name, namespace }) => c.call('GET', `${ns(namespace)}/secrets/${seg(name)}`),
    createNamespacedSecret: ({ namespace, body }) => c.call('POST', `${ns(namespace)}/secrets`, { body }),
    replaceNamespacedSecret: ({ name, namespace, body }) => c.call('PUT', `${ns(namespace)}/secrets/${seg(name)}`, { body }),
    readNamespacedService: ({ name, namespace }) => c.call('GET', `${ns(namespace)}/services/${seg(name)}`),
    createNamespacedEvent: ({ namespace, body }) => c.call('POST', `${ns(namespace)}/events`, { body }),
    patchNamespacedEvent: ({ name, namespace, body }) => c.call('PATCH', `${ns(namespace)}/events/${seg(name)}`, { body, contentType: JSON_PATCH }),
  };
}

export interface AppsV1 {
  patchNamespacedStatefulSet(p: Named & { body: Operation[] }): Promise<V1StatefulSet>;
  patchNamespacedDeployment(p: Named & { body: Operation[] }): Promise<V1Deployment>;
  patchNamespacedDaemonSet(p: Named & { body: Operation[] }): Promise<V1DaemonSet>;
}

export function appsV1(access: KubeAccess): AppsV1 {
  const c = clientFor(access);
  const patch = <T>(plural: string) => ({ name, namespace, body }: Named & { body: Operation[] }): Promise<T> =>
    c.call('PATCH', `${appsNs(namespace)}/${plural}/${seg(name)}`, { body, contentType: JSON_PATCH });
  return {
    patchNamespacedStatefulSet: patch<V1StatefulSet>('statefulsets'),
    patchNamespacedDeployment: patch<V1Deployment>('deployments'),
    patchNamespacedDaemonSet: patch<V1DaemonSet>('daemonsets'),
  };
}

export interface CustomObjects {
  /** A JSON Patch of a namespaced custom resource (an Argo Rollout), answered as the stored object's wire JSON. */
  patchNamespacedCustomObject(p: Named & { group: string; version: string; plural: string; body: Operation[] }): Promise<unknown>;
}

export function customObjects(access: KubeAccess): CustomObjects {
  const c = clientFor(access);
  return {
    patchNamespacedCustomObject: ({ group, version, plural, name, namespace, body }) =>
      c.call('PATCH', `/apis/${seg(group)}/${seg(version)}/namespaces/${seg(namespace)}/${seg(plural)}/${seg(name)}`, { body, contentType: JSON_PATCH }),
  };
}

export interface CoordinationV1 {
  readNamespacedLease(p: Named & Signal): Promise<V1Lease>;
  createNamespacedLease(p: { namespace: string; body: V1Lease } & Signal): Promise<V1Lease>;
  replaceNamespacedLease(p: Named & { body: V1Lease } & Signal): Promise<V1Lease>;
}

export function coordinationV1(access: KubeAccess): CoordinationV1 {
  const c = clientFor(access);
  const leases = (namespace: string): string => `/apis/coordination.k8s.io/v1/namespaces/${seg(namespace)}/leases`;
  return {
    readNamespacedLease: ({ name, namespace, signal }) => c.call('GET', `${leases(namespace)}/${seg(name)}`, { signal }),
    createNamespacedLease: ({ namespace, body, signal }) => c.call('POST', leases(namespace), { body, signal }),
    replaceNamespacedLease: ({ name, namespace, body, signal }) => c.call('PUT', `${leases(namespace)}/${seg(name)}`, { body, signal }),
  };
}

export function createSelfSubjectReview(access: KubeAccess): Promise<V1SelfSubjectReview> {
  return clientFor(access).call('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
  });
}

export interface AdmissionregistrationV1 {
  patchMutatingWebhookConfiguration(p: { name: string; body: Operation[] }): Promise<V1MutatingWebhookConfiguration>;
  patchValidatingWebhookConfiguration(p: { name: string; body: Operation[] }): Promise<V1ValidatingWebhookConfiguration>;
}

export function admissionregistrationV1(access: KubeAccess): AdmissionregistrationV1 {
  const c = clientFor(access);
  const base = '/apis/admissionregistration.k8s.io/v1';
  return {
    patchMutatingWebhookConfiguration: ({ name, body }) => c.call('PATCH', `${base}/mutatingwebhookconfigurations/${seg(name)}`, { body, contentType: JSON_PATCH }),
    patchValidatingWebhookConfiguration: ({ name, body }) => c.call('PATCH', `${base}/validatingwebhookconfigurations/${seg(name)}`, { body, contentType: JSON_PATCH }),
  };
}

export function listNamespacedEndpointSlice(access: KubeAccess, p: { namespace: string; labelSelector: string }): Promise<V1EndpointSliceList> {
  return clientFor(access).call('GET', `/apis/discovery.k8s.io/v1/namespaces/${seg(p.namespace)}/endpointslices?labelSelector=${encodeURIComponent(p.labelSelector)}`);
}
