import type { V1StatefulSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { describeAction, handoverSettings, parseHttpAction, renderBody } from '../../src/handover/settings.js';

const set = (annotations: Record<string, string>): V1StatefulSet => ({ metadata: { name: 'db', namespace: 'shop', annotations } });
const BASE = { 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-http': 'POST :8008/switchover' };

describe('handoverSettings', () => {
  it('is undefined without a primary selector: the set asks for no handover', () => {
    expect(handoverSettings(set({ 'rollguard.io/handover-http': 'POST :8008/switchover' }))).toBeUndefined();
  });

  it('reads the defaults: 30 s timeout, 3 retries, 10 s apart, pause on failure', () => {
    const parsed = handoverSettings(set(BASE));
    expect(parsed).toMatchObject({
      ok: true,
      settings: {
        action: { kind: 'http', on: 'primary', method: 'POST', scheme: 'http', port: 8008, path: '/switchover' },
        timeoutMs: 30_000,
        retries: 3,
        intervalMs: 10_000,
        onFailure: 'pause',
      },
    });
  });

  it('reads every annotation of the contract', () => {
    const parsed = handoverSettings(
      set({
        ...BASE,
        'rollguard.io/handover-body': '{"leader":"{primary}","candidate":"{candidate}"}',
        'rollguard.io/handover-timeout': '5s',
        'rollguard.io/handover-retries': '2',
        'rollguard.io/handover-interval': '500ms',
        'rollguard.io/handover-fallback': 'candidate: POST https:8443/failover',
        'rollguard.io/handover-on-failure': 'proceed',
        'rollguard.io/handover-credentials': 'patroni-api',
      }),
    );
    expect(parsed).toEqual({
      ok: true,
      settings: expect.objectContaining({
        body: '{"leader":"{primary}","candidate":"{candidate}"}',
        fallback: { kind: 'http', on: 'candidate', method: 'POST', scheme: 'https', port: 8443, path: '/failover' },
        timeoutMs: 5_000,
        retries: 2,
        intervalMs: 500,
        onFailure: 'proceed',
        credentials: 'patroni-api',
      }),
    });
  });

  it('reads an annotate action and an annotate fallback', () => {
    const parsed = handoverSettings(
      set({
        'rollguard.io/primary-selector': 'moco.cybozu.com/role=primary',
        'rollguard.io/handover-annotate': 'moco.cybozu.com/demote=true',
        'rollguard.io/handover-fallback': 'annotate:example.com/failover=now',
      }),
    );
    expect(parsed).toMatchObject({
      ok: true,
      settings: { action: { kind: 'annotate', key: 'moco.cybozu.com/demote', value: 'true' }, fallback: { kind: 'annotate', key: 'example.com/failover', value: 'now' } },
    });
  });

  it.each([
    [{ 'rollguard.io/primary-selector': 'role=primary' }, 'exactly one of rollguard.io/handover-http and rollguard.io/handover-annotate'],
    [{ ...BASE, 'rollguard.io/handover-annotate': 'a=b' }, 'exactly one of'],
    [{ ...BASE, 'rollguard.io/primary-selector': '' }, 'the selector is empty'],
    [{ ...BASE, 'rollguard.io/handover-http': 'POST http://10.0.0.1:8008/switchover' }, 'is not "[candidate:] METHOD :PORT/PATH"'],
    [{ ...BASE, 'rollguard.io/handover-http': 'FETCH :8008/x' }, 'FETCH is not one of'],
    [{ ...BASE, 'rollguard.io/handover-http': 'POST :70000/x' }, 'port 70000 is not between 1 and 65535'],
    [{ ...BASE, 'rollguard.io/handover-timeout': 'soon' }, 'rollguard.io/handover-timeout: "soon" is not a duration'],
    [{ ...BASE, 'rollguard.io/handover-timeout': '2h' }, 'is not between'],
    [{ ...BASE, 'rollguard.io/handover-retries': '0' }, 'is not a whole number from 1 to 20'],
    [{ ...BASE, 'rollguard.io/handover-on-failure': 'kill' }, '"kill" is not "pause" or "proceed"'],
    [{ ...BASE, 'rollguard.io/handover-credentials': '../etc' }, 'is not a Secret name'],
    [{ 'rollguard.io/primary-selector': 'role=primary', 'rollguard.io/handover-annotate': 'rollguard.io/frozen=true' }, "rollguard's own annotations"],
  ])('refuses %j, naming the annotation', (annotations, why) => {
    const parsed = handoverSettings(set(annotations));
    expect(parsed?.ok).toBe(false);
    if (parsed && !parsed.ok) expect(parsed.reason).toContain(why);
  });
});

describe('renderBody and describeAction', () => {
  it('fills in every placeholder', () => {
    expect(renderBody('{"leader":"{primary}","candidate":"{candidate}","ns":"{namespace}","set":"{set}","x":"{other}"}', { primary: 'db-0', candidate: 'db-1', namespace: 'shop', set: 'db' })).toBe(
      '{"leader":"db-0","candidate":"db-1","ns":"shop","set":"db","x":"{other}"}',
    );
  });

  it('says what the action is, as Events show it', () => {
    const action = parseHttpAction('candidate: POST https:8443/promote');
    expect(typeof action === 'string' ? action : describeAction(action)).toBe('POST https:8443/promote on the candidate');
  });
});
