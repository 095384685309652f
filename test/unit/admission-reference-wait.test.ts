import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AdmissionReview, HandlerResult } from '../../src/admission/review.js';
import { createMetrics } from '../../src/metrics.js';
import { createAdmissionHandler } from '../../src/restarter/admission-handler.js';
import { admit } from '../../src/restarter/admit.js';
import type { ObjectVersion, VersionLookup } from '../../src/restarter/annotations.js';
import { propertyRuns } from '../env/property-runs.js';

const NAMESPACE = 'shop';
const WAIT_MS = 1_000;

/** When a ConfigMap reaches the cache, in ms after the review came: 0 known already; undefined never. */
type Arrival = number | undefined;

function createReview(configMaps: readonly string[]): AdmissionReview {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'u-wait',
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      operation: 'CREATE',
      namespace: NAMESPACE,
      name: 'web',
      object: {
        apiVersion: 'apps/v1',
        kind: 'StatefulSet',
        metadata: { name: 'web', namespace: NAMESPACE, labels: { 'rollguard.io/enabled': 'true' } },
        spec: {
          selector: { matchLabels: { app: 'web' } },
          template: {
            metadata: { labels: { app: 'web' } },
            spec: {
              containers: [{ name: 'app', image: 'app:1' }],
              volumes: configMaps.map((name) => ({ name, configMap: { name } })),
            },
          },
        },
      },
    },
  } as unknown as AdmissionReview;
}

const versionOf = (name: string): ObjectVersion => ({ uid: `uid-${name}`, resourceVersion: String(100 + name.length), ignored: false });

/** The cache as it is `now` ms after the review came. */
function cacheAt(arrivals: ReadonlyMap<string, Arrival>, now: () => number): VersionLookup {
  return (kind, namespace, name) => {
    const at = arrivals.get(name);
    return kind === 'ConfigMap' && namespace === NAMESPACE && at !== undefined && at <= now() ? versionOf(name) : undefined;
  };
}

const patchOf = (r: HandlerResult): string | undefined => (r.body as AdmissionReview).response?.patch;

describe('--reference-wait: a review waits for the caches to bring what they do not know yet', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('answers as the cache is once everything that comes within the wait has come; at once, without a promise, when nothing is missing', async () => {
    const names = fc.uniqueArray(fc.constantFrom('a', 'bb', 'ccc', 'dddd', 'eeeee'), { minLength: 0, maxLength: 5 });
    const arrival: fc.Arbitrary<Arrival> = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 * WAIT_MS }), fc.constant(undefined));
    await fc.assert(
      fc.asyncProperty(names.chain((ns) => fc.tuple(fc.constant(ns), fc.array(arrival, { minLength: ns.length, maxLength: ns.length }))), async ([configMaps, times]) => {
        vi.setSystemTime(0);
        const arrivals = new Map(configMaps.map((n, i) => [n, times[i]]));
        const started = Date.now();
        const lookup = cacheAt(arrivals, () => Date.now() - started);
        const handler = createAdmissionHandler({ cachesSynced: () => true, lookup, referenceWaitMs: WAIT_MS, metrics: createMetrics() });
        const review = createReview(configMaps);
        const answered = handler.handle(review);
        const missing = [...arrivals.values()].some((t) => t !== 0);
        expect(answered instanceof Promise, 'a promise only when something was missing').toBe(missing);
        let result: HandlerResult;
        if (answered instanceof Promise) {
          await vi.advanceTimersByTimeAsync(WAIT_MS + 50);
          result = await answered;
        } else {
          result = answered;
        }
        // everything that came within the wait is known; when one never came in time the first answer stands
        const allCame = [...arrivals.values()].every((t) => t !== undefined && t <= WAIT_MS);
        const asOf = allCame ? Math.max(0, ...[...arrivals.values()].map((t) => t ?? 0)) : 0;
        const expected = admit(review, { cachesSynced: true, lookup: cacheAt(arrivals, () => asOf) });
        expect(result.status).toBe(200);
        expect(patchOf(result)).toBe(expected.response?.patch);
      }),
      propertyRuns(2000),
    );
  });

  // The VM resumed or NTP stepped the clock: a wait timed on the wall clock ended at once and
  // the write went out with the object `absent`, one rollout to come for nothing.
  it('is not cut short by a step of the wall clock: the wait is timed on the monotonic clock', async () => {
    const started = performance.now();
    const lookup = cacheAt(new Map([['late', 300]]), () => performance.now() - started);
    const handler = createAdmissionHandler({ cachesSynced: () => true, lookup, referenceWaitMs: WAIT_MS, metrics: createMetrics() });
    const answered = handler.handle(createReview(['late']));
    vi.setSystemTime(Date.now() + 60_000);
    await vi.advanceTimersByTimeAsync(WAIT_MS + 50);
    const patch = Buffer.from(patchOf(await answered)!, 'base64').toString();
    expect(patch).toContain(`${versionOf('late').uid}/${versionOf('late').resourceVersion}`);
    expect(patch).not.toContain('"absent"');
  });

  it('counts a wait by its result', async () => {
    const metrics = createMetrics();
    const arrivals = new Map<string, Arrival>([['late', 300], ['never', undefined]]);
    const started = Date.now();
    const handler = createAdmissionHandler({ cachesSynced: () => true, lookup: cacheAt(arrivals, () => Date.now() - started), referenceWaitMs: WAIT_MS, metrics });
    const first = handler.handle(createReview(['late']));
    await vi.advanceTimersByTimeAsync(WAIT_MS);
    expect(patchOf(await first)).toBeDefined();
    const second = handler.handle(createReview(['never']));
    await vi.advanceTimersByTimeAsync(WAIT_MS + 50);
    const patch = JSON.parse(Buffer.from(patchOf(await second)!, 'base64').toString()) as { path: string; value: unknown }[];
    expect(JSON.stringify(patch)).toContain('"absent"');
    const text = await metrics.registry.getSingleMetricAsString('rollguard_admission_reference_waits_total');
    expect(text).toContain('rollguard_admission_reference_waits_total{result="appeared"} 1');
    expect(text).toContain('rollguard_admission_reference_waits_total{result="absent"} 1');
  });

  it('does not wait before the caches have synced, nor with --reference-wait=0s', () => {
    const lookup: VersionLookup = () => undefined;
    for (const opts of [{ cachesSynced: () => false, referenceWaitMs: WAIT_MS }, { cachesSynced: () => true, referenceWaitMs: 0 }]) {
      const answered = createAdmissionHandler({ ...opts, lookup, metrics: createMetrics() }).handle(createReview(['a']));
      expect(answered instanceof Promise).toBe(false);
    }
  });
});
