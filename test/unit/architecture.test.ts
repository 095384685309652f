import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import layering from '../../layers.json' with { type: 'json' };

const ROOT = new URL('../../', import.meta.url).pathname;
const SRC = path.join(ROOT, 'src');
const ARCHITECTURE = fs.readFileSync(path.join(ROOT, 'ARCHITECTURE.md'), 'utf8');

/** Every file under src/, as a path relative to it. */
function srcFiles(dir = SRC): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    return e.isDirectory() ? srcFiles(full) : [path.relative(SRC, full)];
  });
}

/** The `## ` or `### ` sections of a Markdown page: heading line → body. */
function sections(markdown: string, level: '##' | '###'): Map<string, string> {
  const out = new Map<string, string>();
  const parts = markdown.split(new RegExp(`^${level} `, 'm')).slice(1);
  for (const part of parts) {
    const newline = part.indexOf('\n');
    out.set(part.slice(0, newline).trim(), part.slice(newline + 1).split(/^#{1,2} /m)[0]!);
  }
  return out;
}

/** The tables of a section, each a list of rows of cells, without the header and separator rows. */
function tables(body: string): string[][][] {
  const found: string[][][] = [];
  let current: string[][] | undefined;
  for (const line of body.split('\n')) {
    if (!line.startsWith('|')) {
      current = undefined;
      continue;
    }
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    if (!current) found.push((current = []));
    current.push(cells);
  }
  return found.map((t) => t.slice(2));
}

/** The `code` spans of a cell, in order. */
const names = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

describe('ARCHITECTURE.md', () => {
  const codeMap = sections(ARCHITECTURE, '###');
  /** The code map's section of each folder of src/ ('src/' for the top-level files), by the first code span of its heading. */
  const sectionOf = new Map([...codeMap].map(([heading, body]) => [names(heading)[0] ?? heading, body]));

  it('names every folder and every file of src/ with its job, in the section of its folder', () => {
    const missing: string[] = [];
    for (const file of srcFiles()) {
      const [top, ...rest] = file.split(path.sep);
      const folder = rest.length === 0 ? 'src/' : `${top}/`;
      const section = sectionOf.get(folder);
      if (section === undefined) {
        missing.push(`${folder} (no code map section headed \`${folder}\`)`);
        continue;
      }
      const name = rest.length === 0 ? top! : rest.join('/');
      // a row of the folder's table: | `name` | its job |
      const row = section.split('\n').find((line) => line.startsWith(`| \`${name}\` |`));
      if (!row || row.split('|')[2]!.trim() === '') missing.push(`src/${file}`);
    }
    expect([...new Set(missing)]).toEqual([]);
  });

  it('has no code map section or row for what src/ does not hold', () => {
    const files = new Set(srcFiles());
    const stale: string[] = [];
    for (const [folder, body] of sectionOf) {
      if (folder !== 'src/' && !fs.existsSync(path.join(SRC, folder))) stale.push(folder);
      for (const row of tables(body).flat()) {
        const [name] = names(row[0] ?? '');
        if (name === undefined) continue;
        const file = folder === 'src/' ? name : path.join(folder, name);
        if (!files.has(file)) stale.push(`src/${file}`);
      }
    }
    expect([...new Set(stale)]).toEqual([]);
  });

  it('shows the layers of layers.json, in order, with their members', () => {
    const layersSection = sections(ARCHITECTURE, '##').get('Layers');
    expect(layersSection, 'a "## Layers" section').toBeDefined();
    const [layerTable, throughTable] = tables(layersSection!);
    expect(layerTable!.map(([name, members]) => ({ name, members: names(members!) }))).toEqual(layering.layers.map(({ name, members }) => ({ name, members })));
    expect(throughTable!.map(([from, to, files]) => ({ from: names(from!)[0], to: names(to!)[0], files: names(files!) }))).toEqual(layering.through);
  });
});

describe('layers.json', () => {
  it('places every folder and top-level file of src/ in exactly one layer, and names nothing else', () => {
    const entries = fs
      .readdirSync(SRC, { withFileTypes: true })
      .map((e) => (e.isDirectory() ? `${e.name}/` : e.name))
      .sort();
    const members = layering.layers.flatMap((l) => l.members);
    expect([...members].sort()).toEqual(entries);
  });

  it('lets a member meet only a sibling of its own closed layer through named files that exist', () => {
    const layerOf = new Map(layering.layers.flatMap((l, i) => l.members.map((m) => [m, { i, open: l.open === true }] as const)));
    for (const t of layering.through) {
      expect(layerOf.get(t.from)?.i, `${t.from} → ${t.to}: the same layer`).toBe(layerOf.get(t.to)?.i);
      expect(layerOf.get(t.from)?.open, `${t.from} → ${t.to}: an open layer needs no exception`).toBe(false);
      for (const file of t.files) expect(fs.existsSync(path.join(SRC, t.to, file)), `src/${t.to}${file}`).toBe(true);
    }
  });
});
