// The image's rollguard: the compiled CLI (package.json's bin) and every module it imports in a few
// files, minified with function and class names kept for stack traces: 16 files instead of the
// 357 that dist/src/main.js loads, and no node_modules in the image. The idle process holds
// about 4 MB less (docs/development.md). No source maps: Node parsing the bundle's map at
// start-up cost 35 MB.
export default {
  input: 'dist/src/cli.js',
  platform: 'node',
  output: {
    dir: 'dist/image',
    format: 'esm',
    minify: { mangle: { keepNames: true }, compress: { keepNames: { function: true, class: true } } },
  },
};
