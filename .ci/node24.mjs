// `npm start` and `npm test` go through here: on a Node older than rollguard needs (a fresh
// machine's Node 20), it fetches Node 24 from the npm registry (.ci/install-node.sh) and runs the
// whole command under it; on a fresh clone it runs `npm ci` first. Plain JavaScript for old Nodes.
// Usage: node .ci/node24.mjs <command> [args...]
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const [major, minor] = process.versions.node.split('.').map(Number);
const oldNode = major < 22 || (major === 22 && minor < 19);
const env = { ...process.env };
if (oldNode) {
  // prints the folder of a Node 24 binary (installing it on first use), or nothing when `node` on PATH is new enough
  const binDir = execFileSync('bash', [path.join(root, '.ci', 'install-node.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  const node = binDir ? path.join(binDir, 'node') : 'node';
  const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  const what = process.env.npm_lifecycle_event ? `npm ${process.env.npm_lifecycle_event}` : process.argv.slice(2).join(' ');
  console.log(`[rollguard] this is Node ${process.version}; running \`${what}\` under Node ${version}${binDir ? ` from ${binDir}` : ''} (rollguard needs >= 22.19)`);
  if (binDir) env.PATH = `${binDir}${path.delimiter}${env.PATH ?? ''}`;
}
if (!fs.existsSync(path.join(root, 'node_modules', '.package-lock.json'))) {
  console.log('[rollguard] installing npm packages (npm ci) on first use');
  execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: root, stdio: 'inherit', env });
}

const [command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: 'inherit', env });
// Ctrl-C reaches the child through the terminal (passing it on too would make a second one, which
// `rollguard dev` takes as "stop now"): wait for the child to finish. Other signals are passed on.
process.on('SIGINT', () => undefined);
for (const signal of ['SIGTERM', 'SIGHUP']) process.on(signal, () => child.kill(signal));
child.on('error', (err) => {
  console.error(`[rollguard] could not run ${command}: ${err.message}`);
  process.exit(1);
});
child.on('exit', (code, signal) => process.exit(code ?? 128 + (os.constants.signals[signal] ?? 0)));
