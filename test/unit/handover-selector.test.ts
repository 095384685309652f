import { describe, expect, it } from 'vitest';
import { matches, parseSelector } from '../../src/handover/selector.js';

function sel(text: string) {
  const parsed = parseSelector(text);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.requirements;
}

describe('parseSelector / matches', () => {
  it.each([
    ['role=primary', { role: 'primary' }, true],
    ['role==primary', { role: 'primary' }, true],
    ['role=primary', { role: 'replica' }, false],
    ['spilo-role=master', { 'spilo-role': 'master', app: 'pg' }, true],
    ['cnpg.io/instanceRole=primary', { 'cnpg.io/instanceRole': 'primary' }, true],
    ['role!=replica', {}, true],
    ['role!=replica', { role: 'replica' }, false],
    ['leader', { leader: '' }, true],
    ['!leader', { leader: '' }, false],
    ['role in (primary, master)', { role: 'master' }, true],
    ['role notin (replica)', { role: 'primary' }, true],
    ['app=pg,role=primary', { app: 'pg', role: 'replica' }, false],
    ['app=pg, role in (primary,master)', { app: 'pg', role: 'primary' }, true],
  ])('%s on %j: %s', (text, labels, expected) => {
    expect(matches(sel(text), labels)).toBe(expected);
  });

  it.each([
    ['', 'the selector is empty'],
    ['role=pri mary', 'is not a label'],
    ['Role/x=primary', 'is not a label key'],
    ['role in (a b)', 'is not a label value'],
  ])('refuses %j, saying why', (text, why) => {
    const parsed = parseSelector(text);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.reason).toContain(why);
  });
});
