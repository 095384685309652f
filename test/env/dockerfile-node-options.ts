import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../src/dev/demo.js';

/** NODE_OPTIONS as the image sets them (the Dockerfile's ENV): the deployed configuration, which the manifests repeat. */
export function dockerfileNodeOptions(): string {
  const value = /NODE_OPTIONS="([^"]*)"/.exec(fs.readFileSync(path.join(repoRoot(), 'Dockerfile'), 'utf8'))?.[1];
  if (value === undefined) throw new Error('the Dockerfile sets no NODE_OPTIONS');
  return value;
}
