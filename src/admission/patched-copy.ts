import jsonpatch, { type Operation } from 'fast-json-patch';

/**
 * `doc` with `ops` applied, leaving `doc` as it was: only the objects and arrays on the way to
 * each operation's target are copied (shallow), so a patch of a few annotations costs a few
 * small copies, not a clone of the whole object (structuredClone of an 11 KB review took about
 * a millisecond). Throws as fast-json-patch does when an operation does not apply.
 */
export function patchedCopy(doc: Record<string, unknown>, ops: readonly Operation[]): Record<string, unknown> {
  const fresh = new WeakSet<object>();
  const root = shallowCopy(doc, fresh);
  for (const op of ops) {
    copyOnTheWay(root, op.path, fresh);
    if (op.op === 'move') copyOnTheWay(root, op.from, fresh);
    jsonpatch.applyOperation(root, op, false, true, true);
  }
  return root;
}

type Container = Record<string, unknown> | unknown[];

function shallowCopy<T extends Container>(value: T, fresh: WeakSet<object>): T {
  const copy = (Array.isArray(value) ? [...value] : { ...value }) as T;
  fresh.add(copy);
  return copy;
}

/** Replaces every container from the root down to the parent of `pointer`'s target by a copy of its own. */
function copyOnTheWay(root: Container, pointer: string, fresh: WeakSet<object>): void {
  const tokens = pointer.split('/').slice(1).map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
  let parent: Container = root;
  for (const token of tokens.slice(0, -1)) {
    const holder = parent as Record<string, unknown>;
    if (!Object.prototype.hasOwnProperty.call(holder, token)) return;
    const child = holder[token];
    if (child === null || typeof child !== 'object') return;
    const own = fresh.has(child) ? (child as Container) : shallowCopy(child as Container, fresh);
    holder[token] = own;
    parent = own;
  }
}
