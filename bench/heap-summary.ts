import fs from 'node:fs';

// What a V8 heap snapshot (.heapsnapshot, from --heapsnapshot-signal or the inspector) holds:
// self size by node type, and by constructor for objects, arrays and closures, largest first.
//   npm run bench -- heap-summary FILE [--top N]

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

const MB = 1024 * 1024;
const mb = (bytes: number): string => `${(bytes / MB).toFixed(1)} MB`;

function main(): void {
  const [file, ...rest] = process.argv.slice(2);
  if (!file) {
    console.error('usage: npm run bench -- heap-summary FILE [--top N]');
    process.exit(2);
  }
  const top = Number(rest[rest.indexOf('--top') + 1] ?? 30) || 30;
  const snap = JSON.parse(fs.readFileSync(file, 'utf8')) as Snapshot;
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [type, name, self] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [number, number, number];
  const byType = new Map<string, number>();
  const byName = new Map<string, { bytes: number; count: number }>();
  let total = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const t = types[snap.nodes[i + type]!] ?? '?';
    const size = snap.nodes[i + self]!;
    total += size;
    byType.set(t, (byType.get(t) ?? 0) + size);
    const key = t === 'object' || t === 'array' || t === 'closure' ? `${t} ${(snap.strings[snap.nodes[i + name]!] ?? '').slice(0, 60)}` : t;
    const entry = byName.get(key) ?? { bytes: 0, count: 0 };
    entry.bytes += size;
    entry.count++;
    byName.set(key, entry);
  }
  console.log(`${file}: ${mb(total)} in ${snap.nodes.length / fields.length} nodes`);
  console.log(`by type: ${[...byType].sort((a, b) => b[1] - a[1]).map(([t, b]) => `${t} ${mb(b)}`).join(', ')}`);
  console.log(`largest by constructor (self size, count):`);
  for (const [key, { bytes, count }] of [...byName].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, top)) console.log(`  ${mb(bytes).padStart(9)}  ${String(count).padStart(8)}  ${key}`);
}

main();
