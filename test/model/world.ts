import { execFile } from 'node:child_process';
import { AdmissionregistrationV1Api, AppsV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { controlPlaneBinaries } from '../../src/dev/control-plane.js';
import { registerWebhook, type WebhookRegistration } from '../../src/dev/webhook-registration.js';
import { freePort } from '../env/ports.js';
import { startRollguardProcess, type RollguardProcess } from '../env/rollguard-process.js';
import { serviceAccountCredentials, type ServiceAccountCredentials } from '../env/service-account.js';
import { waitUntil } from '../env/wait.js';
import { Recorder } from './recorder.js';
import { manifest } from './universe.js';
import type { V1StatefulSet } from '@kubernetes/client-node';
import { againOnConflict } from '../env/conflict-retry.js';

// The real things the model checker drives: two namespaces, rollguard as a real process running
// as a ServiceAccount of its own, its webhook, kubectl, and (when the caller owns the control
// plane) the API server's restart.

export interface WorldOptions {
  kc: KubeConfig;
  kubeconfigPath: string;
  debounceMs: number;
  floorMs: number;
  /** Only when the checker owns the control plane (the bench): the integration project's is shared. */
  apiServer?: { stop(): Promise<void>; start(): Promise<void> };
}

export const PROBE = 'probe';

export class World {
  readonly core: CoreV1Api;
  readonly apps: AppsV1Api;
  readonly recorder: Recorder;
  /** resourceVersions of workloads as the checker's own writes stored them */
  readonly checkerWrites = new Set<string>();
  readonly processes: RollguardProcess[] = [];
  rollguard: RollguardProcess | undefined;
  webhookUp = true;
  private webhook: WebhookRegistration | undefined;
  private kubectlPath = '';

  private constructor(
    readonly opts: WorldOptions,
    readonly namespaces: readonly [string, string],
    readonly own: string,
    private readonly account: ServiceAccountCredentials,
    private readonly webhookPort: number,
    private readonly adminPort: number,
    private readonly deadPort: number,
  ) {
    this.core = opts.kc.makeApiClient(CoreV1Api);
    this.apps = opts.kc.makeApiClient(AppsV1Api);
    this.recorder = new Recorder(opts.kc, namespaces);
  }

  static async create(opts: WorldOptions): Promise<World> {
    const core = opts.kc.makeApiClient(CoreV1Api);
    const suffix = Math.random().toString(36).slice(2, 7);
    const namespaces = [`model-a-${suffix}`, `model-b-${suffix}`] as const;
    const own = `model-rg-${suffix}`;
    for (const name of [...namespaces, own]) await core.createNamespace({ body: { metadata: { name } } });
    const account = await serviceAccountCredentials(opts.kc, own, 'rollguard');
    const world = new World(opts, namespaces, own, account, await freePort(), await freePort(), await freePort());
    world.kubectlPath = `${controlPlaneBinaries()}/kubectl`;
    try {
      await world.recorder.start();
      await world.startRollguard();
      world.webhook = await registerWebhook(opts.kc, {
        name: own,
        port: world.webhookPort,
        namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: [...namespaces] }] },
        failurePolicy: 'Ignore',
        timeoutSeconds: 3,
      });
      await world.rollguard!.waitReady();
      await world.createProbe();
    } catch (err) {
      await world.teardown();
      throw err;
    }
    return world;
  }

  get debounceMs(): number {
    return this.opts.debounceMs;
  }

  get floorMs(): number {
    return this.opts.floorMs;
  }

  async startRollguard(): Promise<void> {
    if (this.rollguard) return;
    const proc = await startRollguardProcess({
      name: `model-${this.processes.length}`,
      kubeconfigPath: this.account.kubeconfigPath,
      webhookPort: this.webhookPort,
      adminPort: this.adminPort,
      args: [
        `--namespace=${this.own}`,
        `--watch-namespaces=${this.namespaces.join(',')}`,
        `--webhook-configuration=${this.own}`,
        `--debounce=${this.opts.debounceMs}ms`,
        `--min-restart-interval=${this.opts.floorMs}ms`,
        '--max-restarts-per-second=50',
        // a restarted process is another candidate: a short lease, so it leads soon after a SIGKILL
        '--lease-duration=2s',
        '--renew-deadline=1500ms',
        '--retry-period=250ms',
        '--shutdown-delay=0s',
      ],
    });
    this.processes.push(proc);
    this.rollguard = proc;
    if (this.webhook) await proc.waitReady();
  }

  async killRollguard(): Promise<void> {
    await this.rollguard?.kill();
    this.rollguard = undefined;
  }

  /** The webhook's URL at a port where nothing listens (failurePolicy Ignore lets writes through unmutated), or back. */
  async setWebhook(up: boolean): Promise<void> {
    const api = this.opts.kc.makeApiClient(AdmissionregistrationV1Api);
    const current = await api.readMutatingWebhookConfiguration({ name: this.own });
    const port = up ? this.webhookPort : this.deadPort;
    const ops = (current.webhooks ?? []).map((w, i) => ({ op: 'replace', path: `/webhooks/${i}/clientConfig/url`, value: (w.clientConfig.url ?? '').replace(/:\d+\//, `:${port}/`) }));
    await api.patchMutatingWebhookConfiguration({ name: this.own, body: ops });
    this.webhookUp = up;
  }

  get canRestartApiServer(): boolean {
    return this.opts.apiServer !== undefined;
  }

  async restartApiServer(): Promise<void> {
    if (!this.opts.apiServer) return;
    await this.opts.apiServer.stop();
    await this.opts.apiServer.start();
  }

  /** kubectl as the admin (a user to rollguard); stdout. */
  kubectl(namespace: string, args: string[], input?: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const child = execFile(
        this.kubectlPath,
        [`--kubeconfig=${this.opts.kubeconfigPath}`, '-n', namespace, ...args],
        { encoding: 'utf8', timeout: 30_000, maxBuffer: 16 * 1024 * 1024 },
        (err, stdout, stderr) => (err ? reject(new Error(`kubectl ${args.join(' ')}: ${stderr || err.message}`)) : resolve(stdout)),
      );
      if (input !== undefined) child.stdin?.end(input);
    });
  }

  /** kubectl with `-o json`: the stored object's resourceVersion is the checker's write. */
  async kubectlWrite(namespace: string, args: string[], input?: string): Promise<Record<string, unknown> | undefined> {
    const write = (): Promise<string> => this.kubectl(namespace, [...args, '-o', 'json'], input);
    // a replace is run again on a Conflict, as a user would (test/env/conflict-retry.ts)
    const out = args[0] === 'replace' ? await againOnConflict(write) : await write();
    // a write that changes nothing (set image to the image it has) prints nothing
    if (out.trim() === '') return undefined;
    const obj = JSON.parse(out) as { metadata?: { resourceVersion?: string } };
    this.noteWrite(obj.metadata?.resourceVersion);
    return obj as Record<string, unknown>;
  }

  noteWrite(resourceVersion: string | undefined): void {
    if (resourceVersion) this.checkerWrites.add(resourceVersion);
  }

  /** The probe: a StatefulSet of its own reading a ConfigMap of its own; its rollout of a change made now is a round trip of the loop. */
  private async createProbe(): Promise<void> {
    const ns = this.namespaces[0];
    await this.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: PROBE }, data: { k1: '0' } } });
    const set = manifest('StatefulSet', PROBE, [{ kind: 'ConfigMap', name: PROBE, shape: 'envFrom', key: 'k1', optional: false }], 'registry.example/app:1', 0);
    const created = await this.apps.createNamespacedStatefulSet({ namespace: ns, body: set as V1StatefulSet });
    this.noteWrite(created.metadata?.resourceVersion);
  }

  /** Deletes every set, ConfigMap and Secret of the model (not the probe), and waits until they are gone. */
  async reset(): Promise<void> {
    for (const namespace of this.namespaces) {
      const keep = (name: string | undefined): boolean => name === PROBE || name === 'kube-root-ca.crt';
      const del = async (list: () => Promise<{ items: { metadata?: { name?: string } }[] }>, remove: (name: string) => Promise<unknown>): Promise<void> => {
        for (const item of (await list()).items) if (!keep(item.metadata?.name)) await remove(item.metadata!.name!).catch(() => undefined);
      };
      await del(() => this.apps.listNamespacedStatefulSet({ namespace }), (name) => this.apps.deleteNamespacedStatefulSet({ namespace, name }));
      await del(() => this.apps.listNamespacedDeployment({ namespace }), (name) => this.apps.deleteNamespacedDeployment({ namespace, name }));
      await del(() => this.apps.listNamespacedDaemonSet({ namespace }), (name) => this.apps.deleteNamespacedDaemonSet({ namespace, name }));
      await del(() => this.core.listNamespacedConfigMap({ namespace }), (name) => this.core.deleteNamespacedConfigMap({ namespace, name }));
      await del(() => this.core.listNamespacedSecret({ namespace }), (name) => this.core.deleteNamespacedSecret({ namespace, name }));
      await waitUntil(`the model's objects in ${namespace} gone`, async () => {
        const left = [
          ...(await this.apps.listNamespacedStatefulSet({ namespace })).items,
          ...(await this.apps.listNamespacedDeployment({ namespace })).items,
          ...(await this.apps.listNamespacedDaemonSet({ namespace })).items,
          ...(await this.core.listNamespacedConfigMap({ namespace })).items,
          ...(await this.core.listNamespacedSecret({ namespace })).items,
        ]
          .map((o) => o.metadata?.name)
          .filter((n) => !keep(n));
        return left.length === 0 || left.join(', ');
      });
    }
  }

  async teardown(): Promise<void> {
    this.recorder.stop();
    for (const p of this.processes) await p.kill();
    await this.webhook?.delete();
    await this.account.remove().catch(() => undefined);
    for (const name of [...this.namespaces, this.own]) await this.core.deleteNamespace({ name }).catch(() => undefined);
  }
}
