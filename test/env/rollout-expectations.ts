import type { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { expect } from 'vitest';
import { eventsAdded, rollguardEvents, rolloutCounts, type RolloutCount, type RolloutEvent } from './rollouts.js';
import { endsWithVersion } from './event-text.js';

/** The rollouts of the named sets and rollguard's Events in a namespace, at one moment. */
export interface RolloutSnapshot {
  counts: Map<string, RolloutCount>;
  events: RolloutEvent[];
}

export async function rolloutSnapshot(apps: AppsV1Api, core: CoreV1Api, namespace: string, sets: readonly string[]): Promise<RolloutSnapshot> {
  const counts = await rolloutCounts(apps, namespace, sets);
  return { counts, events: await rollguardEvents(core, namespace) };
}

/** Between two snapshots, one rollout of `set` per version in `changedTo` (generations, ControllerRevisions, one ConfigChanged Event naming it), nothing else. */
export function expectRollouts(set: string, before: RolloutSnapshot, after: RolloutSnapshot, changedTo: string[]): void {
  const was = before.counts.get(set)!;
  const now = after.counts.get(set)!;
  expect(now.generation - was.generation, `template generations added to ${set}`).toBe(changedTo.length);
  expect(now.revisions - was.revisions, `ControllerRevisions added for ${set}`).toBe(changedTo.length);
  const added = eventsAdded(before.events, after.events).filter((e) => e.set === set);
  const text = JSON.stringify(added.map((e) => `${e.reason}: ${e.message} ×${e.count}`));
  expect(added.reduce((n, e) => n + e.count, 0), `rollguard Events added for ${set}: ${text}`).toBe(changedTo.length);
  for (const version of changedTo) {
    const resourceVersion = version.slice(version.indexOf('/') + 1);
    const naming = added.filter((e) => e.reason === 'ConfigChanged' && endsWithVersion(e.message, resourceVersion)).reduce((n, e) => n + e.count, 0);
    expect(naming, `ConfigChanged Events of ${set} naming ${version}: ${text}`).toBe(1);
  }
}
