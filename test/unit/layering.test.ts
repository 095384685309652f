import path from 'node:path';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const RULE = 'import-x/no-restricted-paths';

/** The rule's complaints about one import, written as if `file` (under src/, need not exist) held it. */
async function complaints(eslint: ESLint, file: string, specifier: string): Promise<string[]> {
  const code = `import * as imported from '${specifier}';\nexport const probe = imported;\n`;
  const [result] = await eslint.lintText(code, { filePath: path.join(ROOT, file) });
  const messages = result?.messages ?? [];
  // an import that does not resolve passes the zones unchecked: no case may rest on one
  expect(messages.filter((m) => m.ruleId === 'import-x/no-unresolved'), `${specifier} from ${file} does not resolve`).toEqual([]);
  return messages.filter((m) => m.ruleId === RULE).map((m) => m.message);
}

// ESLint loads its plugins, and no-cycle reads the import graph behind the first file, once: seconds on a busy machine
const LINT_TIMEOUT_MS = 120_000;

describe('the layering rule of npm run lint (eslint.config.js, layers.json)', { timeout: LINT_TIMEOUT_MS }, () => {
  let eslint: ESLint;
  beforeAll(async () => {
    eslint = new ESLint({ cwd: ROOT });
    await eslint.lintFiles(['src/main.ts']);
  }, LINT_TIMEOUT_MS);

  it.each([
    { file: 'src/kube/probe.ts', imports: '../main.js', why: 'kube/ imports nothing above it' },
    { file: 'src/kube/probe.ts', imports: '../restarter/controller.js', why: 'kube/ knows no feature' },
    { file: 'src/kube/probe.ts', imports: '../metrics.js', why: 'metrics.ts sits above kube/' },
    { file: 'src/admission/probe.ts', imports: '../restarter/admit.js', why: "admission/ holds the features' interfaces, below them" },
    { file: 'src/server/probe.ts', imports: '../restarter/admission-handler.js', why: 'the server never names what a route does' },
    { file: 'src/restarter/probe.ts', imports: '../rollout/decision.js', why: 'the restarter is the lowest feature' },
    { file: 'src/restarter/probe.ts', imports: '../compat/stackable.js', why: 'the dialects are handed in' },
    { file: 'src/rollout/probe.ts', imports: '../handover/runner.js', why: 'the rollout asks its gate, which handover implements' },
    { file: 'src/rollout/probe.ts', imports: '../restarter/controller.js', why: 'the rollout meets the restarter only through its interfaces' },
    { file: 'src/handover/probe.ts', imports: '../rollout/reconciler.js', why: 'handover meets the rollout only through its interfaces' },
    { file: 'src/tls/probe.ts', imports: '../server/webhook-server.js', why: 'tls/ sits below the server' },
    { file: 'src/compat/probe.ts', imports: '../../test/env/wait.js', why: 'product code never imports the tests' },
  ])('refuses $imports from $file: $why', async ({ file, imports }) => {
    const found = await complaints(eslint, file, imports);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatch(/ARCHITECTURE\.md|never imports/);
  });

  it.each([
    { file: 'src/metrics.ts', imports: './kube/workloads.js' },
    { file: 'src/rollout/probe.ts', imports: '../restarter/annotations.js' },
    { file: 'src/handover/probe.ts', imports: '../rollout/disruption-gate.js' },
    { file: 'src/handover/probe.ts', imports: '../rollout/scale-down-hold.js' },
    { file: 'src/compat/probe.ts', imports: '../restarter/annotations.js' },
    { file: 'src/server/probe.ts', imports: '../admission/review.js' },
    { file: 'src/restarter/probe.ts', imports: '../admission/mutators.js' },
    { file: 'src/dev/probe.ts', imports: '../main.js' },
  ])('lets $file import $imports', async ({ file, imports }) => {
    expect(await complaints(eslint, file, imports)).toEqual([]);
  });

  it('passes the tree as it is: main.ts, which wires every layer, and the lowest and highest feature', async () => {
    const results = await eslint.lintFiles(['src/main.ts', 'src/kube/controller.ts', 'src/handover/gate.ts', 'src/restarter/reconciler.ts']);
    expect(results.flatMap((r) => r.messages.map((m) => `${path.relative(ROOT, r.filePath)}: ${m.ruleId}: ${m.message}`))).toEqual([]);
  });
});
