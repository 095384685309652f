/**
 * Rotation on request: an admin annotates the TLS Secret and the next pass acts on it.
 * - `ca`: a planned CA rotation, as at the end of the CA's life (the old CA stays in the
 *   caBundle for the propagation period);
 * - `serving`: a new serving key and certificate from the same CA;
 * - `ca-compromised`: a new CA whose serving certificate is used as soon as the caBundle
 *   holds it, and the old CA leaves the bundle as soon as every replica serves the new one.
 * The write that carries the rotation out removes the annotation.
 */
export const ROTATE_ANNOTATION = 'rollguard.io/rotate';
/** On the Secret while a CA rotation asked for as `ca-compromised` is under way. */
export const COMPROMISED_CA_ANNOTATION = 'rollguard.io/previous-ca-compromised';

const REQUESTS = ['ca', 'serving', 'ca-compromised'] as const;
export type RotationRequest = (typeof REQUESTS)[number];

export type ParsedRotationRequest = { request?: RotationRequest; problem?: string };

export function rotationRequest(annotations: Record<string, string> | undefined): ParsedRotationRequest {
  const value = annotations?.[ROTATE_ANNOTATION];
  if (value === undefined) return {};
  if ((REQUESTS as readonly string[]).includes(value.trim())) return { request: value.trim() as RotationRequest };
  return { problem: `${ROTATE_ANNOTATION}: ${JSON.stringify(value)} is not one of ${REQUESTS.join(', ')}` };
}

export function isCompromiseUnderWay(annotations: Record<string, string> | undefined): boolean {
  return annotations?.[COMPROMISED_CA_ANNOTATION] === 'true';
}

/** The Secret's annotations after a write that acted: the request gone, the compromise marker set or cleared. */
export function annotationsAfter(
  annotations: Record<string, string> | undefined,
  change: { consumedRequest: boolean; compromise: 'start' | 'end' | 'keep' },
): Record<string, string> {
  const out = { ...annotations };
  if (change.consumedRequest) delete out[ROTATE_ANNOTATION];
  if (change.compromise === 'start') out[COMPROMISED_CA_ANNOTATION] = 'true';
  if (change.compromise === 'end') delete out[COMPROMISED_CA_ANNOTATION];
  return out;
}
