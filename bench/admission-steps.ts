import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { envelopeIssues, parseAdmissionReview } from '../src/admission/review.js';
import { createMetrics } from '../src/metrics.js';
import { createAdmissionHandler } from '../src/restarter/admission-handler.js';
import { referencedObjects } from '../src/restarter/references.js';
import { review } from './side-by-side/review.js';
import { BENCH_VERSIONS, staticLookup, writeVersionsFile } from './side-by-side/static-versions.js';

// The CPU cost of each step of rollguard's /mutate beside JSON.parse of the same review, in one
// process with no server: what the end-to-end `admission` benchmark cannot show on a shared
// machine, whose noise moves a server's throughput by a fifth from one round to the next. Every
// webhook pays the parse, the bare Fastify route too; what rollguard adds on top is the rest.
// Each figure is the best of ROUNDS batches (the least disturbed), in µs per review.
//   npm run bench -- admission-steps [reviews per batch]
// Prints figures and ratios to the parse; asserts nothing.

const BATCH = Number(process.argv[2] ?? 20_000);
const ROUNDS = 7;
const WARM_UP = 5_000;
/** distinct parsed bodies the handler cycles through, so that it is not timed on one object the CPU has cached */
const BODIES = 64;

function bestMicrosPerCall(step: (i: number) => unknown): number {
  for (let i = 0; i < WARM_UP; i++) step(i);
  let best = Infinity;
  for (let round = 0; round < ROUNDS; round++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < BATCH; i++) step(i);
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1000 / BATCH);
  }
  return best;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-admission-steps-'));
try {
  const handler = createAdmissionHandler({ cachesSynced: () => true, lookup: staticLookup(writeVersionsFile(dir, BENCH_VERSIONS)), metrics: createMetrics() });
  const bodies = Array.from({ length: BODIES }, (_, i) => review(`3f1c2a40-0000-4000-8000-${String(i).padStart(12, '0')}`));
  const parsed = bodies.map((b) => JSON.parse(b) as unknown);
  const answers = parsed.map((p) => handler.handle(p));
  if (answers.some((a) => a instanceof Promise || a.status !== 200)) throw new Error('admission-steps: the handler did not answer every review at once with 200');
  const answer = (i: number) => (answers[i % BODIES] as { body: unknown }).body;
  const templates = parsed.map((p) => (p as { request: { object: { spec: { template: unknown } } } }).request.object.spec.template);

  const steps = {
    parse: ['JSON.parse of the review (the reference)', (i) => JSON.parse(bodies[i % BODIES]!)],
    envelope: ['envelope check (the route schema)', (i) => envelopeIssues(parsed[i % BODIES])],
    review: ['parseAdmissionReview (with the depth walk)', (i) => parseAdmissionReview(parsed[i % BODIES])],
    references: ['reference walk (referencedObjects; within the handler)', (i) => referencedObjects(templates[i % BODIES])],
    handler: ['whole handler (parse check, references, patch, metrics)', (i) => handler.handle(parsed[i % BODIES])],
    answer: ['JSON.stringify of the answer', (i) => JSON.stringify(answer(i))],
  } satisfies Record<string, [string, (i: number) => unknown]>;
  const micros = {} as Record<keyof typeof steps, number>;
  for (const [id, [, step]] of Object.entries(steps)) micros[id as keyof typeof steps] = bestMicrosPerCall(step);
  console.log(`review body: ${(Buffer.byteLength(bodies[0]!) / 1024).toFixed(1)} KB; answer ${(Buffer.byteLength(JSON.stringify(answer(0))) / 1024).toFixed(1)} KB; best of ${ROUNDS} batches of ${BATCH}`);
  console.log(`${'step'.padEnd(58)}${'µs/review'.padStart(10)}${'/ parse'.padStart(9)}`);
  for (const [id, [name]] of Object.entries(steps)) {
    const figure = micros[id as keyof typeof steps];
    console.log(`${name.padEnd(58)}${figure.toFixed(2).padStart(10)}${(figure / micros.parse).toFixed(2).padStart(9)}`);
  }
  const added = micros.envelope + micros.handler + micros.answer;
  console.log(`rollguard's own work per review (envelope + handler + answer): ${added.toFixed(1)} µs, ${(added / micros.parse).toFixed(2)} × the parse`);
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
