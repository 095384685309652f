import type { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { ENABLED_LABEL, annotationKey } from '../../src/restarter/annotations.js';
import { statefulSet } from './cluster.js';
import { waitUntil } from './wait.js';

/**
 * Opted-in StatefulSets that each reference one ConfigMap through envFrom, in a namespace that
 * exists already; replicas 0, so no kubelet is needed. `configMapOf`: set name → ConfigMap name.
 */
export class ConfigWorkloads {
  constructor(
    private readonly core: CoreV1Api,
    private readonly apps: AppsV1Api,
    readonly namespace: string,
    readonly configMapOf: Record<string, string>,
  ) {}

  get sets(): string[] {
    return Object.keys(this.configMapOf);
  }

  async create(): Promise<void> {
    const { core, apps, namespace } = this;
    for (const cm of new Set(Object.values(this.configMapOf))) {
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: cm }, data: { v: '0' } } });
    }
    for (const [set, cm] of Object.entries(this.configMapOf)) {
      const body = statefulSet(set, { replicas: 0, labels: { [ENABLED_LABEL]: 'true' } });
      body.spec!.template.spec!.containers[0]!.envFrom = [{ configMapRef: { name: cm } }];
      await apps.createNamespacedStatefulSet({ namespace, body });
    }
  }

  /** Changes the ConfigMap; returns its new `uid/resourceVersion`, the value rollguard writes. */
  async change(cm: string, value: string): Promise<string> {
    const meta = (await this.core.patchNamespacedConfigMap({ name: cm, namespace: this.namespace, body: [{ op: 'replace', path: '/data/v', value }] })).metadata!;
    return `${meta.uid}/${meta.resourceVersion}`;
  }

  async currentVersion(cm: string): Promise<string> {
    const meta = (await this.core.readNamespacedConfigMap({ name: cm, namespace: this.namespace })).metadata!;
    return `${meta.uid}/${meta.resourceVersion}`;
  }

  async annotatedVersion(set: string): Promise<string | undefined> {
    const s = await this.apps.readNamespacedStatefulSet({ name: set, namespace: this.namespace });
    return s.spec?.template.metadata?.annotations?.[annotationKey('ConfigMap', this.configMapOf[set]!)];
  }

  async waitForVersion(set: string, version: string, timeoutMs = 60_000): Promise<void> {
    await waitUntil(`${this.namespace}/${set} annotated with ${version}`, async () => {
      const v = await this.annotatedVersion(set);
      return v === version || `${v}`;
    }, { timeoutMs, intervalMs: 100 });
  }

  /** Every set annotated with its ConfigMap's current version (rollguard's first pass). */
  async waitAnnotated(): Promise<void> {
    for (const [set, cm] of Object.entries(this.configMapOf)) await this.waitForVersion(set, await this.currentVersion(cm));
  }
}
