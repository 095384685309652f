// Rewrites the flag table of docs/configuration.md from src/config.ts (Node >= 23.6 strips the types).
import fs from 'node:fs';
const { flagMarkdownTable } = await import('../src/config.ts');
const page = 'docs/configuration.md';
const text = fs.readFileSync(page, 'utf8');
const [head, rest] = text.split('<!-- flags:start -->');
const tail = rest.split('<!-- flags:end -->')[1];
fs.writeFileSync(page, `${head}<!-- flags:start -->\n${flagMarkdownTable()}\n<!-- flags:end -->${tail}`);
