import { createSelfSubjectReview } from './api-clients.js';
import type { KubeAccess } from './kube-client.js';

const SERVICE_ACCOUNT_PREFIX = 'system:serviceaccount:';

/**
 * The username the API server knows this process by (a SelfSubjectReview, which every
 * authenticated user may make), for telling rollguard's own writes from a user's at admission.
 * Only a ServiceAccount is rollguard's alone: a person's credentials (a developer's kubeconfig,
 * `rollguard dev`) are shared with the person, so for them undefined is returned.
 */
export async function ownServiceAccount(kubeConfig: KubeAccess): Promise<string | undefined> {
  const review = await createSelfSubjectReview(kubeConfig);
  const username = review.status?.userInfo?.username;
  return isServiceAccount(username) ? username : undefined;
}

export function isServiceAccount(username: string | undefined): username is string {
  return username !== undefined && username.startsWith(SERVICE_ACCOUNT_PREFIX) && username.split(':').length === 4;
}
