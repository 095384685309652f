import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { admit } from '../../src/restarter/admit.js';
import { handoverGraceCheck } from '../../src/handover/grace-check.js';
import { MAX_WARNING_CHARS, runChecks } from '../../src/admission/mutators.js';
import type { AdmissionReview } from '../../src/admission/review.js';
import { graceBudgetWarnings, preStopSleepSeconds } from '../../src/handover/grace-budget.js';
import { propertyRuns } from '../env/property-runs.js';

const exec = (...command: string[]) => ({ exec: { command } });

describe('preStopSleepSeconds', () => {
  it('reads the sleep action and an exec of sleep, directly or in a straight-line shell script', () => {
    expect(preStopSleepSeconds({ sleep: { seconds: 40 } })).toBe(40);
    expect(preStopSleepSeconds(exec('sleep', '30'))).toBe(30);
    expect(preStopSleepSeconds(exec('/bin/sleep', '1.5m'))).toBe(90);
    expect(preStopSleepSeconds(exec('/bin/sh', '-c', 'sleep 5; nginx -s quit && sleep 20s'))).toBe(25);
    expect(preStopSleepSeconds(exec('sh', '-c', 'sleep 10\nkill -TERM 1'))).toBe(10);
  });

  it('tells nothing of what it cannot know: loops, branches, variables, other handlers', () => {
    expect(preStopSleepSeconds(exec('sh', '-c', 'while pgrep vttablet; do sleep 1; done'))).toBeUndefined();
    expect(preStopSleepSeconds(exec('sh', '-c', 'sleep $DELAY'))).toBeUndefined();
    expect(preStopSleepSeconds(exec('sh', '-c', 'sleep 5 || true'))).toBeUndefined();
    expect(preStopSleepSeconds(exec('sh', '-c', 'sleep 60 &'))).toBeUndefined();
    expect(preStopSleepSeconds(exec('/usr/local/bin/drain', '--wait=60'))).toBeUndefined();
    expect(preStopSleepSeconds({ httpGet: { path: '/quit', port: 8080 } })).toBeUndefined();
    expect(preStopSleepSeconds({ sleep: { seconds: '40' } })).toBeUndefined();
  });
});

describe('graceBudgetWarnings', () => {
  const container = (name: string, preStop: unknown, extra: Record<string, unknown> = {}) => ({ name, image: 'x', lifecycle: { preStop }, ...extra });

  it('warns for a preStop that sleeps the whole grace period (the default 30 s when none is set), in main containers and native sidecars', () => {
    expect(graceBudgetWarnings({ containers: [container('db', { sleep: { seconds: 30 } })] })).toEqual([
      'rollguard: container db: preStop sleeps 30s, terminationGracePeriodSeconds is 30s: the kubelet kills the container before it can shut down; make the grace period longer than the preStop plus the shutdown',
    ]);
    const spec = {
      terminationGracePeriodSeconds: 20,
      initContainers: [container('postgres', exec('sleep', '25'), { restartPolicy: 'Always' }), container('init', exec('sleep', '60'))],
      containers: [container('agent', exec('sh', '-c', 'sleep 19')), container('exporter', { sleep: { seconds: 20 } })],
    };
    const warnings = graceBudgetWarnings(spec);
    expect(warnings.map((w) => /container (\S+):/.exec(w)?.[1])).toEqual(['postgres', 'exporter']);
    expect(warnings[0]).toContain('terminationGracePeriodSeconds is 20s:');
  });

  it('no warning when the preStop fits, or cannot be told', () => {
    expect(graceBudgetWarnings({ terminationGracePeriodSeconds: 60, containers: [container('db', { sleep: { seconds: 45 } })] })).toEqual([]);
    expect(graceBudgetWarnings({ containers: [container('db', exec('sh', '-c', 'until pg_isready; do sleep 1; done'))] })).toEqual([]);
    expect(graceBudgetWarnings({ containers: [{ name: 'db' }] })).toEqual([]);
  });

  it('any wire JSON: never throws, every warning is short enough for the API server', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (spec) => {
        for (const w of graceBudgetWarnings(spec)) expect(w.length).toBeLessThanOrEqual(MAX_WARNING_CHARS);
      }),
      propertyRuns(500),
    );
  });

  it('a sleep action warns exactly when it is at least the grace period', () => {
    const name = fc.stringMatching(/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/);
    fc.assert(
      fc.property(name, fc.integer({ min: 0, max: 100_000 }), fc.option(fc.integer({ min: 0, max: 100_000 }), { nil: undefined }), (n, seconds, grace) => {
        const warnings = graceBudgetWarnings({ ...(grace === undefined ? {} : { terminationGracePeriodSeconds: grace }), containers: [container(n, { sleep: { seconds } })] });
        expect(warnings.length).toBe(seconds > 0 && seconds >= (grace ?? 30) ? 1 : 0);
        for (const w of warnings) expect(w.length).toBeLessThanOrEqual(MAX_WARNING_CHARS);
      }),
      propertyRuns(500),
    );
  });
});

describe('handoverGraceCheck in the admission path', () => {
  const set = (annotations: Record<string, string>) => ({
    apiVersion: 'apps/v1',
    kind: 'StatefulSet',
    metadata: { name: 'db', namespace: 'shop', annotations },
    spec: { template: { spec: { terminationGracePeriodSeconds: 10, containers: [{ name: 'db', lifecycle: { preStop: { sleep: { seconds: 10 } } } }] } } },
  });
  const review = (object: unknown, operation: 'CREATE' | 'UPDATE' | 'DELETE' = 'CREATE'): AdmissionReview => ({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'u1',
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      namespace: 'shop',
      operation,
      object,
    },
  });
  const deps = { cachesSynced: false, lookup: () => undefined, checks: [handoverGraceCheck] };

  it('answers allowed with the warning for a handover-enabled set, also before the caches synced', () => {
    const answer = admit(review(set({ 'rollguard.io/primary-selector': 'role=primary' })), deps);
    expect(answer.response?.allowed).toBe(true);
    expect(answer.response?.warnings).toEqual([expect.stringContaining('rollguard: container db: preStop sleeps 10s, terminationGracePeriodSeconds is 10s:')]);
    expect(admit(review(set({ 'rollguard.io/primary-selector': 'role=primary' }), 'UPDATE'), deps).response?.warnings).toHaveLength(1);
  });

  it('no warning for a set without a primary selector, and no warnings field at all', () => {
    expect(admit(review(set({})), deps).response).toEqual({ uid: 'u1', allowed: true });
  });

  it('runChecks cuts a long warning and drops repeats', () => {
    const request = review({}).request!;
    expect(runChecks(request, {}, [() => ['a', 'a'], () => ['x'.repeat(300)]]).map((w) => w.length)).toEqual([1, MAX_WARNING_CHARS]);
  });
});
