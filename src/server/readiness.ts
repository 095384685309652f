/** Whether this replica may receive admission traffic, and why not. */
export interface Readiness {
  ready: boolean;
  reasons: string[];
}

export interface ReadinessInputs {
  /** The webhook listens: before that a Service trusting /readyz would send reviews to a closed port. */
  listening: boolean;
  shuttingDown: boolean;
  /** Certificate loaded and the caBundle holds its CA. */
  certificateReady: boolean;
  cachesSynced: boolean;
}

/** The one definition of readiness, for /readyz on both servers and for /status. */
export function readiness(inputs: ReadinessInputs): Readiness {
  const reasons: string[] = [];
  if (!inputs.listening) reasons.push('starting: the webhook server is not listening yet');
  if (inputs.shuttingDown) reasons.push('shutting down');
  if (!inputs.certificateReady) reasons.push('certificate not loaded or caBundle without its CA');
  if (!inputs.cachesSynced) reasons.push('caches not synced');
  return { ready: reasons.length === 0, reasons };
}
