/**
 * Label selectors as `kubectl get -l` reads them: `k=v`, `k==v`, `k!=v`, `k`, `!k`,
 * `k in (a,b)`, `k notin (a,b)`, joined by commas; every requirement must hold.
 */
export type Requirement =
  | { key: string; op: 'equals' | 'not-equals'; value: string }
  | { key: string; op: 'exists' | 'not-exists' }
  | { key: string; op: 'in' | 'notin'; values: string[] };

export type ParsedSelector = { ok: true; requirements: Requirement[] } | { ok: false; reason: string };

// a label key: an optional DNS-subdomain prefix and a name of at most 63 characters
const KEY = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;

/** Splits on the commas outside parentheses. */
function terms(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of text) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(current);
      current = '';
    } else current += ch;
  }
  out.push(current);
  return out.map((t) => t.trim());
}

function requirement(term: string): Requirement | string {
  const set = /^(\S+)\s+(in|notin)\s*\(([^()]*)\)$/.exec(term);
  if (set) {
    const values = set[3]!.split(',').map((v) => v.trim());
    const bad = values.find((v) => !VALUE.test(v));
    if (bad !== undefined) return `${JSON.stringify(bad)} is not a label value`;
    return { key: set[1]!, op: set[2] === 'in' ? 'in' : 'notin', values };
  }
  const pair = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(term);
  if (pair) {
    if (!VALUE.test(pair[3]!)) return `${JSON.stringify(pair[3])} is not a label value`;
    return { key: pair[1]!, op: pair[2] === '!=' ? 'not-equals' : 'equals', value: pair[3]! };
  }
  if (term.startsWith('!')) return { key: term.slice(1).trim(), op: 'not-exists' };
  return { key: term, op: 'exists' };
}

export function parseSelector(text: string): ParsedSelector {
  if (text.trim() === '') return { ok: false, reason: 'the selector is empty: it would match every pod' };
  const requirements: Requirement[] = [];
  for (const term of terms(text)) {
    const parsed = requirement(term);
    if (typeof parsed === 'string') return { ok: false, reason: `${JSON.stringify(term)}: ${parsed}` };
    if (!KEY.test(parsed.key)) return { ok: false, reason: `${JSON.stringify(term)}: ${JSON.stringify(parsed.key)} is not a label key` };
    requirements.push(parsed);
  }
  return { ok: true, requirements };
}

export function matches(requirements: readonly Requirement[], labels: Readonly<Record<string, string>> | undefined): boolean {
  const own = labels ?? {};
  return requirements.every((r) => {
    const has = Object.hasOwn(own, r.key);
    const value = own[r.key];
    switch (r.op) {
      case 'equals':
        return has && value === r.value;
      case 'not-equals':
        return !has || value !== r.value;
      case 'exists':
        return has;
      case 'not-exists':
        return !has;
      case 'in':
        return has && r.values.includes(value ?? '');
      case 'notin':
        return !has || !r.values.includes(value ?? '');
    }
  });
}
