import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { differingPaths, restartHistory } from '../../src/explain/history.js';
import type { EventFact, RevisionFact } from '../../src/explain/facts.js';
import { ROLLGUARD_DIALECT } from '../../src/restarter/annotations.js';

const NOW = new Date('2026-06-01T12:00:00Z');
const at = (s: number): Date => new Date(NOW.getTime() + s * 1000);

function revision(n: number, annotations: Record<string, string>, createdAgo: number, image = 'app:1'): RevisionFact {
  return { name: `web-${n}`, revision: n, createdAt: at(-createdAgo), podLabel: `web-${n}`, template: { metadata: { labels: { app: 'web' }, annotations }, spec: { containers: [{ name: 'app', image }] } } };
}
const pod = (name: string, rev: string, createdAgo: number): V1Pod => ({ metadata: { name, labels: { 'controller-revision-hash': rev }, creationTimestamp: at(-createdAgo) } });
const rollguardEvent = (message: string, ago: number): EventFact => ({ type: 'Normal', reason: 'ConfigChanged', message, count: 1, firstAt: at(-ago), lastAt: at(-ago), component: 'rollguard' });
const A = 'configmap.rollguard.io/app';

function history(revisions: RevisionFact[], events: EventFact[] = [], pods: V1Pod[] = []) {
  return restartHistory({ kind: 'StatefulSet', dialect: ROLLGUARD_DIALECT, revisions, events, pods, now: NOW });
}

describe('restartHistory: each revision against the one before it, newest first', () => {
  it("rollguard's restart, told with its Event (the data keys), and the pods made since", () => {
    const records = history(
      [revision(2, { [A]: 'u/180' }, 60), revision(1, { [A]: 'u/100' }, 3600)],
      [rollguardEvent('ConfigMap app: data changed (key app.properties), resourceVersion 100 → 180', 59)],
      [pod('web-1', 'web-2', 58), pod('web-0', 'web-2', 40)],
    );
    expect(records).toEqual([
      {
        revision: 'web-2',
        at: { at: at(-60).toISOString(), inSeconds: -60 },
        cause: 'rollguard',
        reason: 'ConfigMap app: data changed (key app.properties), resourceVersion 100 → 180',
        podsReplaced: [
          { name: 'web-1', at: { at: at(-58).toISOString(), inSeconds: -58 } },
          { name: 'web-0', at: { at: at(-40).toISOString(), inSeconds: -40 } },
        ],
      },
      { revision: 'web-1', at: { at: at(-3600).toISOString(), inSeconds: -3600 }, cause: 'created', reason: 'the first revision of the template', podsReplaced: [] },
    ]);
  });

  it('without the Event (expired after an hour), from the annotations of the two revisions', () => {
    const [latest] = history([revision(1, { [A]: 'u/100' }, 9000), revision(2, { [A]: 'u/180' }, 8000)]);
    expect(latest).toMatchObject({ cause: 'rollguard', reason: 'ConfigMap app changed (resourceVersion 100 → 180)' });
  });

  it("an Event of another object or another time is not this revision's", () => {
    const [latest] = history([revision(1, { [A]: 'u/100' }, 9000), revision(2, { [A]: 'u/180' }, 8000)], [rollguardEvent('Secret other changed (resourceVersion 1 → 2)', 8000), rollguardEvent('ConfigMap app changed (resourceVersion 100 → 180)', 100)]);
    expect(latest!.reason).toBe('ConfigMap app changed (resourceVersion 100 → 180)');
  });

  it("the owner's change: not rollguard's doing, with the fields that changed", () => {
    const [latest] = history([revision(1, { [A]: 'u/100' }, 900), revision(2, { [A]: 'u/100' }, 60, 'app:2')]);
    expect(latest).toMatchObject({ cause: 'owner', ownerChanges: ['spec.containers[0].image'] });
    expect(latest!.reason).toContain("not rollguard's doing");
  });

  it('kubectl rollout restart', () => {
    const [latest] = history([revision(1, { [A]: 'u/100' }, 900), revision(2, { [A]: 'u/100', 'kubectl.kubernetes.io/restartedAt': '2026-06-01T11:59:00Z' }, 60)]);
    expect(latest).toMatchObject({ cause: 'rollout-restart', reason: 'kubectl rollout restart (at 2026-06-01T11:59:00Z)' });
  });

  it("the owner's template change with rollguard's bump folded into it: one rollout, both told", () => {
    const [latest] = history([revision(1, { [A]: 'u/100' }, 900), revision(2, { [A]: 'u/180' }, 60, 'app:2')]);
    expect(latest!.cause).toBe('owner-and-rollguard');
    expect(latest!.reason).toBe("the owner's template change, with rollguard's bump in the same write (one rollout): ConfigMap app changed (resourceVersion 100 → 180)");
  });
});

describe('differingPaths', () => {
  it.each([
    [{ a: 1 }, { a: 1 }, []],
    [{ a: 1, b: { c: [1, 2] } }, { a: 1, b: { c: [1, 3] } }, ['b.c[1]']],
    [{ a: [1] }, { a: [1, 2] }, ['a']],
    [{ a: 1 }, { b: 1 }, ['a', 'b']],
    [1, 2, ['(the whole template)']],
  ])('%j vs %j', (a, b, want) => {
    expect(differingPaths(a, b)).toEqual(want);
  });
});
