import type { ServingKeyPair } from '../../src/tls/certificates.js';

/** A certificate source for the webhook server whose pair a test or benchmark replaces by hand. */
export function staticCertificateSource(initial: ServingKeyPair) {
  let pair = initial;
  const listeners = new Set<(p: ServingKeyPair) => void>();
  return {
    current: () => pair,
    onChange(listener: (p: ServingKeyPair) => void) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    set(next: ServingKeyPair) {
      pair = next;
      for (const l of listeners) l(next);
    },
  };
}
