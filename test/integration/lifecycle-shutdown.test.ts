import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { AdmissionregistrationV1Api, type CoreV1Event } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, statefulSet, testCluster } from '../env/cluster.js';
import { startRollguardProcess, printProcessLogsOnFailure, type RollguardProcess } from '../env/rollguard-process.js';
import { waitFor, waitUntil } from '../env/wait.js';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { ADMISSION_API_VERSION, ADMISSION_REVIEW_KIND } from '../../src/admission/review.js';
import { createCertificateAuthority, createSignedCertificate } from '../../src/tls/certificates.js';
import { endsWithVersion } from '../env/event-text.js';

const SHUTDOWN_DELAY_MS = 2_000;
const SHUTDOWN_TIMEOUT_MS = 15_000;
const LIFECYCLE_ARGS = [
  `--shutdown-delay=${SHUTDOWN_DELAY_MS}ms`,
  `--shutdown-timeout=${SHUTDOWN_TIMEOUT_MS}ms`,
  '--lease-duration=4s',
  '--renew-deadline=3s',
  '--retry-period=500ms',
  '--debounce=0s',
  // nothing to inject in this file: readiness must not wait for a webhook configuration
  '--webhook-configuration=',
];
/** Room for a loaded machine on top of what a replica is allowed. */
const EXIT_SLACK_MS = 5_000;
/** How often readiness is looked at while a replica starts: far more often than a balancer checks. */
const READINESS_POLL_MS = 5;
const CONFIG_MAP = 'app-config';
const SET = 'app';
/** A second set behind a webhook that answers when the test says so: a reconcile can be held mid-PATCH. */
const GATED_CONFIG_MAP = 'gated-config';
const GATED_SET = 'gated';
const GATED_LABEL = 'lifecycle.rollguard.io/gated';
/** The gate answers within seconds; the API server must not give up on it first. */
const GATE_TIMEOUT_SECONDS = 20;
const TEST_CERT_VALIDITY_SECONDS = 3600;
const TEST_KEY_BITS = 2048;

type Status = {
  shutting_down: boolean;
  ready: boolean;
  not_ready_reasons: string[];
  admission: { in_flight: number };
  reconcile: { in_flight: number; queued: number };
  leader: { enabled: boolean; leader: boolean; holder?: string };
  identity: string;
};

type Exit = { code: number | null; signal: NodeJS.Signals | null };

/** Resolves with the exit of `proc`; rejects if it has not exited by `timeoutMs`. */
async function exitOf(proc: RollguardProcess, timeoutMs: number): Promise<Exit> {
  let exit: Exit | undefined;
  void proc.exited.then((e) => (exit = e));
  return waitFor(`${proc.name} to exit`, () => exit, { timeoutMs, intervalMs: 20 });
}

/** The index of the first log line whose msg matches, or -1. */
function logIndex(proc: RollguardProcess, match: (line: Record<string, unknown>) => boolean): number {
  return proc.logLines().findIndex(match);
}

function review(uid: string, namespace: string): string {
  return JSON.stringify({
    apiVersion: ADMISSION_API_VERSION,
    kind: ADMISSION_REVIEW_KIND,
    request: {
      uid,
      kind: { group: 'apps', version: 'v1', kind: 'StatefulSet' },
      resource: { group: 'apps', version: 'v1', resource: 'statefulsets' },
      operation: 'CREATE',
      namespace,
      name: 'held',
      userInfo: { username: 'test' },
      object: statefulSet('held', { labels: { [ENABLED_LABEL]: 'true' } }),
    },
  });
}

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Parses one HTTP/1.1 response read up to the close of the connection. */
function parseResponse(raw: string): RawResponse {
  const [head = '', body = ''] = raw.split('\r\n\r\n', 2);
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body };
}

/**
 * A review sent up to half its body: the server has the request (it is in flight) and waits for
 * the rest, as it would for a slow API server connection. finish() sends the rest and reads the answer.
 */
async function heldReview(port: number, namespace: string): Promise<{ finish(): Promise<RawResponse>; socket: tls.TLSSocket }> {
  const body = review('held-review', namespace);
  const half = Math.floor(body.length / 2);
  // only the lifecycle is under test here; the certificate chain is checked in webhook-tls.test.ts
  const socket = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] });
  await new Promise<void>((resolve, reject) => {
    socket.once('secureConnect', resolve);
    socket.once('error', reject);
  });
  let raw = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => (raw += chunk));
  const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(
    `POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, half)}`,
  );
  return {
    socket,
    async finish() {
      socket.write(body.slice(half));
      await ended;
      return parseResponse(raw);
    },
  };
}

/** One complete review on a fresh connection. */
function sendReview(port: number, namespace: string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port, path: '/mutate', method: 'POST', rejectUnauthorized: false, headers: { 'content-type': 'application/json' }, agent: false },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers as Record<string, string>, body }));
      },
    );
    req.on('error', reject);
    req.end(review('fresh-review', namespace));
  });
}

/** An admission webhook that allows everything, but while closed keeps each review waiting until opened. */
interface Gate {
  port: number;
  caPem: string;
  close(): void;
  open(): void;
  waiting(): number;
  /** reviews answered so far */
  answered(): number;
  stop(): Promise<void>;
}

async function startGate(): Promise<Gate> {
  const common = { validitySeconds: TEST_CERT_VALIDITY_SECONDS, keyBits: TEST_KEY_BITS };
  const ca = await createCertificateAuthority({ ...common, commonName: 'lifecycle-gate-ca' });
  const leaf = await createSignedCertificate(ca, { ...common, commonName: 'lifecycle-gate', usage: 'server', ipAddresses: ['127.0.0.1'] });
  let closed = false;
  let answered = 0;
  const waiting: (() => void)[] = [];
  const server = https.createServer({ key: leaf.keyPem, cert: leaf.certPem }, (req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const uid = (JSON.parse(body) as { request: { uid: string } }).request.uid;
      const answer = (): void => {
        answered++;
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({ apiVersion: ADMISSION_API_VERSION, kind: ADMISSION_REVIEW_KIND, response: { uid, allowed: true } }),
        );
      };
      if (closed) waiting.push(answer);
      else answer();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    caPem: ca.certPem,
    close: () => (closed = true),
    open() {
      closed = false;
      for (const answer of waiting.splice(0)) answer();
    },
    waiting: () => waiting.length,
    answered: () => answered,
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('shutdown of one replica', () => {
  const { kc, core, apps, kubeconfigPath } = testCluster();
  const admissionApi = kc.makeApiClient(AdmissionregistrationV1Api);
  const gateConfiguration = `lifecycle-gate-${Math.random().toString(36).slice(2, 8)}`;
  let gate: Gate | undefined;
  let rollguardNamespace: string;
  let workloads: string;
  const everyProcess: RollguardProcess[] = [];

  async function start(name: string, extra: string[] = []): Promise<RollguardProcess> {
    const proc = await startRollguardProcess({
      name,
      kubeconfigPath,
      args: [
        `--namespace=${rollguardNamespace}`,
        `--watch-namespaces=${workloads}`,
        '--tls-secret=shutdown-tls',
        '--lease-name=shutdown-leader',
        ...LIFECYCLE_ARGS,
        ...extra,
      ],
    });
    everyProcess.push(proc);
    return proc;
  }

  const status = async (proc: RollguardProcess): Promise<Status> => (await proc.status()) as unknown as Status;

  const templateAnnotation = async (set = SET, configMap = CONFIG_MAP): Promise<string | undefined> =>
    (await apps.readNamespacedStatefulSet({ name: set, namespace: workloads })).spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', configMap)];

  /** ConfigChanged Events for the set that name `resourceVersion` as the new version, counting repeats. */
  async function configChangedTo(resourceVersion: string, set = SET): Promise<number> {
    const events = await core.listNamespacedEvent({ namespace: workloads, fieldSelector: `involvedObject.name=${set},reason=ConfigChanged` });
    return events.items
      .filter((e: CoreV1Event) => endsWithVersion(e.message, resourceVersion))
      .reduce((sum, e) => sum + (e.count ?? 1), 0);
  }

  async function changeConfig(value: string, configMap = CONFIG_MAP): Promise<string> {
    const cm = await core.patchNamespacedConfigMap({ name: configMap, namespace: workloads, body: [{ op: 'replace', path: '/data/v', value }] });
    return cm.metadata!.resourceVersion!;
  }

  const isPatchOf = (set: string, resourceVersion: string) => (l: Record<string, unknown>): boolean =>
    typeof l.msg === 'string' && l.msg.startsWith(`StatefulSet ${workloads}/${set} restarts:`) && JSON.stringify(l).includes(`/${resourceVersion}"`);

  async function idle(proc: RollguardProcess): Promise<void> {
    await waitUntil(`${proc.name} to lead, through its first pass`, async () => {
      const s = await status(proc);
      const passed = proc.logLines().some((l) => l.msg === 'caches synced; reconciling every labelled StatefulSet, Deployment and DaemonSet');
      return (s.leader.leader && passed && s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify({ passed, ...s.reconcile });
    });
  }

  beforeAll(async () => {
    rollguardNamespace = await createNamespace(core, 'lifecycle-shutdown-rg');
    workloads = await createNamespace(core, 'lifecycle-shutdown-wl');
    for (const [name, configMap, labels] of [
      [SET, CONFIG_MAP, {}],
      [GATED_SET, GATED_CONFIG_MAP, { [GATED_LABEL]: 'true' }],
    ] as const) {
      await core.createNamespacedConfigMap({ namespace: workloads, body: { metadata: { name: configMap }, data: { v: '0' } } });
      const set = statefulSet(name, { replicas: 0, labels: { [ENABLED_LABEL]: 'true', ...labels } });
      set.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: configMap } }];
      await apps.createNamespacedStatefulSet({ namespace: workloads, body: set });
    }
  });

  afterAll(async () => {
    for (const proc of everyProcess) await proc.kill();
    await admissionApi.deleteMutatingWebhookConfiguration({ name: gateConfiguration }).catch(() => undefined);
    await gate?.stop();
    for (const ns of [workloads, rollguardNamespace]) if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });

  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    printProcessLogsOnFailure(everyProcess);
  });

  it('reports each phase in /status, answers in-flight and new reviews while draining, reconciles on as leader, and exits 0', async () => {
    const proc = await start('phases');

    // starting: whenever /readyz says yes, the webhook port must already take connections
    await waitFor(
      'phases /readyz to answer 200',
      async () => {
        const res = await fetch(`${proc.adminUrl}/readyz`, { signal: AbortSignal.timeout(2_000) });
        if (res.status !== 200) throw new Error(`readyz ${res.status}: ${await res.text()}`);
        return true;
      },
      { timeoutMs: 60_000, intervalMs: READINESS_POLL_MS },
    );
    await new Promise<void>((resolve, reject) => {
      const socket = net.connect(proc.webhookPort, '127.0.0.1', () => {
        socket.destroy();
        resolve();
      });
      socket.on('error', (err) => reject(new Error(`ready, but the webhook port does not take connections: ${err.message}`)));
    });

    // ready: the only replica leads once it holds the lease
    await waitUntil('phases to lead', async () => (await status(proc)).leader.leader || JSON.stringify((await status(proc)).leader));
    const ready = await status(proc);
    expect(ready).toMatchObject({ shutting_down: false, ready: true, not_ready_reasons: [], admission: { in_flight: 0 } });
    expect(ready.leader).toEqual({ enabled: true, leader: true, holder: ready.identity });
    const initial = await waitFor('the set annotated', async () => {
      const value = await templateAnnotation();
      return value && value !== 'absent' ? value : undefined;
    });

    const held = await heldReview(proc.webhookPort, workloads);
    await waitUntil('the held review in flight', async () => (await status(proc)).admission.in_flight >= 1 || JSON.stringify((await status(proc)).admission));

    const signalledAt = Date.now();
    proc.child.kill('SIGTERM');

    // draining: not ready, still answering, the held review still counted
    const draining = await waitFor('phases to report shutting down', async () => {
      const s = await status(proc);
      return s.shutting_down ? s : undefined;
    });
    expect(draining.ready).toBe(false);
    expect(draining.not_ready_reasons).toContain('shutting down');
    expect(draining.admission.in_flight).toBeGreaterThanOrEqual(1);
    const readyz = await fetch(`${proc.adminUrl}/readyz`);
    expect(readyz.status).toBe(503);
    // a review arriving now, on a fresh connection, is answered, and told to reconnect elsewhere
    // (once the delay is over the port is closed, so an answer means it came during the delay)
    const fresh = await sendReview(proc.webhookPort, workloads);
    expect(fresh.status).toBe(200);
    expect(fresh.headers.connection).toBe('close');
    // it still leads while it drains (and while the held review keeps its webhook from closing,
    // the shutdown cannot get to the lease): a change now is rolled by it
    const changedTo = await changeConfig('1');
    await waitUntil('the draining leader to roll the change', async () => (await templateAnnotation())?.endsWith(`/${changedTo}`) || `annotation ${await templateAnnotation()}`);

    // the review that was in flight when SIGTERM came is answered, with Connection: close
    const answer = await held.finish();
    expect(answer.status).toBe(200);
    expect(answer.headers.connection).toBe('close');
    expect((JSON.parse(answer.body) as { response: { uid: string; allowed: boolean } }).response).toMatchObject({ uid: 'held-review', allowed: true });

    // exits 0, after the delay and well before the timeout
    const exit = await exitOf(proc, SHUTDOWN_TIMEOUT_MS + EXIT_SLACK_MS);
    const exitedAfterMs = Date.now() - signalledAt;
    expect(exit).toEqual({ code: 0, signal: null });
    expect(exitedAfterMs).toBeGreaterThanOrEqual(SHUTDOWN_DELAY_MS);
    expect(exitedAfterMs).toBeLessThan(SHUTDOWN_TIMEOUT_MS);
    await expect(proc.status()).rejects.toThrow();

    // the change was reconciled by the draining replica itself, once, and the lease released after
    const value = await templateAnnotation();
    expect(value).not.toBe(initial);
    expect(value).toMatch(new RegExp(`/${changedTo}$`));
    expect(await configChangedTo(changedTo)).toBe(1);
    const signalLine = logIndex(proc, (l) => l.msg === 'shutdown: signal received');
    const patchLine = logIndex(proc, isPatchOf(SET, changedTo));
    const releaseLine = logIndex(proc, (l) => l.msg === 'leader election: released the lease');
    const doneLine = logIndex(proc, (l) => l.msg === 'shutdown: done');
    expect(signalLine).toBeGreaterThanOrEqual(0);
    expect(patchLine).toBeGreaterThan(signalLine);
    expect(releaseLine).toBeGreaterThan(patchLine);
    expect(doneLine).toBeGreaterThan(releaseLine);
  });

  it('finishes a reconcile that is in flight when SIGTERM comes, then releases the lease and exits 0', async () => {
    const proc = await start('in-flight', ['--shutdown-delay=0s']);
    await proc.waitReady();
    await idle(proc);
    gate = await startGate();
    await admissionApi.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: gateConfiguration },
        webhooks: [
          {
            name: `${gateConfiguration}.rollguard.io`,
            clientConfig: { url: `https://127.0.0.1:${gate.port}/mutate`, caBundle: Buffer.from(gate.caPem).toString('base64') },
            failurePolicy: 'Fail',
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': workloads } },
            objectSelector: { matchLabels: { [GATED_LABEL]: 'true' } },
            rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['statefulsets'] }],
            sideEffects: 'None',
            admissionReviewVersions: ['v1'],
            timeoutSeconds: GATE_TIMEOUT_SECONDS,
          },
        ],
      },
    });
    // the API server calls a new webhook configuration only once it has loaded it
    await waitUntil('the gate to be called', async () => {
      await apps.patchNamespacedStatefulSet({ name: GATED_SET, namespace: workloads, body: [{ op: 'add', path: '/metadata/labels/probe', value: String(Date.now()) }] });
      return gate!.answered() > 0 || 'not called yet';
    });

    // the reconcile of a change is held inside its PATCH, and SIGTERM comes then
    gate.close();
    const changedTo = await changeConfig('1', GATED_CONFIG_MAP);
    await waitUntil('the reconcile held in its PATCH', async () => {
      const s = await status(proc);
      return (s.reconcile.in_flight === 1 && gate!.waiting() === 1) || `in flight ${s.reconcile.in_flight}, held at the gate ${gate!.waiting()}`;
    });
    proc.child.kill('SIGTERM');
    await waitUntil('the shutdown to wait for the reconcile workers', () =>
      logIndex(proc, (l) => l.runnable === 'leader-election' && l.msg === 'stopping') >= 0,
    );
    expect((await status(proc)).reconcile.in_flight).toBe(1);
    gate.open();

    const exit = await exitOf(proc, SHUTDOWN_TIMEOUT_MS + EXIT_SLACK_MS);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(await templateAnnotation(GATED_SET, GATED_CONFIG_MAP)).toMatch(new RegExp(`/${changedTo}$`));
    expect(await configChangedTo(changedTo, GATED_SET)).toBe(1);
    const signalLine = logIndex(proc, (l) => l.msg === 'shutdown: signal received');
    const patchLine = logIndex(proc, isPatchOf(GATED_SET, changedTo));
    const releaseLine = logIndex(proc, (l) => l.msg === 'leader election: released the lease');
    const doneLine = logIndex(proc, (l) => l.msg === 'shutdown: done');
    expect(signalLine).toBeGreaterThanOrEqual(0);
    expect(patchLine).toBeGreaterThan(signalLine);
    expect(releaseLine).toBeGreaterThan(patchLine);
    expect(doneLine).toBeGreaterThan(releaseLine);
  });

  it('loses no change when stopped at once after it: either the stopping replica patched it, or the next one does, once', async () => {
    const first = await start('no-delay-1', ['--shutdown-delay=0s']);
    await first.waitReady();
    await waitUntil('no-delay-1 to lead', async () => (await status(first)).leader.leader);
    await waitUntil('no-delay-1 idle', async () => {
      const s = await status(first);
      return (s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s.reconcile);
    });
    const changedTo = await changeConfig('2');
    first.child.kill('SIGTERM');
    expect(await exitOf(first, SHUTDOWN_TIMEOUT_MS + EXIT_SLACK_MS)).toEqual({ code: 0, signal: null });
    const patchedByFirst = (await templateAnnotation())?.endsWith(`/${changedTo}`) ?? false;

    const second = await start('no-delay-2');
    await second.waitReady();
    await waitUntil('the set on the new version', async () => (await templateAnnotation())?.endsWith(`/${changedTo}`) || `annotation ${await templateAnnotation()}`);
    await waitUntil('no-delay-2 idle', async () => {
      const s = await status(second);
      return (s.leader.leader && s.reconcile.queued === 0 && s.reconcile.in_flight === 0) || JSON.stringify(s);
    });
    expect(await configChangedTo(changedTo)).toBe(1);
    const patchedBySecond = logIndex(second, (l) => JSON.stringify(l).includes(`/${changedTo}`) && String(l.msg).startsWith('StatefulSet')) >= 0;
    // exactly one of them wrote it
    expect(patchedByFirst !== patchedBySecond).toBe(true);
    console.log(`[shutdown] the change made just before SIGTERM was patched by ${patchedByFirst ? 'the stopping replica' : 'the next replica'}`);
    second.child.kill('SIGTERM');
    expect(await exitOf(second, SHUTDOWN_TIMEOUT_MS + EXIT_SLACK_MS)).toEqual({ code: 0, signal: null });
  });

  it('exits at once on a second SIGTERM, long before the drain delay is over', async () => {
    const longDelayMs = 10_000;
    const proc = await start('second-signal', [`--shutdown-delay=${longDelayMs}ms`]);
    await proc.waitReady();
    proc.child.kill('SIGTERM');
    await waitUntil('the first signal handled', () => logIndex(proc, (l) => l.msg === 'shutdown: signal received') >= 0);
    const secondAt = Date.now();
    proc.child.kill('SIGTERM');
    const exit = await exitOf(proc, longDelayMs);
    expect(Date.now() - secondAt).toBeLessThan(longDelayMs / 4);
    expect(exit.code).not.toBe(0);
    expect(logIndex(proc, (l) => l.msg === 'second signal: exiting at once')).toBeGreaterThanOrEqual(0);
  });

  it('exits by --shutdown-timeout when an in-flight review never completes', async () => {
    const delayMs = 1_000;
    const timeoutMs = 3_000;
    const proc = await start('stuck', [`--shutdown-delay=${delayMs}ms`, `--shutdown-timeout=${timeoutMs}ms`]);
    await proc.waitReady();
    const held = await heldReview(proc.webhookPort, workloads);
    try {
      await waitUntil('the held review in flight', async () => (await status(proc)).admission.in_flight >= 1);
      const signalledAt = Date.now();
      proc.child.kill('SIGTERM');
      const exit = await exitOf(proc, timeoutMs + EXIT_SLACK_MS);
      expect(exit.code).toBe(1);
      expect(Date.now() - signalledAt).toBeGreaterThanOrEqual(timeoutMs);
      expect(logIndex(proc, (l) => l.msg === 'shutdown: timed out; exiting with work unfinished')).toBeGreaterThanOrEqual(0);
    } finally {
      held.socket.destroy();
    }
  });
});
