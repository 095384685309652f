/** A decoded JSON object: not null, not an array. */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `value` when it is a JSON object, else undefined: a field of the wrong type counts as absent. */
export function jsonObjectOrUndefined(value: unknown): Record<string, unknown> | undefined {
  return isJsonObject(value) ? value : undefined;
}

/** `value` when it is an array, else empty: a list of the wrong type counts as absent. */
export function arrayOrEmpty(value: unknown): readonly unknown[] {
  return Array.isArray(value) ? value : [];
}

/**
 * The string entries of a map such as labels or annotations; undefined when `value` is not an
 * object. Entries of another type are left out, as the API server would never have stored them.
 */
export function stringEntries(value: unknown): Record<string, string> | undefined {
  if (!isJsonObject(value)) return undefined;
  // fromEntries defines own properties, so a key such as "__proto__" stays an ordinary key
  return Object.fromEntries(Object.entries(value).filter((entry): entry is [string, string] => typeof entry[1] === 'string'));
}

/**
 * Whether `value` holds objects or arrays nested more than `max` levels deep. Recursive, but
 * never deeper than `max` calls, and allocating nothing: it runs on every admission review, so a
 * leaf (most of an object's values) is passed over without a call.
 */
export function nestedDeeperThan(value: unknown, max: number): boolean {
  return typeof value === 'object' && value !== null && containerDeeperThan(value, max);
}

function containerDeeperThan(container: object, max: number): boolean {
  if (max <= 0) return true;
  if (Array.isArray(container)) {
    for (const child of container as unknown[]) if (typeof child === 'object' && child !== null && containerDeeperThan(child, max - 1)) return true;
    return false;
  }
  const record = container as Record<string, unknown>;
  // for-in without an own-key test: JSON.parse makes plain objects, whose prototype has no
  // enumerable keys; the test cost about a third of the walk (bench/admission-steps)
  for (const key in record) {
    const child = record[key];
    if (typeof child === 'object' && child !== null && containerDeeperThan(child, max - 1)) return true;
  }
  return false;
}

/**
 * Structural equality of decoded Kubernetes objects: a key set to undefined or null equals a
 * missing key (the wire and client-node models carry both), Dates compare by time.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b || (a == null && b == null)) return true;
  if (a instanceof Date || b instanceof Date) return a instanceof Date && b instanceof Date && a.getTime() === b.getTime();
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((item, i) => sameJson(item, b[i]));
  }
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  for (const key of new Set([...Object.keys(x), ...Object.keys(y)])) if (!sameJson(x[key], y[key])) return false;
  return true;
}
