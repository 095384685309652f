import type { Timing } from '../restarter/timing.js';
import { formatDuration } from '../restarter/timing.js';
import { momentOf, type NextStep, type ReferenceExplanation } from './explanation.js';

/** Past its debounce and floor this long with no restart, a pending change is more than a wait for a turn. */
export const OVERDUE_AFTER_MS = 60_000;

export type PendingState = 'debouncing' | 'floored' | 'waiting';

export interface PendingRestart {
  state: PendingState;
  next: NextStep[];
}

/**
 * When the leader restarts a workload whose references changed, from the rules and times on the
 * objects alone: a change opens the workload's debounce window when it is seen (its write, to the
 * second), later changes fold into it; the restart floor counts from `last-restart-at`; then the
 * global pace hands out turns, which no object records (a write per waiting workload would be
 * the storm the pace prevents), so that part has no time. Undefined: nothing is pending.
 */
export function pendingRestart(input: {
  references: readonly ReferenceExplanation[];
  timing: Timing;
  lastRestartAt?: Date;
  /** The workload's own last write (not its status): an event of it opens the window too, and a change in it folds in. */
  workloadWrittenAt?: Date;
  now: Date;
  metadataOnlyUnrecorded: boolean;
}): PendingRestart | undefined {
  const { timing, now } = input;
  const pending = input.references.filter((r) => r.state === 'changed' || r.state === 'dropped');
  if (pending.length === 0) return undefined;
  const seen = pending.map((r) => (r.changedAt ? Date.parse(r.changedAt.at) : undefined)).filter((t): t is number => t !== undefined);
  const changedAt = seen.length > 0 ? Math.min(...seen) : undefined;
  const written = input.workloadWrittenAt?.getTime();
  // a window the workload's own write opened is still open at the change: the change is looked at when it closes
  const seenAt = changedAt !== undefined && written !== undefined && written <= changedAt && changedAt < written + timing.debounceMs ? written : changedAt;
  const debounceEnd = seenAt !== undefined ? seenAt + timing.debounceMs : undefined;
  const floorEnd = input.lastRestartAt && timing.minRestartIntervalMs > 0 ? input.lastRestartAt.getTime() + timing.minRestartIntervalMs : undefined;
  const what = pending.map((r) => `${r.kind} ${r.name}`).join(', ');
  const next: NextStep[] = [];
  const t = now.getTime();

  if (debounceEnd !== undefined && t < debounceEnd) {
    next.push({
      cause: 'debounce',
      at: momentOf(new Date(debounceEnd), now),
      text: `rollguard looks at the change of ${what} by then: the debounce (${formatDuration(timing.debounceMs)}) folds a burst of changes into one restart`,
    });
  }
  if (floorEnd !== undefined && t < floorEnd) {
    next.push({
      cause: 'restart-floor',
      at: momentOf(new Date(floorEnd), now),
      text: `rollguard restarts it then, with the newest versions: the restart floor allows one restart per ${formatDuration(timing.minRestartIntervalMs)} (the last was at ${input.lastRestartAt!.toISOString()})`,
    });
  }
  const doneWaiting = Math.max(debounceEnd ?? 0, floorEnd ?? 0);
  const overdue = t - doneWaiting > OVERDUE_AFTER_MS;
  const restartText = overdue
    ? `rollguard has not restarted it ${formatDuration(t - doneWaiting)} after its debounce and floor: ${
        input.metadataOnlyUnrecorded
          ? 'the data check may have found the data the pods read unchanged (a Deployment records that only with its next restart, to keep its generation), or '
          : ''
      }rollguard's leader is not running, or it waits far behind in the pace (check rollguard status)`
    : `rollguard restarts it when its turn comes: restarts are paced at ${timing.maxRestartsPerSecond}/s across all workloads, and one read of the changed data decides (unchanged data restarts nothing)`;
  next.push({ cause: 'pace', text: restartText });
  const state: PendingState = next[0]!.cause === 'debounce' ? 'debouncing' : next[0]!.cause === 'restart-floor' ? 'floored' : 'waiting';
  return { state, next };
}
