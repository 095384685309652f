import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { PROPERTY_SEED } from '../env/property-runs.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { replayTrace, runModel, summary } from '../model/run.js';
import { World } from '../model/world.js';

// The model checker (test/model/) on fixed seeds: random user operations on opted-in sets and
// their ConfigMaps and Secrets, interleaved with rollguard's SIGKILL and restart and its webhook
// unreachable, each quiet period checked against the restart promise. The API server is shared
// with the other files here, so it is not restarted (the bench restarts its own).
// A failing run writes its trace; ROLLGUARD_MODEL_REPLAY=<trace file> runs that trace instead.

const { kc, kubeconfigPath } = testCluster();
let world: World | undefined;

beforeAll(async () => {
  world = await World.create({ kc, kubeconfigPath, debounceMs: 500, floorMs: 2_000 });
});
afterAll(async () => world?.teardown());
beforeEach(() => {
  printControlPlaneLogsOnFailure();
  printProcessLogsOnFailure(world?.processes ?? []);
});

it('random operations and faults keep the restart promise (fixed seed)', async () => {
  const replay = process.env.ROLLGUARD_MODEL_REPLAY;
  const traceFile = path.join(os.tmpdir(), `rollguard-model-trace-${PROPERTY_SEED}-${Date.now()}.json`);
  const report = replay
    ? await replayTrace(world!, replay, console.log)
    : await runModel(world!, { seed: PROPERTY_SEED, numRuns: 4, maxCommands: 24, timeLimitMs: 50_000, traceFile, shrink: false, log: console.log });
  console.log(summary(report));
  if (report.failure) console.error(`replay: ROLLGUARD_MODEL_REPLAY=${report.failure.traceFile} npx vitest run test/integration/model-checker.test.ts`);
  expect(report.failure?.message).toBeUndefined();
  expect(report.checks).toBeGreaterThan(0);
}, 150_000);
