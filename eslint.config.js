import js from '@eslint/js';
import importX, { createNodeResolver } from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';
import layering from './layers.json' with { type: 'json' };

/** The layers of src/ (layers.json, written once; ARCHITECTURE.md shows them). */
const { layers, through } = layering;
const src = (member) => `src/${member}`;
const LAYERS_DOC = 'see the layer table in ARCHITECTURE.md (layers.json)';

/**
 * One no-restricted-paths zone per member of a closed layer: nothing of its own layer or above,
 * and one per `through` entry: of that sibling, only the files it names.
 */
function layerZones() {
  const zones = [];
  layers.forEach((layer, i) => {
    if (layer.open) return;
    const above = layers.slice(i + 1).flatMap((l) => l.members);
    for (const member of layer.members) {
      const siblings = layer.members.filter((m) => m !== member);
      const allowed = through.filter((t) => t.from === member);
      const closed = siblings.filter((s) => !allowed.some((t) => t.to === s));
      const from = [...above, ...closed].map(src);
      if (from.length > 0) {
        zones.push({ target: src(member), from, message: `${member} (layer ${layer.name}) imports only from lower layers; ${LAYERS_DOC}.` });
      }
      for (const t of allowed) {
        zones.push({
          target: src(member),
          from: src(t.to),
          except: t.files.map((f) => `./${f}`),
          message: `${member} meets ${t.to} only through ${t.files.join(', ')}; ${LAYERS_DOC}.`,
        });
      }
    }
  });
  return zones;
}

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'certs/', 'deploy/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-console': 'off',
    },
  },
  {
    // the layering of src/: which folder may import which
    files: ['src/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      // no-cycle reads the files an import leads to, which are TypeScript
      'import-x/extensions': ['.ts'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      // imports name the .js of a .ts file (NodeNext); an import the resolver cannot find would pass the zones unchecked
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js', '.json'], extensionAlias: { '.js': ['.ts', '.js'] } })],
    },
    rules: {
      'import-x/no-restricted-paths': [
        'error',
        {
          basePath: import.meta.dirname,
          zones: [...layerZones(), { target: 'src', from: ['test', 'bench'], message: 'product code never imports the tests or the benchmarks.' }],
        },
      ],
      'import-x/no-unresolved': 'error',
      'import-x/no-cycle': 'error',
    },
  },
  {
    // plain Node scripts of the build
    files: ['**/*.mjs'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
  {
    files: ['test/**', 'bench/**'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off' },
  },
);
