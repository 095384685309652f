import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { FLAGS, envName, flagMarkdownTable } from '../../src/config.js';

const README = fs.readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

describe('README', () => {
  it('carries the flag table generated from src/config.ts (regenerate: npm run readme:flags)', () => {
    const between = README.split('<!-- flags:start -->')[1]?.split('<!-- flags:end -->')[0]?.trim();
    expect(between).toBe(flagMarkdownTable());
  });

  it('names every flag and its environment variable', () => {
    for (const f of FLAGS) {
      expect(README).toContain(`\`--${f.name}\``);
      expect(README).toContain(envName(f.name));
    }
  });

  it('gives the two commands a newcomer needs', () => {
    expect(README).toContain('npm start');
    expect(README).toContain('npm test');
  });
});
