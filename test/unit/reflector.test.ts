import { Readable } from 'node:stream';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { waitUntil } from '../env/wait.js';
import { MetadataStore, decodeMetadata, type MetadataItem } from '../../src/kube/metadata-cache.js';
import { ApiStatusError, type RawGet } from '../../src/kube/raw-api.js';
import { Reflector, resourceUrlPath, retryDelayMs, watchIdleLimitMs, type ListWatchClient, type ReflectorOptions } from '../../src/kube/reflector.js';

type ListAnswer = { rv: string; items: unknown[]; continue?: string } | Error;
/** Watch lines to send before the server ends the watch, lines after which the stream goes silent, or an error. */
type WatchAnswer = unknown[] | { silentAfter: unknown[] } | Error;

const obj = (name: string, rv: string): unknown => ({ metadata: { namespace: 'ns', name, uid: `uid-${name}`, resourceVersion: rv } });
const event = (type: string, object: unknown): unknown => ({ type, object });

/** Plays the API server from a script; once the script is over, a watch stays open until aborted. */
class ScriptedApi implements ListWatchClient {
  readonly requests: { kind: 'list' | 'watch'; query: URLSearchParams; accept: string }[] = [];

  constructor(
    private readonly lists: ListAnswer[],
    private readonly watches: WatchAnswer[],
  ) {}

  async getJson(req: RawGet): Promise<unknown> {
    this.requests.push({ kind: 'list', query: new URL(req.path, 'http://x').searchParams, accept: req.accept });
    const answer = this.lists.shift();
    if (!answer) throw new Error('no more lists in the script');
    if (answer instanceof Error) throw answer;
    return { metadata: { resourceVersion: answer.rv, continue: answer.continue }, items: answer.items };
  }

  async open(req: RawGet): Promise<Readable> {
    this.requests.push({ kind: 'watch', query: new URL(req.path, 'http://x').searchParams, accept: req.accept });
    const answer = this.watches.shift();
    if (answer instanceof Error) throw answer;
    if (Array.isArray(answer)) return Readable.from(answer.map((line) => `${JSON.stringify(line)}\n`));
    const open = new Readable({ read() {} });
    for (const line of answer?.silentAfter ?? []) open.push(`${JSON.stringify(line)}\n`);
    req.signal?.addEventListener('abort', () => open.destroy(Object.assign(new Error('aborted'), { name: 'AbortError' })), { once: true });
    return open;
  }
}

function reflectorOver(
  api: ScriptedApi,
  namespace?: string,
  overrides: Partial<ReflectorOptions<MetadataItem>> = {},
): { reflector: Reflector<MetadataItem>; store: MetadataStore; stop: () => Promise<void> } {
  const store = new MetadataStore();
  const reflector = new Reflector<MetadataItem>({
    api,
    resource: { group: '', version: 'v1', plural: 'configmaps' },
    namespace,
    accept: { list: 'list-accept', watch: 'watch-accept' },
    decode: (raw) => decodeMetadata(raw, 'ignore'),
    store,
    logger: pino({ level: 'silent' }),
    retryInitialMs: 1,
    retryMaxMs: 4,
    ...overrides,
  });
  const abort = new AbortController();
  reflector.start(abort.signal);
  return {
    reflector,
    store,
    stop: async () => {
      abort.abort();
      await reflector.stopped();
    },
  };
}

describe('Reflector', () => {
  let stop: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await stop?.();
    stop = undefined;
  });

  it('lists page by page, then watches from the list with bookmarks, and resumes from the last resourceVersion', async () => {
    const api = new ScriptedApi(
      [
        { rv: '10', items: [obj('a', '3')], continue: 'page-2' },
        { rv: '10', items: [obj('b', '4')] },
      ],
      [[event('ADDED', obj('c', '11')), event('MODIFIED', obj('a', '12')), event('BOOKMARK', { metadata: { resourceVersion: '15' } })]],
    );
    const r = reflectorOver(api, 'ns');
    stop = r.stop;
    await vi.waitFor(() => expect(api.requests).toHaveLength(4), { timeout: 2_000 });
    const [first, second, watch, resumed] = api.requests;
    expect(first?.query.get('limit')).toBe('500');
    expect(first?.query.has('continue')).toBe(false);
    expect(first?.accept).toBe('list-accept');
    expect(second?.query.get('continue')).toBe('page-2');
    expect(watch?.kind).toBe('watch');
    expect(watch?.accept).toBe('watch-accept');
    expect(Object.fromEntries(watch!.query)).toMatchObject({ watch: 'true', allowWatchBookmarks: 'true', resourceVersion: '10' });
    expect(Number(watch?.query.get('timeoutSeconds'))).toBeGreaterThanOrEqual(300);
    expect(resumed?.kind).toBe('watch');
    expect(resumed?.query.get('resourceVersion')).toBe('15');
    expect(r.reflector.synced()).toBe(true);
    expect(r.reflector.resourceVersion()).toBe('15');
    expect(r.store.get('ns', 'a')?.resourceVersion).toBe('12');
    expect(r.store.get('ns', 'b')?.resourceVersion).toBe('4');
    expect(r.store.get('ns', 'c')?.resourceVersion).toBe('11');
  });

  it('relists when the watch says 410 Gone, and the store tells what changed meanwhile', async () => {
    const api = new ScriptedApi(
      [
        { rv: '10', items: [obj('a', '3'), obj('b', '4')] },
        { rv: '50', items: [obj('a', '40')] },
      ],
      [[event('ERROR', { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version: 10 (45)' })]],
    );
    const r = reflectorOver(api);
    stop = r.stop;
    const changes: string[] = [];
    r.store.onEvent((e) => changes.push(`${e.type} ${e.name}`));
    await vi.waitFor(() => expect(api.requests.map((q) => q.kind)).toEqual(['list', 'watch', 'list', 'watch']), { timeout: 2_000 });
    expect(api.requests[2]?.query.has('resourceVersion')).toBe(false);
    expect(api.requests[3]?.query.get('resourceVersion')).toBe('50');
    expect(changes).toEqual(['added a', 'added b', 'deleted b', 'updated a']);
    expect(r.store.size()).toBe(1);
  });

  it('relists after an HTTP 410 to the watch request', async () => {
    const api = new ScriptedApi(
      [{ rv: '10', items: [] }, { rv: '20', items: [obj('x', '19')] }],
      [new ApiStatusError('GET', '/api/v1/configmaps', 410, 'Expired', 'too old')],
    );
    const r = reflectorOver(api);
    stop = r.stop;
    await vi.waitFor(() => expect(r.store.get('ns', 'x')).toBeDefined(), { timeout: 2_000 });
    expect(r.reflector.resourceVersion()).toBe('20');
  });

  it('retries a failing list and a failing watch, and is not synced until a list got through', async () => {
    const api = new ScriptedApi(
      [new Error('connect ECONNREFUSED'), new ApiStatusError('GET', '/api/v1/configmaps', 503, 'ServiceUnavailable', ''), { rv: '7', items: [obj('a', '7')] }],
      [new Error('socket hang up'), [event('ADDED', obj('b', '8'))]],
    );
    const r = reflectorOver(api);
    stop = r.stop;
    await vi.waitFor(() => expect(r.store.get('ns', 'b')).toBeDefined(), { timeout: 2_000 });
    expect(api.requests.map((q) => q.kind).slice(0, 5)).toEqual(['list', 'list', 'list', 'watch', 'watch']);
    // The failed watch is resumed from the list, not relisted.
    expect(api.requests[4]?.query.get('resourceVersion')).toBe('7');
    expect(r.reflector.synced()).toBe(true);
  });

  it('skips an object it cannot read instead of replaying it forever', async () => {
    const api = new ScriptedApi([{ rv: '1', items: [{ metadata: { name: 'broken' } }, obj('ok', '1')] }], [[event('ADDED', { metadata: {} }), event('ADDED', obj('later', '3'))]]);
    const r = reflectorOver(api);
    stop = r.stop;
    await vi.waitFor(() => expect(r.store.get('ns', 'later')).toBeDefined(), { timeout: 2_000 });
    expect(r.store.size()).toBe(2);
  });

  it('narrows list and watch by the field and label selectors it is given', async () => {
    const api = new ScriptedApi([{ rv: '10', items: [obj('tls', '9')] }], []);
    const r = reflectorOver(api, 'ns', { fieldSelector: 'metadata.name=tls', labelSelector: 'app=rollguard' });
    stop = r.stop;
    await vi.waitFor(() => expect(api.requests.map((q) => q.kind)).toEqual(['list', 'watch']), { timeout: 2_000 });
    for (const { query } of api.requests) {
      expect(query.get('fieldSelector')).toBe('metadata.name=tls');
      expect(query.get('labelSelector')).toBe('app=rollguard');
    }
  });

  it('asks for a fixed watch timeout when given one, and reconnects a watch silent past it and the slack', async () => {
    const api = new ScriptedApi([{ rv: '10', items: [] }], []);
    const r = reflectorOver(api, undefined, { watchTimeoutSeconds: 1, watchIdleSlackMs: 0 });
    stop = r.stop;
    await vi.waitFor(() => expect(api.requests).toHaveLength(2), { timeout: 2_000 });
    const firstWatchAt = Date.now();
    expect(api.requests[1]?.query.get('timeoutSeconds')).toBe('1');
    await vi.waitFor(() => expect(api.requests).toHaveLength(3), { timeout: 3_000 });
    expect(Date.now() - firstWatchAt).toBeGreaterThanOrEqual(900);
    expect(api.requests[2]?.kind).toBe('watch');
    expect(api.requests[2]?.query.get('resourceVersion')).toBe('10');
  });

  it('tells the last error while it cannot list', async () => {
    const api = new ScriptedApi([new ApiStatusError('GET', '/api/v1/configmaps', 403, 'Forbidden', 'configmaps is forbidden')], []);
    const r = reflectorOver(api, undefined, { retryInitialMs: 60_000, retryMaxMs: 60_000 });
    stop = r.stop;
    expect(r.reflector.lastError()).toBeUndefined();
    await vi.waitFor(() => expect(r.reflector.lastError()).toBeInstanceOf(ApiStatusError), { timeout: 2_000 });
    expect(String(r.reflector.lastError())).toMatch(/HTTP 403 Forbidden: configmaps is forbidden/);
    expect(r.reflector.synced()).toBe(false);
  });

  it('stops at once when its signal aborts, also while backing off', async () => {
    const api = new ScriptedApi([new Error('down')], []);
    const store = new MetadataStore();
    const reflector = new Reflector<MetadataItem>({
      api,
      resource: { group: '', version: 'v1', plural: 'configmaps' },
      accept: { list: 'l', watch: 'w' },
      decode: (raw) => decodeMetadata(raw, 'ignore'),
      store,
      logger: pino({ level: 'silent' }),
      retryInitialMs: 60_000,
    });
    const abort = new AbortController();
    reflector.start(abort.signal);
    await vi.waitFor(() => expect(api.requests).toHaveLength(1), { timeout: 2_000 });
    const started = Date.now();
    abort.abort();
    await reflector.stopped();
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(reflector.synced()).toBe(false);
  });
});

describe('retryDelayMs', () => {
  it('doubles per failure up to the cap, with up to 20% jitter', () => {
    const none = (): number => 0;
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((n) => retryDelayMs(n, 800, 30_000, none))).toEqual([800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    expect(retryDelayMs(1, 800, 30_000, () => 1)).toBe(960);
  });
});

describe('resourceUrlPath', () => {
  it('builds core and group paths, cluster-wide and namespaced', () => {
    expect(resourceUrlPath({ group: '', version: 'v1', plural: 'secrets' }, undefined)).toBe('/api/v1/secrets');
    expect(resourceUrlPath({ group: 'apps', version: 'v1', plural: 'statefulsets' }, 'prod')).toBe('/apis/apps/v1/namespaces/prod/statefulsets');
  });
});

describe('watchIdleLimitMs', () => {
  it.each([
    { name: 'a server that sends bookmarks: two intervals', bookmarksSeen: true, want: 120_000 },
    { name: 'no bookmark seen yet: until the server ends the watch, plus slack', bookmarksSeen: false, want: 330_000 },
  ])('$name', ({ bookmarksSeen, want }) => {
    expect(watchIdleLimitMs({ bookmarksSeen, timeoutSeconds: 300, slackMs: 30_000, idleTimeoutMs: 120_000 })).toBe(want);
  });
});

describe('Reflector: a watch that stops delivering', () => {
  it('is restarted once it is silent for the idle timeout after a bookmark, and resumes from the bookmark', async () => {
    const bookmark = event('BOOKMARK', { metadata: { resourceVersion: '7' } });
    const api = new ScriptedApi([{ rv: '5', items: [obj('a', '5')] }], [{ silentAfter: [bookmark] }, { silentAfter: [] }]);
    const { reflector, stop } = reflectorOver(api, undefined, { watchIdleTimeoutMs: 50, watchTimeoutSeconds: 300 });
    try {
      const watches = () => api.requests.filter((r) => r.kind === 'watch');
      await waitUntil('a second watch', () => watches().length >= 2 || `${watches().length} watch(es)`, { timeoutMs: 5_000 });
      expect(watches()[1]!.query.get('resourceVersion')).toBe('7');
      expect(api.requests.filter((r) => r.kind === 'list')).toHaveLength(1);
      expect(reflector.lastEventTime()).toBeGreaterThan(0);
    } finally {
      await stop();
    }
  });
});

