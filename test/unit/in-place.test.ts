import { describe, expect, it } from 'vitest';
import { ROLLGUARD_DIALECT } from '../../src/restarter/annotations.js';
import { checkedPlan, dataOutcome, judgeRead, type DataCheckItem } from '../../src/restarter/data-check.js';
import type { DigestRead } from '../../src/restarter/digest-reader.js';
import { formatDigestRecords, parseDigestRecords, DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { restartKeys } from '../../src/restarter/references.js';

const read = (version: string, digests: Record<string, string>, extra: Partial<DigestRead> = {}): DigestRead => ({ version, digests: new Map([['k1', digests]]), ...extra });

function template(containers: unknown[], volumes: unknown[] = []): unknown {
  return { spec: { containers, volumes } };
}

describe('restartKeys: the keys a running pod never sees change', () => {
  const cfgVolume = { name: 'cfg', configMap: { name: 'app' } };
  const cases: { name: string; template: unknown; want: Record<string, 'all' | string[]> }[] = [
    { name: 'a volume mounted whole', template: template([{ name: 'c', volumeMounts: [{ name: 'cfg', mountPath: '/etc/app' }] }], [cfgVolume]), want: { 'ConfigMap/app': [] } },
    { name: 'a volume with items, mounted whole', template: template([{ name: 'c', volumeMounts: [{ name: 'cfg', mountPath: '/etc/app' }] }], [{ name: 'cfg', configMap: { name: 'app', items: [{ key: 'a', path: 'a' }] } }]), want: { 'ConfigMap/app': [] } },
    { name: 'a volume mounted with subPath', template: template([{ name: 'c', volumeMounts: [{ name: 'cfg', mountPath: '/etc/app/a', subPath: 'a' }] }], [cfgVolume]), want: { 'ConfigMap/app': 'all' } },
    { name: 'subPathExpr in an init container', template: { spec: { volumes: [cfgVolume], initContainers: [{ name: 'i', volumeMounts: [{ name: 'cfg', mountPath: '/x', subPathExpr: '$(POD)' }] }], containers: [{ name: 'c' }] } }, want: { 'ConfigMap/app': 'all' } },
    { name: 'a key ref beside a whole mount', template: template([{ name: 'c', env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'app', key: 'a' } } }], volumeMounts: [{ name: 'cfg', mountPath: '/etc/app' }] }], [cfgVolume]), want: { 'ConfigMap/app': ['a'] } },
    { name: 'envFrom', template: template([{ name: 'c', envFrom: [{ secretRef: { name: 's' } }] }]), want: { 'Secret/s': 'all' } },
    { name: 'a projected volume mounted whole', template: template([{ name: 'c', volumeMounts: [{ name: 'p', mountPath: '/p' }] }], [{ name: 'p', projected: { sources: [{ secret: { name: 's', items: [{ key: 'tls.crt', path: 'crt' }] } }] } }]), want: { 'Secret/s': [] } },
  ];
  for (const c of cases) {
    it(c.name, () => {
      expect(Object.fromEntries(restartKeys(c.template))).toEqual(c.want);
    });
  }
});

describe('judgeRead for a set that re-reads its files', () => {
  const record = { version: 'u/208', keyId: 'k1', digests: { a: 'aa', b: 'bb' } };

  it('a change only to keys served in place: kept, recorded as served in place since the new version', () => {
    expect(judgeRead('u/208', 'u/264', record, read('u/264', { a: 'xx', b: 'bb' }), 'k1', 'all', ['b'])).toEqual({
      kind: 'in-place',
      value: 'u/264',
      keys: ['a'],
      record: { version: 'u/264', keyId: 'k1', digests: { a: 'xx', b: 'bb' }, inPlaceSince: 'u/264' },
    });
  });

  it('a change to a key read from env, a subPath or envFrom restarts', () => {
    expect(judgeRead('u/208', 'u/264', record, read('u/264', { a: 'xx', b: 'bb' }), 'k1', 'all', ['a']).kind).toBe('changed');
    expect(judgeRead('u/208', 'u/264', record, read('u/264', { a: 'xx', b: 'bb' }), 'k1', 'all', 'all').kind).toBe('changed');
  });

  it('not opted in, an immutable object, or a re-created one: restarts', () => {
    expect(judgeRead('u/208', 'u/264', record, read('u/264', { a: 'xx', b: 'bb' }), 'k1', 'all').kind).toBe('changed');
    expect(judgeRead('u/208', 'u/264', record, read('u/264', { a: 'xx', b: 'bb' }, { immutable: true }), 'k1', 'all', []).kind).toBe('changed');
    expect(judgeRead('u/208', 'w/264', record, read('w/264', { a: 'xx', b: 'bb' }), 'k1', 'all', []).kind).toBe('changed');
  });

  it('digests folded into one (keys not nameable): in place only when nothing is read from env or a subPath', () => {
    const folded = { version: 'u/208', keyId: 'k1', digests: { '*': 'all1' } };
    expect(judgeRead('u/208', 'u/264', folded, read('u/264', { '*': 'all2' }), 'k1', 'all', []).kind).toBe('in-place');
    expect(judgeRead('u/208', 'u/264', folded, read('u/264', { '*': 'all2' }), 'k1', 'all', ['a']).kind).toBe('changed');
  });

  it('a second change keeps the first version served in place; a metadata-only change keeps the mark', () => {
    const served = { version: 'u/264', keyId: 'k1', digests: { a: 'xx', b: 'bb' }, inPlaceSince: 'u/264' };
    const second = judgeRead('u/208', 'u/300', served, read('u/300', { a: 'yy', b: 'bb' }), 'k1', 'all', []);
    expect(second).toMatchObject({ kind: 'in-place', record: { version: 'u/300', inPlaceSince: 'u/264' } });
    expect(judgeRead('u/208', 'u/310', served, read('u/310', { a: 'xx', b: 'bb' }), 'k1', 'all', [])).toMatchObject({ kind: 'same', record: { version: 'u/310', inPlaceSince: 'u/264' } });
  });

  it('after a restart past the mark, a later in-place change starts a new mark', () => {
    const stale = { version: 'u/264', keyId: 'k1', digests: { a: 'xx', b: 'bb' }, inPlaceSince: 'u/264' };
    expect(judgeRead('u/264', 'u/300', stale, read('u/300', { a: 'yy', b: 'bb' }), 'k1', 'all', [])).toMatchObject({ kind: 'in-place', record: { inPlaceSince: 'u/300' } });
  });

  it('the mark survives the record annotation\'s text', () => {
    const records = new Map([['configmap.rollguard.io/app', { version: 'u/264', keyId: 'k1', digests: { a: 'xx' }, inPlaceSince: 'u/264' }]]);
    const text = formatDigestRecords(records)!;
    expect(parseDigestRecords({ [DIGESTS_ANNOTATION]: text })).toEqual(records);
  });
});

describe('checkedPlan with changes served in place', () => {
  const planned = (name: string, value: string) => ({ key: `configmap.rollguard.io/${name}`, kind: 'ConfigMap' as const, name, value });
  const item = (name: string, stored: string, value: string, restartReads?: readonly string[]): DataCheckItem => ({
    planned: planned(name, value),
    stored,
    record: { version: stored, keyId: 'k1', digests: { a: 'aa' } },
    reads: 'all',
    ...(restartReads ? { restartReads } : {}),
  });

  it('alone: no template change, the record and the change to tell', () => {
    const items = [item('app', 'u/1', 'u/5', [])];
    const outcomes = items.map((i) => dataOutcome(i, { read: true, why: 'bump', stored: 'u/1' }, read('u/5', { a: 'zz' }), 'k1'));
    const plan = checkedPlan(items, outcomes, { 'configmap.rollguard.io/app': 'u/1' }, null, ROLLGUARD_DIALECT);
    expect(plan.changes).toEqual([]);
    expect(plan.inPlace).toEqual([{ planned: planned('app', 'u/5'), from: 'u/1', to: 'u/5', keys: ['a'] }]);
    expect(parseDigestRecords({ [DIGESTS_ANNOTATION]: plan.digests! }).get('configmap.rollguard.io/app')?.inPlaceSince).toBe('u/5');
  });

  it('beside a change that restarts the set anyway: bumped with it, no mark, nothing told in place', () => {
    const items = [item('app', 'u/1', 'u/5', []), item('env', 'v/1', 'v/7', ['a'])];
    const reads = [read('u/5', { a: 'zz' }), read('v/7', { a: 'zz' })];
    const outcomes = items.map((i, n) => dataOutcome(i, { read: true, why: 'bump', stored: i.stored! }, reads[n], 'k1'));
    const plan = checkedPlan(items, outcomes, { 'configmap.rollguard.io/app': 'u/1', 'configmap.rollguard.io/env': 'v/1' }, null, ROLLGUARD_DIALECT);
    expect(plan.inPlace).toEqual([]);
    expect(plan.changes.map((c) => [c.key, c.to])).toEqual([
      ['configmap.rollguard.io/app', 'u/5'],
      ['configmap.rollguard.io/env', 'v/7'],
    ]);
    expect(parseDigestRecords({ [DIGESTS_ANNOTATION]: plan.digests! }).get('configmap.rollguard.io/app')?.inPlaceSince).toBeUndefined();
  });
});
