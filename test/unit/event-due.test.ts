import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EVENT_DUE_MAX_AGE_MS, dueEventName, dueToTell, formatEventDue, parseEventDue, type EventDue } from '../../src/restarter/event-due.js';

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const setName = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?$/);
const due: fc.Arbitrary<EventDue> = fc.record({
  uid: fc.uuid(),
  at: fc.date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2200-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString()),
  type: fc.constantFrom('Normal' as const, 'Warning' as const),
  reason: fc.constantFrom('ConfigChanged', 'ReferencesAnnotated', 'ReferencesRemoved'),
  message: fc.string({ maxLength: 300 }),
});

describe('rollguard.io/event-due', () => {
  it('reads back what it wrote, and nothing of another shape', () => {
    fc.assert(fc.property(due, (d) => {
        expect(parseEventDue(formatEventDue(d))).toEqual(d);
      }), { seed: 25, numRuns: 300 });
    for (const bad of [undefined, '', 'x', '[]', '{}', '{"uid":"u","at":"nope","type":"Normal","reason":"R","message":""}', '{"uid":"u","at":"2026-01-01T00:00:00Z","type":"Odd","reason":"R","message":""}']) {
      expect(parseEventDue(bad), String(bad)).toBeUndefined();
    }
  });

  it("names the mark's Event the same every time, as a valid Event name, and two marks two names", () => {
    fc.assert(
      fc.property(setName, due, due, (name, a, b) => {
        const n = dueEventName(name, a);
        expect(n).toBe(dueEventName(name, a));
        expect(n.length).toBeLessThanOrEqual(253);
        expect(n).toMatch(DNS_SUBDOMAIN);
        if (formatEventDue(a) !== formatEventDue(b)) expect(dueEventName(name, b)).not.toBe(n);
      }),
      { seed: 25, numRuns: 300 },
    );
  });

  it("is told only on the set it was written on, within the Event TTL", () => {
    const d: EventDue = { uid: 'u1', at: '2026-12-01T10:00:00.000Z', type: 'Normal', reason: 'ConfigChanged', message: 'm' };
    const at = Date.parse(d.at);
    expect(dueToTell(d, 'u1', at + 1000)).toBe(true);
    expect(dueToTell(d, 'u1', at + EVENT_DUE_MAX_AGE_MS)).toBe(true);
    expect(dueToTell(d, 'u1', at + EVENT_DUE_MAX_AGE_MS + 1)).toBe(false);
    expect(dueToTell(d, 'u2', at + 1000)).toBe(false);
    expect(dueToTell(undefined, 'u1', at)).toBe(false);
  });
});
