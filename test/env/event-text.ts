/**
 * Whether an Event message names `resourceVersion` as the version it moved to: "… → 264)" (a
 * version change) or "…, resourceVersion 208 → 264" (a data change), alone or before "; …".
 */
export function endsWithVersion(message: string | undefined, resourceVersion: string): boolean {
  return message !== undefined && new RegExp(`→ ${resourceVersion}(\\)|;|$)`).test(message);
}
