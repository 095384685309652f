import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { FLAGS, envName, flagMarkdownTable } from '../../src/config.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const read = (file: string): string => fs.readFileSync(path.join(ROOT, file), 'utf8');
const README = read('README.md');
const CONFIGURATION = read('docs/configuration.md');
const DOC_PAGES = fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md'));
/** The most lines a newcomer's page may have; the rest belongs in docs/. */
const README_MAX_LINES = 300;

/** GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

function anchorsOf(markdown: string): Set<string> {
  const headings = markdown.split('\n').filter((l) => /^#{1,6} /.test(l));
  return new Set(headings.map((h) => anchorOf(h.replace(/^#+ /, ''))));
}

/** Relative links of a Markdown file: [text](target), outside code blocks. */
function relativeLinks(markdown: string): string[] {
  const prose = markdown.replace(/```[\s\S]*?```/g, '');
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((t) => !/^[a-z]+:/.test(t));
}

describe('README and docs/', () => {
  it('carry the flag table generated from src/config.ts (regenerate: npm run readme:flags)', () => {
    const between = CONFIGURATION.split('<!-- flags:start -->')[1]?.split('<!-- flags:end -->')[0]?.trim();
    expect(between).toBe(flagMarkdownTable());
  });

  it('name every flag and its environment variable', () => {
    for (const f of FLAGS) {
      expect(CONFIGURATION).toContain(`\`--${f.name}\``);
      expect(CONFIGURATION).toContain(envName(f.name));
    }
  });

  it('give the two commands a newcomer needs', () => {
    expect(README).toContain('npm start');
    expect(README).toContain('npm test');
  });

  it(`keep README to one page of at most ${README_MAX_LINES} lines`, () => {
    expect(README.split('\n').length).toBeLessThanOrEqual(README_MAX_LINES);
  });

  it('link every page of docs/ from README', () => {
    const linked = new Set(relativeLinks(README).map((l) => l.split('#')[0]));
    const unlinked = DOC_PAGES.filter((page) => !linked.has(`docs/${page}`));
    expect(unlinked).toEqual([]);
  });

  it('have no relative link to a file or heading that does not exist', () => {
    const broken: string[] = [];
    for (const file of ['README.md', 'ARCHITECTURE.md', ...DOC_PAGES.map((p) => `docs/${p}`)]) {
      for (const link of relativeLinks(read(file))) {
        const [target, anchor] = link.split('#') as [string, string | undefined];
        const resolved = target === '' ? file : path.normalize(path.join(path.dirname(file), target));
        if (!fs.existsSync(path.join(ROOT, resolved))) {
          broken.push(`${file}: ${link} (no ${resolved})`);
          continue;
        }
        if (anchor && resolved.endsWith('.md') && !anchorsOf(read(resolved)).has(anchor)) broken.push(`${file}: ${link} (no heading #${anchor})`);
      }
    }
    expect(broken).toEqual([]);
  });
});
