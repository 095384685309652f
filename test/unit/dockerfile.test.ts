import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

// The image cannot be built here (no Docker engine), so this checks what a build would
// trip over first: sources missing from the context, an entry point that the build
// does not produce, a runtime stage that needs a shell or runs as root.

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string): string => fs.readFileSync(path.join(ROOT, file), 'utf8');

interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

interface Stage {
  image: string;
  name?: string;
  instructions: Instruction[];
}

/** Instructions with continuation lines joined; comments and parser directives dropped. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let pending = '';
  let start = 0;
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (pending === '' && (line === '' || line.startsWith('#'))) return;
    if (pending === '') start = index + 1;
    if (line.startsWith('#')) return;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1).trim()} `;
      return;
    }
    const full = (pending + line).trim();
    pending = '';
    const match = /^(\S+)\s*(.*)$/.exec(full);
    if (match) out.push({ keyword: match[1]!.toUpperCase(), args: match[2]!, line: start });
  });
  return out;
}

function stages(instructions: Instruction[]): Stage[] {
  const result: Stage[] = [];
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') {
      const [image, as, name] = ins.args.split(/\s+/).filter((t) => !t.startsWith('--'));
      result.push({ image: image!, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] });
    } else {
      result.at(-1)?.instructions.push(ins);
    }
  }
  return result;
}

interface Copy {
  from?: string;
  sources: string[];
  dest: string;
  line: number;
}

function copies(stage: Stage): Copy[] {
  return stage.instructions
    .filter((i) => i.keyword === 'COPY')
    .map((i) => {
      const tokens = i.args.startsWith('[') ? (JSON.parse(i.args) as string[]) : i.args.split(/\s+/);
      const flags = tokens.filter((t) => t.startsWith('--'));
      const paths = tokens.filter((t) => !t.startsWith('--'));
      const from = flags.find((f) => f.startsWith('--from='))?.slice('--from='.length);
      return { from, sources: paths.slice(0, -1), dest: paths.at(-1)!, line: i.line };
    });
}

/** An exec-form (JSON array) ENTRYPOINT or CMD; undefined for the shell form. */
function execForm(stage: Stage, keyword: 'ENTRYPOINT' | 'CMD'): string[] | undefined {
  const ins = stage.instructions.filter((i) => i.keyword === keyword).at(-1);
  if (!ins) return undefined;
  try {
    const value: unknown = JSON.parse(ins.args);
    return Array.isArray(value) ? value.map(String) : undefined;
  } catch {
    return undefined;
  }
}

/** A .dockerignore pattern as a RegExp: "*" and "?" stay within a folder (and match dot files), "**" crosses folders. */
function ignorePattern(glob: string): RegExp {
  const body = glob
    .split(/(\*\*\/?|\*|\?)/)
    .map((part) => {
      if (part === '**/') return '(?:.*/)?';
      if (part === '**') return '.*';
      if (part === '*') return '[^/]*';
      if (part === '?') return '[^/]';
      return part.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    })
    .join('');
  return new RegExp(`^${body}$`);
}

/**
 * .dockerignore as the builder reads it: a pattern that matches a path or one of its
 * parent folders decides, the last one that matches wins, and "!" lets a path back in.
 */
function dockerIgnored(patterns: string[], file: string): boolean {
  let ignored = false;
  const parts = file.split('/');
  for (const raw of patterns) {
    const negated = raw.startsWith('!');
    const pattern = ignorePattern(path.posix.normalize((negated ? raw.slice(1) : raw).replace(/^\/+|\/+$/g, '')));
    for (let i = 1; i <= parts.length; i++) {
      if (pattern.test(parts.slice(0, i).join('/'))) {
        ignored = !negated;
        break;
      }
    }
  }
  return ignored;
}

function filesUnder(relative: string): string[] {
  const full = path.join(ROOT, relative);
  if (!fs.statSync(full).isDirectory()) return [relative];
  return fs
    .readdirSync(full, { recursive: true, encoding: 'utf8' })
    .map((entry) => path.posix.join(relative, entry.split(path.sep).join('/')))
    .filter((entry) => fs.statSync(path.join(ROOT, entry)).isFile());
}

/** `./src` and `src/` both mean src. */
const contextPath = (p: string): string => path.posix.normalize(p).replace(/^\.\/|\/$/g, '');

interface TsConfig {
  extends?: string;
  include?: string[];
  compilerOptions?: { outDir?: string; rootDir?: string };
}

/** compilerOptions merged along `extends`, the way tsc reads them. */
function tsconfig(file: string): TsConfig {
  const own = JSON.parse(read(file)) as TsConfig;
  const base = own.extends ? tsconfig(path.posix.join(path.posix.dirname(file), own.extends)) : {};
  return {
    include: own.include ?? base.include,
    compilerOptions: { ...base.compilerOptions, ...own.compilerOptions },
  };
}

describe('Dockerfile', () => {
  const all = stages(parseDockerfile(read('Dockerfile')));
  const runtime = all.at(-1)!;
  const build = all.find((s) => s.instructions.some((i) => i.keyword === 'RUN' && /\bnpm run build\b/.test(i.args)));
  const ignorePatterns = read('.dockerignore')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const fromContext = all.flatMap((stage) => copies(stage).filter((c) => c.from === undefined));
  const workdir = (stage: Stage): string => stage.instructions.filter((i) => i.keyword === 'WORKDIR').at(-1)?.args ?? '/';

  it('has a build stage and a separate runtime stage', () => {
    expect(all.length).toBeGreaterThanOrEqual(2);
    expect(build, 'no stage runs `npm run build`').toBeDefined();
    expect(build).not.toBe(runtime);
  });

  it('COPYs from the build context only paths that exist', () => {
    const sources = fromContext.flatMap((c) => c.sources.map((s) => ({ source: contextPath(s), line: c.line })));
    expect(sources.length).toBeGreaterThan(0);
    const missing = sources.filter(({ source }) => !fs.existsSync(path.join(ROOT, source)));
    expect(missing, 'COPY sources that are not in the repository').toEqual([]);
  });

  it('.dockerignore lets every COPYed file through, and keeps the local PKI and node_modules out', () => {
    const blocked = fromContext
      .flatMap((c) => c.sources.map(contextPath))
      .flatMap(filesUnder)
      .filter((file) => dockerIgnored(ignorePatterns, file));
    expect(blocked, 'files the Dockerfile copies but .dockerignore leaves out').toEqual([]);
    for (const kept of ['certs/dev/admin.kubeconfig', 'node_modules/fastify/package.json', 'dist/src/cli.js', '.git/config']) {
      expect(dockerIgnored(ignorePatterns, kept), `${kept} reaches the builder`).toBe(true);
    }
  });

  it('builds with Node 24 from package-lock.json, with everything tsconfig.build.json compiles', () => {
    expect(build!.image).toMatch(/^node:24[.-]/);
    const run = build!.instructions.filter((i) => i.keyword === 'RUN').map((i) => i.args);
    expect(run.some((r) => /\bnpm ci\b/.test(r) && !/--omit=dev/.test(r)), 'the build stage installs dev dependencies with npm ci').toBe(true);

    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    const project = /tsc -p (\S+)/.exec(pkg.scripts.build ?? '')?.[1];
    expect(project, `package.json's build script (${pkg.scripts.build}) runs tsc -p <project>`).toBeDefined();

    const copied = copies(build!)
      .filter((c) => c.from === undefined)
      .flatMap((c) => c.sources.map(contextPath));
    const covered = (p: string): boolean => copied.some((c) => p === c || p.startsWith(`${c}/`));
    const needed = [project!, ...(tsconfig(project!).include ?? [])];
    for (let file = project!; ; ) {
      const parent = (JSON.parse(read(file)) as TsConfig).extends;
      if (!parent) break;
      file = path.posix.join(path.posix.dirname(file), parent);
      needed.push(file);
    }
    expect(needed.filter((p) => !covered(p)), `not copied into the build stage (copied: ${copied.join(', ')})`).toEqual([]);
  });

  it("ENTRYPOINT runs the bundle of package.json's bin that the build stage writes", async () => {
    const entrypoint = execForm(runtime, 'ENTRYPOINT');
    expect(entrypoint, 'ENTRYPOINT in exec form').toBeDefined();
    const script = entrypoint!.find((arg) => arg.endsWith('.js'));
    expect(script, `a .js file in ENTRYPOINT ${JSON.stringify(entrypoint)}`).toBeDefined();
    const app = workdir(runtime);
    const inApp = path.posix.relative(app, path.posix.resolve(app, script!));

    // the bundle's input is what tsc makes of src/cli.ts, the file package.json's bin names
    const pkg = JSON.parse(read('package.json')) as { bin: Record<string, string>; scripts: Record<string, string> };
    const { outDir = '.', rootDir = '.' } = tsconfig('tsconfig.build.json').compilerOptions ?? {};
    const source = 'src/cli.ts';
    const compiled = path.posix.join(outDir, path.posix.relative(rootDir, source)).replace(/\.ts$/, '.js');
    expect(path.posix.normalize(pkg.bin.rollguard!)).toBe(compiled);
    expect(fs.existsSync(path.join(ROOT, source)), `${source}, the source of ${compiled}, exists`).toBe(true);
    const bundle = ((await import(pathToFileURL(path.join(ROOT, 'rolldown.config.mjs')).href)) as { default: { input: string; output: { dir: string } } }).default;
    expect(path.posix.normalize(bundle.input)).toBe(compiled);
    // the entry chunk keeps the input's name
    expect(inApp).toBe(path.posix.join(path.posix.normalize(bundle.output.dir), path.posix.basename(compiled)));

    // the build stage runs the script that compiles and bundles, with the config it needs
    expect(pkg.scripts['build:image']).toMatch(/\bnpm run (--silent )?build\b.*&& rolldown -c rolldown\.config\.mjs/);
    expect(build!.instructions.some((i) => i.keyword === 'RUN' && /\bnpm run build:image\b/.test(i.args))).toBe(true);
    expect(copies(build!).filter((c) => c.from === undefined).flatMap((c) => c.sources.map(contextPath))).toContain('rolldown.config.mjs');

    // ...and the bundle's folder is in the runtime stage: some COPY from the build stage brings it
    const fromBuild = copies(runtime).filter((c) => c.from === build!.name);
    const buildDir = workdir(build!);
    const brought = fromBuild.some((c) =>
      c.sources.some((s) => {
        const src = path.posix.relative(buildDir, path.posix.resolve(buildDir, s));
        const dest = path.posix.relative(app, path.posix.resolve(app, c.dest));
        return inApp === src || (inApp.startsWith(`${src}/`) && dest === src);
      }),
    );
    expect(brought, `a COPY --from=${build!.name} that brings ${inApp} to ${app}`).toBe(true);
  });

  it('runs on Node 24 as a non-root user, with no node_modules and no shell', () => {
    expect(runtime.image).toMatch(/^gcr\.io\/distroless\/nodejs24-|^node:24[.-]/);
    const user = runtime.instructions.filter((i) => i.keyword === 'USER').at(-1)?.args.split(':')[0];
    expect(user === 'nonroot' || (user !== undefined && /^\d+$/.test(user) && user !== '0'), `USER ${user}`).toBe(true);
    // distroless has neither a shell nor npm: nothing may run in this stage
    expect(runtime.instructions.filter((i) => i.keyword === 'RUN')).toEqual([]);
    expect(execForm(runtime, 'CMD')).toEqual(['serve']);

    const entrypoint = execForm(runtime, 'ENTRYPOINT')!;
    if (runtime.image.startsWith('gcr.io/distroless/')) {
      // distroless keeps node at /nodejs/bin/node, off PATH: a bare "node" would not start
      expect(entrypoint[0]).toBe('/nodejs/bin/node');
    } else {
      expect(entrypoint[0]).toMatch(/(^|\/)node$/);
    }

    // the bundle carries its dependencies: no node_modules, and from the context only package.json ("type": "module", the version)
    expect(all.flatMap(copies).filter((c) => c.sources.some((s) => /node_modules/.test(s)))).toEqual([]);
    expect(copies(runtime).filter((c) => c.from !== undefined && c.from !== build!.name)).toEqual([]);
    const fromContextHere = copies(runtime).filter((c) => c.from === undefined).flatMap((c) => c.sources.map(contextPath));
    expect(fromContextHere).toEqual(['package.json']);
  });
});
