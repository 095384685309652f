import fs from 'node:fs';

/** The package version, read once from package.json beside src/ or dist/src/. */
export const VERSION: string = (() => {
  for (const rel of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(fs.readFileSync(new URL(rel, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'rollguard' && pkg.version) return pkg.version;
    } catch {
      // not at this depth
    }
  }
  return 'unknown';
})();
