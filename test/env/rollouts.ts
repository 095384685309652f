import type { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { expect } from 'vitest';
import { waitFor } from './wait.js';

/** What a user counts to see how often a StatefulSet rolled: template generations, ControllerRevisions, rollguard's Events. */
export interface RolloutCount {
  generation: number;
  /** ControllerRevisions the StatefulSet controller made for it: one per distinct template. */
  revisions: number;
  /** rollguard's Events about the set, as `reason: message`, repeats counted. */
  events: string[];
}

/**
 * The set's rollouts once the StatefulSet controller has caught up with its generation (so the
 * ControllerRevision of the newest template exists).
 */
export async function rolloutCount(apps: AppsV1Api, core: CoreV1Api, namespace: string, name: string): Promise<RolloutCount> {
  const set = await waitFor(`the StatefulSet controller to observe ${namespace}/${name}`, async () => {
    const s = await apps.readNamespacedStatefulSet({ name, namespace });
    if (s.status?.observedGeneration === s.metadata?.generation && s.status?.updateRevision) return s;
    throw new Error(`generation ${s.metadata?.generation}, status ${JSON.stringify(s.status)}`);
  }, { timeoutMs: 60_000 });
  const uid = set.metadata!.uid!;
  const revisions = (await apps.listNamespacedControllerRevision({ namespace })).items.filter((r) =>
    r.metadata?.ownerReferences?.some((o) => o.uid === uid),
  ).length;
  const events: string[] = [];
  for (const e of (await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name}` })).items) {
    if (e.source?.component !== 'rollguard' && e.reportingComponent !== 'rollguard') continue;
    for (let i = 0; i < (e.count ?? 1); i++) events.push(`${e.reason}: ${e.message}`);
  }
  return { generation: set.metadata!.generation!, revisions, events };
}

/** What happened between two counts of one set: rollouts by generation and by revision, and the Events added. */
export function rolloutsBetween(before: RolloutCount, after: RolloutCount): { generations: number; revisions: number; events: string[] } {
  const events = [...after.events];
  for (const e of before.events) {
    const i = events.indexOf(e);
    if (i >= 0) events.splice(i, 1);
  }
  return { generations: after.generation - before.generation, revisions: after.revisions - before.revisions, events };
}

/** One rollout per version in `changedTo` (generations, ControllerRevisions, one ConfigChanged Event naming it), nothing else. */
export function expectRollouts(set: string, before: RolloutCount, after: RolloutCount, changedTo: string[]): void {
  const between = rolloutsBetween(before, after);
  expect(between.generations, `template generations added to ${set}`).toBe(changedTo.length);
  expect(between.revisions, `ControllerRevisions added for ${set}`).toBe(changedTo.length);
  expect(between.events.length, `rollguard Events added for ${set}: ${JSON.stringify(between.events)}`).toBe(changedTo.length);
  for (const version of changedTo) {
    const resourceVersion = version.split('/')[1];
    const naming = between.events.filter((e) => e.startsWith('ConfigChanged: ') && e.includes(`→ ${resourceVersion})`));
    expect(naming.length, `ConfigChanged Events of ${set} naming ${version}: ${JSON.stringify(between.events)}`).toBe(1);
  }
}

export async function rolloutCounts(apps: AppsV1Api, core: CoreV1Api, namespace: string, sets: string[]): Promise<Record<string, RolloutCount>> {
  return Object.fromEntries(await Promise.all(sets.map(async (s) => [s, await rolloutCount(apps, core, namespace, s)] as const)));
}
