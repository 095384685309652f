import { describe, expect, it } from 'vitest';
import type { Explanation } from '../../src/explain/explanation.js';
import { renderExplanation, renderList, shortVersion, when } from '../../src/explain/render.js';
import { defaultTiming } from '../../src/restarter/timing.js';

const explanation: Explanation = {
  workload: { kind: 'StatefulSet', namespace: 'shop', name: 'web', generation: 2 },
  at: '2026-06-01T12:00:00.000Z',
  managed: true,
  dialect: 'rollguard',
  state: 'debouncing',
  summary: 'ConfigMap app changed (resourceVersion 100 → 180); debounce until …',
  timing: { recorded: true, rules: defaultTiming() },
  references: [
    { kind: 'ConfigMap', name: 'app', annotation: 'configmap.rollguard.io/app', reads: [{ via: 'volume' }], template: 'u/100', pods: [{ version: 'u/100', pods: 3 }], current: 'u/180', state: 'changed', change: 'ConfigMap app changed (resourceVersion 100 → 180)', changedAt: { at: '2026-06-01T11:59:58.000Z', inSeconds: -2 } },
    { kind: 'Secret', name: 'creds', annotation: 'secret.rollguard.io/creds', reads: [{ via: 'env', keys: ['password'] }], keys: ['password'], template: 's/7', pods: [{ version: 's/7', pods: 3 }], current: 's/7', state: 'up-to-date' },
  ],
  next: [{ cause: 'debounce', at: { at: '2026-06-01T12:00:03.000Z', inSeconds: 3 }, text: 'rollguard looks at the change' }],
  lastRestartAt: { at: '2026-06-01T10:00:00.000Z', inSeconds: -7200 },
  restarts: [{ revision: 'web-2', at: { at: '2026-06-01T10:00:00.000Z', inSeconds: -7200 }, cause: 'rollguard', reason: 'ConfigMap app: data changed (key a), resourceVersion 90 → 100', podsReplaced: [{ name: 'web-2', at: { at: '2026-06-01T10:00:01.000Z', inSeconds: -7199 } }] }],
  pods: [{ revision: 'web-2', update: true, pods: [{ name: 'web-0', ready: true }, { name: 'web-1', ready: false }] }],
  events: [],
  notes: ['a note'],
};

describe('the text of rollguard why', () => {
  it('tells the state, each reference with what the pods run, what comes next and when, the restarts with the pods they made', () => {
    const text = renderExplanation(explanation);
    expect(text).toContain('StatefulSet shop/web (generation 2)\nState:    debouncing\n');
    expect(text).toContain('Last restart by rollguard: 2026-06-01T10:00:00Z (2h ago)');
    expect(text).toMatch(/ConfigMap\s+app\s+all keys \(volume\)\s+100×3\s+100\s+180\s+changed since 2026-06-01T11:59:58Z \(2s ago\)/);
    expect(text).toMatch(/Secret\s+creds\s+key password \(env\)\s+7×3\s+7\s+7\s+up-to-date/);
    expect(text).toContain('  - at 2026-06-01T12:00:03Z (in 3s): rollguard looks at the change');
    expect(text).toContain('  web-2  2026-06-01T10:00:00Z (2h ago)  rollguard\n      ConfigMap app: data changed (key a), resourceVersion 90 → 100\n      pods made then or since: web-2 2026-06-01T10:00:01Z (1h59m59s ago)');
    expect(text).toContain('  web-2 (the template now): 2 pods, 1 ready: web-0, web-1');
    expect(text).toContain('Notes:\n  - a note');
  });

  it('says why not, for a workload rollguard does not manage', () => {
    const text = renderExplanation({ ...explanation, managed: false, notManaged: 'it has no label', state: 'unmanaged', references: [], next: [], restarts: [], pods: [], notes: [] });
    expect(text).toContain('Managed:  no: it has no label');
    expect(text).not.toContain('Timing:');
  });

  it('one line per workload in list', () => {
    expect(renderList([explanation]).split('\n')).toEqual(['NAMESPACE  WORKLOAD         STATE       SUMMARY', `shop       StatefulSet/web  debouncing  ${explanation.summary}`]);
    expect(renderList([])).toContain('no workload is opted in');
  });

  it.each([
    [{ at: '2026-06-01T12:00:00.000Z', inSeconds: 0 }, '2026-06-01T12:00:00Z (now)'],
    [{ at: '2026-06-01T12:01:30.000Z', inSeconds: 90 }, '2026-06-01T12:01:30Z (in 1m30s)'],
  ])('when %j', (moment, text) => {
    expect(when(moment)).toBe(text);
  });

  it.each([
    ['u/812', '812'],
    ['absent', 'absent'],
    [undefined, '-'],
    ['changes-ignored', 'changes-ignored'],
  ])('shortVersion %s', (value, text) => {
    expect(shortVersion(value)).toBe(text);
  });
});
