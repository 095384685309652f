import { AdmissionregistrationV1Api, type KubeConfig } from '@kubernetes/client-node';

/** the policy and its binding: never deleted, they die with the control plane */
export const STATEFULSET_PARAMS_HOLDER = 'rollguard-test-statefulset-params';

/**
 * Keeps kube-apiserver's informer of StatefulSets for policy params running for the life of the
 * control plane.
 *
 * The fence's `rollguard-fence-pod-deletes` takes its params from StatefulSets. kube-apiserver
 * 1.36 stops that informer once, for one policy refresh (a second), no binding of a policy with
 * `paramKind` StatefulSet exists; and it never starts it again: later policies of that paramKind
 * read the stopped informer's store, frozen, so a StatefulSet created after that is not found
 * and the fence allows what it must deny (kubernetes/kubernetes#130887; docs/security.md). The
 * test files that install fences (rbac, shipped-configs) remove them when they are done, so
 * without a holder whichever of them ran second failed. This policy matches no request; its
 * binding alone keeps the paramKind in use.
 */
export async function holdStatefulSetParams(kc: KubeConfig): Promise<void> {
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  await admission.createValidatingAdmissionPolicy({
    body: {
      metadata: { name: STATEFULSET_PARAMS_HOLDER },
      spec: {
        failurePolicy: 'Ignore',
        paramKind: { apiVersion: 'apps/v1', kind: 'StatefulSet' },
        // a group no API serves: nothing is ever reviewed
        matchConstraints: { resourceRules: [{ apiGroups: ['holder.rollguard.test'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['nothing'] }] },
        validations: [{ expression: 'true' }],
      },
    },
  });
  await admission.createValidatingAdmissionPolicyBinding({
    body: {
      metadata: { name: STATEFULSET_PARAMS_HOLDER },
      spec: {
        policyName: STATEFULSET_PARAMS_HOLDER,
        validationActions: ['Deny'],
        paramRef: { selector: {}, parameterNotFoundAction: 'Allow' },
      },
    },
  });
}
