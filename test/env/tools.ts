import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const run = promisify(execFile);

export type GoTool = 'helm' | 'promtool';

/**
 * The path of a Go tool the tests run, built by test/env/build-tools.sh on first use and cached
 * under ~/.cache/rollguard (helm: a minute or two cold; promtool: see docs/development.md).
 */
export async function goTool(name: GoTool): Promise<string> {
  const { stdout } = await run('bash', [path.join(ROOT, 'test/env/build-tools.sh'), name], { maxBuffer: 16 * 1024 * 1024 });
  const dir = stdout.trim().split('\n').pop() ?? '';
  const file = path.join(dir, name);
  if (!fs.existsSync(file)) throw new Error(`test/env/build-tools.sh ${name} printed "${dir}", which has no ${name}`);
  return file;
}

/** The folder of the Prometheus Operator's CRD manifests, from its Go module (test/env/build-tools.sh). */
export async function prometheusOperatorCrds(): Promise<string> {
  const { stdout } = await run('bash', [path.join(ROOT, 'test/env/build-tools.sh'), 'prometheus-operator-crds'], { maxBuffer: 16 * 1024 * 1024 });
  const dir = stdout.trim().split('\n').pop() ?? '';
  if (!fs.existsSync(dir)) throw new Error(`test/env/build-tools.sh prometheus-operator-crds printed "${dir}", which is no folder`);
  return dir;
}

/** Runs a tool from the repository's root; on failure the error carries its stderr and stdout. */
export async function toolOutput(command: string, args: string[]): Promise<string> {
  try {
    return (await run(command, args, { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 })).stdout;
  } catch (err) {
    const { stderr = '', stdout = '' } = err as { stderr?: string; stdout?: string };
    throw new Error(`${path.basename(command)} ${args.join(' ')} failed: ${(stderr + stdout).trim() || String(err)}`, { cause: err });
  }
}
