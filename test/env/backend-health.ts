/**
 * The health of one balanced backend, as L4 balancers count it: a single counter moved by each
 * check's result, so that `fall` failed checks in a row take an UP backend out and `rise`
 * passed checks in a row put a DOWN one back; one result against the trend resets the count.
 * No I/O here: tcp-balancer.ts runs the checks and asks these functions what they mean.
 *
 * The counter runs from 0 (DOWN, no passed check since the last failure) to rise + fall - 1
 * (fully UP); the backend is UP exactly when it is at least `rise`.
 */
export interface HealthThresholds {
  /** Passed checks in a row that make a DOWN backend UP. */
  rise: number;
  /** Failed checks in a row that make an UP backend DOWN. */
  fall: number;
}

/**
 * A backend nobody has checked yet counts as DOWN, so nothing reaches it before its /readyz has
 * answered once. (Some balancers start a checked server UP and let the first failure take it
 * down; a Service's endpoint is not ready before its first probe passes, and that is what tests need.)
 */
export const UNCHECKED = 0;

function fullyUp(t: HealthThresholds): number {
  return t.rise + t.fall - 1;
}

/** The counter after one more check. */
export function healthAfterCheck(health: number, passed: boolean, t: HealthThresholds): number {
  if (passed) {
    const next = Math.min(health + 1, fullyUp(t));
    // reaching `rise` is coming up: from then on it takes `fall` failures to go down
    return next >= t.rise ? fullyUp(t) : next;
  }
  const next = Math.max(health - 1, 0);
  // below `rise` is down: from then on it takes `rise` passes to come up
  return next < t.rise ? 0 : next;
}

/** Whether the backend gets new connections. */
export function isUp(health: number, t: HealthThresholds): boolean {
  return health >= t.rise;
}

/**
 * The state as a balancer's stats show it: `UP`, `DOWN`, or a backend on its way: `UP k/fall` is up
 * with k more failures taking it down (`UP 1/2`: one), `DOWN k/rise` is down with k of the `rise`
 * passes that bring it up seen (`DOWN 1/3`).
 */
export function healthText(health: number, t: HealthThresholds): string {
  if (health === 0) return 'DOWN';
  if (health === fullyUp(t)) return 'UP';
  return isUp(health, t) ? `UP ${health - t.rise + 1}/${t.fall}` : `DOWN ${health}/${t.rise}`;
}
