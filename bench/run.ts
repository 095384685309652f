// `npm run bench -- <name> [args]` builds the benchmarks and runs this: dist/bench/<name>.js with
// the args that follow, under the same Node (Node 24, which .ci/node24.mjs found or fetched).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const self = path.basename(fileURLToPath(import.meta.url));
const benchmarks = fs
  .readdirSync(here)
  .filter((f) => f.endsWith('.js') && f !== self)
  .map((f) => f.slice(0, -'.js'.length))
  .sort();

const [name, ...args] = process.argv.slice(2);
const benchmark = name?.replace(/\.(js|ts)$/, '');
if (!benchmark || !benchmarks.includes(benchmark)) {
  console.error(`usage: npm run bench -- <name> [args]; <name> is one of ${benchmarks.join(', ')}${name ? ` (not ${name})` : ''}`);
  process.exit(2);
}
const child = spawn(process.execPath, [path.join(here, `${benchmark}.js`), ...args], { stdio: 'inherit' });
// Ctrl-C reaches the benchmark through the terminal; wait for it to finish. Other signals are passed on.
process.on('SIGINT', () => undefined);
for (const signal of ['SIGTERM', 'SIGHUP'] as const) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? 128 + (signal ? os.constants.signals[signal] : 0)));
