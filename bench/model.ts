import os from 'node:os';
import path from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { startControlPlane } from '../src/dev/control-plane.js';
import { replayTrace, runModel, summary } from '../test/model/run.js';
import { World } from '../test/model/world.js';

// The model checker for as long as asked, on a control plane of its own (so its faults include
// restarts of the API server): random user operations and faults, each quiet period checked
// against the restart promise. Prints operations, faults, rollouts/changes and violations; a
// failing run is shrunk by fast-check and its smallest trace written to a file.
// Run: npm run bench -- model [--minutes N] [--seed S] [--debounce-ms D] [--floor-ms F]
//      npm run bench -- model --replay FILE

function flag(name: string): string | undefined {
  const args = process.argv.slice(2);
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

async function main(): Promise<void> {
  const minutes = Number(flag('minutes') ?? 5);
  const seed = Number(flag('seed') ?? Date.now() % 2 ** 31);
  const replay = flag('replay');
  const debounceMs = Number(flag('debounce-ms') ?? 500);
  const floorMs = Number(flag('floor-ms') ?? 2_000);
  const started = Date.now();
  const cp = await startControlPlane();
  let world: World | undefined;
  // Ctrl-C or a SIGTERM stops every process the bench started (the control plane, rollguard) before it exits
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.log(`${signal}: stopping`);
      void (async () => {
        await world?.teardown().catch(() => undefined);
        await cp.stop();
        process.exit(130);
      })();
    });
  }
  try {
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfigPath);
    world = await World.create({ kc, kubeconfigPath: cp.kubeconfigPath, debounceMs, floorMs, apiServer: { stop: () => cp.stopApiServer(), start: () => cp.startApiServer() } });
    const log = (line: string): void => console.log(`[${((Date.now() - started) / 1000).toFixed(0)} s] ${line}`);
    const traceFile = path.join(os.tmpdir(), `rollguard-model-trace-${seed}.json`);
    console.log(replay ? `replaying ${replay}` : `model checker: seed ${seed}, ${minutes} min, debounce ${debounceMs} ms, restart floor ${floorMs} ms`);
    const report = replay
      ? await replayTrace(world, replay, log)
      : await runModel(world, { seed, numRuns: 1_000_000, maxCommands: 30, timeLimitMs: minutes * 60_000, traceFile, shrink: true, log });
    console.log(summary(report));
    console.log(`wall clock: ${((Date.now() - started) / 60_000).toFixed(1)} min`);
    if (report.failure) {
      console.log(`violations:\n${report.failure.message}`);
      console.log(`replay: npm run bench -- model --replay ${report.failure.traceFile}`);
      process.exitCode = 1;
    }
  } finally {
    await world?.teardown().catch(() => undefined);
    await cp.stop();
  }
}

await main();
