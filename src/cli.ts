#!/usr/bin/env node
import { ConfigError, flagHelp, parseArgs } from './config.js';
import { VERSION } from './version.js';

const USAGE = `rollguard ${VERSION}: restarts opted-in StatefulSets when the ConfigMaps and Secrets they reference change, and only then.

Usage:
  rollguard serve [flags]    run the webhook and the reconcile loop (in-cluster config, or --kubeconfig)
  rollguard dev [flags]      start a local control plane, run rollguard against it with a demo (npm start)
  rollguard status [url]     print the /status of a running rollguard (default http://127.0.0.1:8080)
  rollguard handover <namespace>/<set> [--kubeconfig=<file>]
                             ask for a handover of the set's primary role (the leader performs it)
  rollguard release [flags]  before an uninstall: hand the partitions of health-gated sets back (--help)
  rollguard why <kind>/<name> [-n <namespace>] [-o json]
                             why a workload restarted or did not, and what rollguard does next and when
  rollguard list [-n <namespace> | -A] [-o json]
                             every workload rollguard manages, one line of state each
                             (both are also the kubectl plugin: kubectl rollguard why|list)
  rollguard <command> --help every flag of a command
  rollguard --version

Every flag can also be set by an environment variable: --webhook-port is ROLLGUARD_WEBHOOK_PORT.`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '--version') {
    console.log(VERSION);
    return 0;
  }
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    console.log(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === 'status') {
    const { printStatus } = await import('./status-command.js');
    return printStatus(rest[0] ?? 'http://127.0.0.1:8080');
  }
  if (command === 'handover') {
    const { requestHandover } = await import('./handover/command.js');
    return requestHandover(rest);
  }
  if (command === 'release') {
    const { release } = await import('./release/command.js');
    return release(rest);
  }
  if (command === 'why' || command === 'list') {
    const { runPlugin } = await import('./kubectl-plugin/command.js');
    return runPlugin(argv, 'rollguard');
  }
  if (command !== 'serve' && command !== 'dev') {
    console.error(`rollguard: unknown command "${command}"\n\n${USAGE}`);
    return 2;
  }
  let parsed;
  try {
    parsed = parseArgs(rest, process.env, command);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`rollguard ${command}: ${err.message}`);
      return 2;
    }
    throw err;
  }
  if (parsed.version) {
    console.log(VERSION);
    return 0;
  }
  if (parsed.help) {
    console.log(`Usage: rollguard ${command} [flags]\n\nFlags:\n${flagHelp(command)}`);
    return 0;
  }
  if (parsed.positional.length > 0) {
    console.error(`rollguard ${command}: unexpected argument "${parsed.positional[0]}"`);
    return 2;
  }
  if (command === 'serve') {
    const { serve } = await import('./main.js');
    return serve(parsed.config);
  }
  const { dev } = await import('./dev/command.js');
  return dev(parsed.config, parsed.given);
}

main(process.argv.slice(2)).then(
  (code) => {
    // every part has stopped by now; a keep-alive socket of a client library must not hold the exit
    process.exit(code);
  },
  (err: unknown) => {
    console.error(`rollguard: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exitCode = 1;
  },
);
