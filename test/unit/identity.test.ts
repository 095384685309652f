import { describe, expect, it } from 'vitest';
import { isServiceAccount } from '../../src/kube/identity.js';

describe('isServiceAccount', () => {
  it('is true only for a ServiceAccount username: a person\'s credentials are no identity of rollguard\'s alone', () => {
    expect(isServiceAccount('system:serviceaccount:rollguard-system:rollguard')).toBe(true);
    for (const name of [undefined, '', 'kubernetes-admin', 'system:admin', 'system:serviceaccount:rollguard-system', 'system:serviceaccounts:rollguard-system:rollguard', 'x:system:serviceaccount:a:b']) {
      expect(isServiceAccount(name), String(name)).toBe(false);
    }
  });
});
