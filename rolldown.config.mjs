// The image's rollguard: the compiled CLI (package.json's bin) and every module it imports in a few
// files, minified with function and class names kept for stack traces: 16 files instead of the
// 357 that dist/src/main.js loads, and no node_modules in the image. The idle process holds
// about 4 MB less (docs/development.md). No source maps: Node parsing the bundle's map at
// start-up cost 35 MB.
import fs from 'node:fs';
import path from 'node:path';

const LICENSES_FILE = 'THIRD-PARTY-LICENSES.txt';

/** The folder of the npm package a module file belongs to, or undefined for rollguard's own. */
function packageDirOf(file) {
  const marker = `${path.sep}node_modules${path.sep}`;
  const at = file.lastIndexOf(marker);
  if (at < 0) return undefined;
  const rest = file.slice(at + marker.length).split(path.sep);
  return file.slice(0, at + marker.length) + (rest[0].startsWith('@') ? path.join(rest[0], rest[1]) : rest[0]);
}

/**
 * node_modules carried each package's license; the bundle does not, so every package bundled gets
 * its name, version, license and license text in one file beside it.
 */
function thirdPartyLicenses() {
  return {
    name: 'third-party-licenses',
    generateBundle(_options, bundle) {
      const dirs = new Set();
      for (const chunk of Object.values(bundle)) {
        if (chunk.type !== 'chunk') continue;
        for (const id of chunk.moduleIds) {
          const dir = packageDirOf(id);
          if (dir) dirs.add(dir);
        }
      }
      // one entry per name@version, however many copies node_modules holds
      const entries = new Map();
      for (const dir of dirs) {
        const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
        const file = fs.readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
        const text = file ? fs.readFileSync(path.join(dir, file), 'utf8').trim() : `(no license file in the package; package.json says ${pkg.license ?? 'nothing'})`;
        entries.set(`${pkg.name}@${pkg.version}`, `${pkg.name}@${pkg.version} (${pkg.license ?? 'unknown'})\n\n${text}\n`);
      }
      this.emitFile({ type: 'asset', fileName: LICENSES_FILE, source: [...entries.keys()].sort().map((key) => entries.get(key)).join(`\n${'-'.repeat(72)}\n\n`) });
    },
  };
}

export default {
  input: 'dist/src/cli.js',
  platform: 'node',
  plugins: [thirdPartyLicenses()],
  output: {
    dir: 'dist/image',
    // a chunk of an earlier build stays out of what the benchmarks and tests run
    cleanDir: true,
    format: 'esm',
    minify: { mangle: { keepNames: true }, compress: { keepNames: { function: true, class: true } } },
  },
};
