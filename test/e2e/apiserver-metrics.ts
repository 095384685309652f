/** One sample of the API server's /metrics: its name, labels and value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** The samples of a Prometheus text exposition (comments and blank lines skipped). */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (m[2] ?? '').matchAll(LABEL)) labels[key!] = value!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The sum of `name`'s samples whose labels pass `where`. */
export function sumOf(samples: Sample[], name: string, where: (labels: Record<string, string>) => boolean = () => true): number {
  return samples.filter((s) => s.name === name && where(s.labels)).reduce((sum, s) => sum + s.value, 0);
}
