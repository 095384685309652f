import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { policyDenial } from '../../src/kube/policy-denial.js';

const DENIAL =
  "statefulsets.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'rollguard-fence-statefulsets' with binding " +
  "'rollguard-fence-statefulsets' denied request: rollguard may change only the partition, its own annotations and the pod-template annotations it owns; this write changes spec.template.spec";

describe('policyDenial', () => {
  it('returns the message that names the policy, from the body as the client hands it over', () => {
    const status = { kind: 'Status', code: 403, reason: 'Forbidden', message: DENIAL };
    expect(policyDenial(new ApiException(403, 'Forbidden', JSON.stringify(status), {}))).toBe(DENIAL);
    expect(policyDenial(new ApiException(403, 'Forbidden', status, {}))).toBe(DENIAL);
  });

  it('is undefined for every other failure', () => {
    expect(policyDenial(new ApiException(403, 'Forbidden', JSON.stringify({ message: 'User cannot patch resource' }), {}))).toBeUndefined();
    expect(policyDenial(new ApiException(409, 'Conflict', JSON.stringify({ message: DENIAL }), {}))).toBeUndefined();
    expect(policyDenial(new Error(DENIAL))).toBeUndefined();
    expect(policyDenial(undefined)).toBeUndefined();
    expect(policyDenial(new ApiException(403, 'Forbidden', 'not json', {}))).toBeUndefined();
  });
});
