import { ABSENT, type AnnotationChange } from './annotations.js';

function parseValue(value: string): { uid: string; resourceVersion: string } | undefined {
  if (value === ABSENT) return undefined;
  const slash = value.indexOf('/');
  return slash < 0 ? { uid: '', resourceVersion: value } : { uid: value.slice(0, slash), resourceVersion: value.slice(slash + 1) };
}

/** One change in words: which object, of which kind, and both versions. */
export function describeChange(change: AnnotationChange): string {
  const object = change.kind && change.name ? `${change.kind} ${change.name}` : `the object of annotation ${change.key}`;
  if (change.to === undefined) return `no longer tracking ${object}`;
  const to = parseValue(change.to);
  if (change.from === undefined) return `tracking ${object} (resourceVersion ${to ? to.resourceVersion : ABSENT})`;
  const from = parseValue(change.from);
  if (!from && to) return `${object} appeared (resourceVersion ${ABSENT} → ${to.resourceVersion})`;
  if (from && !to) return `${object} was deleted (resourceVersion ${from.resourceVersion} → ${ABSENT})`;
  if (from && to && from.uid !== to.uid) {
    return `${object} was recreated (uid ${from.uid} → ${to.uid}, resourceVersion ${from.resourceVersion} → ${to.resourceVersion})`;
  }
  return `${object} changed (resourceVersion ${from?.resourceVersion ?? ABSENT} → ${to?.resourceVersion ?? ABSENT})`;
}
