// Rewrites the flag table of README.md from src/config.ts (Node >= 23.6 strips the types).
import fs from 'node:fs';
const { flagMarkdownTable } = await import('../src/config.ts');
const readme = fs.readFileSync('README.md', 'utf8');
const [head, rest] = readme.split('<!-- flags:start -->');
const tail = rest.split('<!-- flags:end -->')[1];
fs.writeFileSync('README.md', `${head}<!-- flags:start -->\n${flagMarkdownTable()}\n<!-- flags:end -->${tail}`);
