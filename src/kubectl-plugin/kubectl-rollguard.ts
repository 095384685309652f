#!/usr/bin/env node
// The executable kubectl finds on PATH: `kubectl rollguard <args>` runs `kubectl-rollguard <args>`.
import { runPlugin } from './command.js';

runPlugin(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(`kubectl rollguard: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exitCode = 1;
  },
);
