import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { zeroFigures, type Figures } from './invariants.js';
import { applicable, commandOf, initialModel, ModelViolation, opArbitraries, runOp, type Op, type Real, type RunStats } from './operations.js';
import type { World } from './world.js';

// One entry to the model checker for the integration test and the bench: generated runs
// (fast-check's model-based testing, shrinking included) or the replay of a trace file.

export interface ModelOptions {
  seed: number;
  numRuns: number;
  maxCommands: number;
  /** no new run starts after this long (fast-check's interruptAfterTimeLimit) */
  timeLimitMs: number;
  /** where a failing run's trace goes (the smallest failing trace found so far) */
  traceFile: string;
  /** false: stop at the first failure (the integration test); true: shrink it (the bench) */
  shrink: boolean;
  log?: (line: string) => void;
}

export interface ModelReport {
  runs: number;
  operations: number;
  /** how many of each op ran, over every run */
  byOp: Record<string, number>;
  faults: number;
  dataWrites: number;
  checks: number;
  figures: Figures;
  /** the failure, with its trace file, if a run failed */
  failure?: { message: string; traceFile: string };
}

export interface TraceFile {
  /** what the checker ran with: the run replays with the same windows */
  debounceMs: number;
  floorMs: number;
  seed?: number;
  ops: Op[];
  violations?: string;
}

function addFigures(a: Figures, b: Figures): Figures {
  return {
    loopRollouts: a.loopRollouts + b.loopRollouts,
    dataRollouts: a.dataRollouts + b.dataRollouts,
    annotations: a.annotations + b.annotations,
    repairs: a.repairs + b.repairs,
    userTemplateWrites: a.userTemplateWrites + b.userTemplateWrites,
  };
}

const freshStats = (): RunStats => ({ operations: 0, byOp: {}, faults: 0, dataWrites: 0, checks: 0, figures: zeroFigures() });

/** Each workload's first state of the run that starts now. */
function marks(world: World): Map<string, number> {
  return new Map([...world.recorder.workloads.values()].map((h) => [h.uid, h.states.length]));
}

async function freshReal(world: World): Promise<Real> {
  if (!world.rollguard) await world.startRollguard();
  if (!world.webhookUp) await world.setWebhook(true);
  await world.reset();
  return { world, stats: freshStats(), since: marks(world), trace: [] };
}

function writeTrace(file: string, world: World, trace: Op[], err: unknown, seed?: number): void {
  const body: TraceFile = { debounceMs: world.debounceMs, floorMs: world.floorMs, seed, ops: trace, violations: err instanceof Error ? err.message : String(err) };
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify(body, null, 1)}\n`);
}

/** The ops in order, then a last quiet check; throws ModelViolation with what failed. */
async function runOps(real: Real, ops: Iterable<fc.AsyncCommand<ReturnType<typeof initialModel>, Real>>, direct?: Op[]): Promise<void> {
  const model = initialModel();
  if (direct) {
    for (const op of direct) if (applicable(op, model, real.world.canRestartApiServer)) await runOp(op, model, real);
  } else await fc.asyncModelRun(() => ({ model, real }), ops);
  await runOp({ op: 'settle' }, model, real);
}

export async function runModel(world: World, opts: ModelOptions): Promise<ModelReport> {
  const report: ModelReport = { runs: 0, operations: 0, byOp: {}, faults: 0, dataWrites: 0, checks: 0, figures: zeroFigures() };
  const commands = opArbitraries({ apiServerRestart: world.canRestartApiServer }).map((a) => a.map((op) => commandOf(op, world.canRestartApiServer)));
  let failures = 0;
  const property = fc.asyncProperty(fc.commands(commands, { maxCommands: opts.maxCommands, size: 'max' }), async (cmds) => {
    const real = await freshReal(world);
    report.runs++;
    try {
      await runOps(real, cmds);
    } catch (err) {
      failures++;
      // every failure while shrinking is smaller than the one before: the file holds the smallest yet
      writeTrace(opts.traceFile, world, real.trace, err, opts.seed);
      opts.log?.(`run ${report.runs} failed after ${real.trace.length} ops (failure ${failures}); trace in ${opts.traceFile}`);
      throw err;
    } finally {
      report.operations += real.stats.operations;
      for (const [op, n] of Object.entries(real.stats.byOp)) report.byOp[op] = (report.byOp[op] ?? 0) + n;
      report.faults += real.stats.faults;
      report.dataWrites += real.stats.dataWrites;
      report.checks += real.stats.checks;
      report.figures = addFigures(report.figures, real.stats.figures);
      opts.log?.(`run ${report.runs}: ${real.stats.operations} ops, ${real.stats.faults} faults, ${real.stats.figures.loopRollouts} rollouts by rollguard`);
    }
  });
  const result = await fc.check(property, {
    seed: opts.seed,
    numRuns: opts.numRuns,
    endOnFailure: !opts.shrink,
    interruptAfterTimeLimit: opts.timeLimitMs,
  });
  if (result.failed) {
    const message = result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance);
    report.failure = { message: `${message}\n(seed ${opts.seed}, counterexample path ${result.counterexamplePath})`, traceFile: opts.traceFile };
  }
  return report;
}

/** Runs a trace file's ops again, in order, then the last quiet check. */
export async function replayTrace(world: World, file: string, log?: (line: string) => void): Promise<ModelReport> {
  const trace = JSON.parse(fs.readFileSync(file, 'utf8')) as TraceFile;
  if (trace.debounceMs !== world.debounceMs || trace.floorMs !== world.floorMs) {
    log?.(`note: the trace ran with debounce ${trace.debounceMs} ms, floor ${trace.floorMs} ms; this world has ${world.debounceMs}, ${world.floorMs}`);
  }
  const real = await freshReal(world);
  const report: ModelReport = { runs: 1, operations: 0, byOp: {}, faults: 0, dataWrites: 0, checks: 0, figures: zeroFigures() };
  try {
    await runOps(real, [], trace.ops);
  } catch (err) {
    if (!(err instanceof ModelViolation)) throw err;
    report.failure = { message: err.message, traceFile: file };
  }
  Object.assign(report, { operations: real.stats.operations, byOp: real.stats.byOp, faults: real.stats.faults, dataWrites: real.stats.dataWrites, checks: real.stats.checks, figures: real.stats.figures });
  return report;
}

export function summary(r: ModelReport): string {
  const f = r.figures;
  return (
    `${r.runs} runs, ${r.operations} operations (${r.faults} faults), ${r.dataWrites} data writes, ${r.checks} quiet checks; ` +
    `rollguard's rollouts ${f.loopRollouts} (data changes ${f.dataRollouts}, annotations the webhook missed ${f.annotations}, copied values repaired ${f.repairs}); ` +
    `template writes by the checker ${f.userTemplateWrites}; violations ${r.failure ? 'yes' : 0}\n` +
    `operations by kind: ${Object.entries(r.byOp)
      .sort((a, b) => b[1] - a[1])
      .map(([op, n]) => `${op} ${n}`)
      .join(', ')}`
  );
}
