// The image's rollguard: the compiled CLI (package.json's bin) and every module it imports in a few
// files, minified with function and class names kept for stack traces. One file per dependency
// graph instead of ~1,000 modules, and no node_modules in the image: the idle process holds
// about 4–5 MB less (docs/benchmarks.md "Idle RSS"). No source maps: parsing a minified
// bundle's map at start-up cost 35 MB.
export default {
  input: 'dist/src/cli.js',
  platform: 'node',
  output: {
    dir: 'dist/image',
    format: 'esm',
    minify: { mangle: { keepNames: true }, compress: { keepNames: { function: true, class: true } } },
  },
};
