// Runs before `npm start` and `npm test`: a fresh clone needs no separate `npm ci`.
import { execSync } from 'node:child_process';
import fs from 'node:fs';

const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
  console.error(`rollguard needs Node >= 22.19 (Node 24 LTS is the target); this is ${process.version}.`);
  console.error('Put Node 24 first on PATH with:  eval "$(bash .ci/install-node.sh --export)"');
  process.exit(1);
}
if (!fs.existsSync('node_modules/.package-lock.json')) {
  console.log('[rollguard] installing npm packages (npm ci) on first use');
  execSync('npm ci --no-audit --no-fund', { stdio: 'inherit' });
}
