import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApiextensionsV1Api, KubernetesObjectApi, loadAllYaml, loadYaml, type KubernetesObject, type V1CustomResourceDefinition } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNamespace, printControlPlaneLogsOnFailure, testCluster } from '../env/cluster.js';
import { startRollguardFixture, type RollguardFixture } from '../env/rollguard-fixture.js';
import { printProcessLogsOnFailure } from '../env/rollguard-process.js';
import { goTool, prometheusOperatorCrds, toolOutput } from '../env/tools.js';
import { waitUntil } from '../env/wait.js';

// The alerts (each with a firing and a quiet promtool case), the PrometheusRule, ServiceMonitor,
// PodMonitor and dashboard the chart renders, validated by the real API server with the
// Prometheus Operator's CRDs installed, and every metric they name checked against what
// rollguard's real /metrics exports.

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = path.join(ROOT, 'deploy/helm/rollguard');
const ALERTS = path.join(CHART, 'files/alerts.yaml');
const DASHBOARD = path.join(CHART, 'files/dashboard.json');
const ALERT_TESTS = path.join(ROOT, 'test/prometheus/alerts.test.yaml');
const CRDS = ['monitoring.coreos.com_prometheusrules.yaml', 'monitoring.coreos.com_servicemonitors.yaml', 'monitoring.coreos.com_podmonitors.yaml'];
/** Metrics of the Kubernetes API server the alerts and the dashboard may name besides rollguard's own. */
const API_SERVER_METRICS = ['apiserver_admission_webhook_fail_open_count'];

interface RuleGroups {
  groups: { name: string; rules: { alert?: string; expr: string; for?: string; labels?: Record<string, string> }[] }[];
}
interface AlertTests {
  tests: { name: string; alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[];
}
interface Dashboard {
  panels: { title: string; targets: { expr: string }[] }[];
}

const PROMQL_WORDS = new Set([
  'sum', 'min', 'max', 'avg', 'count', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'offset', 'bool',
  'rate', 'increase', 'changes', 'absent', 'time', 'histogram_quantile', 'le',
]);

/** The metric names of a PromQL expression: its identifiers, less strings, label matchers, ranges, grouping labels and PromQL's own words. */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = (bare.match(/\b[a-zA-Z_:][a-zA-Z0-9_:]*\b/g) ?? []).filter((w) => !PROMQL_WORDS.has(w) && !/^\d/.test(w));
  return [...new Set(names)];
}

describe('alerts, scraping and the dashboard', () => {
  const { kc, core } = testCluster();
  const kapi = KubernetesObjectApi.makeApiClient(kc);
  const crdApi = kc.makeApiClient(ApiextensionsV1Api);
  const rules = loadYaml<RuleGroups>(fs.readFileSync(ALERTS, 'utf8'));
  const alerts = rules.groups.flatMap((g) => g.rules).filter((r) => r.alert !== undefined);
  let helm: string;
  let promtool: string;
  let ns: string;
  const installed: string[] = [];
  let fixture: RollguardFixture | undefined;

  beforeAll(async () => {
    helm = await goTool('helm');
    promtool = await goTool('promtool');
    ns = await createNamespace(core, 'monitoring-objects');
    const dir = await prometheusOperatorCrds();
    for (const file of CRDS) {
      const crd = loadYaml<V1CustomResourceDefinition>(fs.readFileSync(path.join(dir, file), 'utf8'));
      await crdApi.createCustomResourceDefinition({ body: crd }).catch((err: unknown) => {
        if ((err as { code?: number }).code !== 409) throw err;
      });
      installed.push(crd.metadata!.name!);
    }
    for (const name of installed) {
      await waitUntil(`CRD ${name} established`, async () => {
        const crd = await crdApi.readCustomResourceDefinition({ name });
        return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ?? false;
      });
    }
  });
  afterAll(async () => {
    await fixture?.teardown();
    for (const name of installed) await crdApi.deleteCustomResourceDefinition({ name }).catch(() => undefined);
    if (ns) await core.deleteNamespace({ name: ns }).catch(() => undefined);
  });
  beforeEach(() => {
    printControlPlaneLogsOnFailure();
    if (fixture) printProcessLogsOnFailure([fixture.rollguard]);
  });

  async function render(sets: string[], files: string[] = []): Promise<KubernetesObject[]> {
    const out = await toolOutput(helm, [
      'template', 'rollguard', CHART, '--namespace', ns,
      ...files.flatMap((f) => ['-f', path.join(ROOT, 'deploy/helm/values', f)]),
      ...sets.flatMap((s) => ['--set', s]),
    ]);
    return (loadAllYaml(out) as (KubernetesObject | null)[]).filter((o): o is KubernetesObject => o !== null);
  }

  it('the alerts are the ones the issue asks for, and promtool checks the rule file', async () => {
    expect(alerts.map((a) => a.alert).sort()).toEqual([
      'RollguardCertificateExpiresSoon', 'RollguardCrashLooping', 'RollguardDataChecksFailing', 'RollguardHandoverPaused',
      'RollguardNoLeader', 'RollguardRestartsAboveUsual', 'RollguardRolloutHeld', 'RollguardWebhookFailingOpen',
    ]);
    for (const a of alerts) expect(['warning', 'critical'], `${a.alert} severity`).toContain(a.labels?.severity);
    expect(await toolOutput(promtool, ['check', 'rules', ALERTS])).toContain(`SUCCESS: ${alerts.length} rules found`);
  });

  it('every alert has a promtool case where it fires and one where it stays quiet', () => {
    const cases = loadYaml<AlertTests>(fs.readFileSync(ALERT_TESTS, 'utf8')).tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const a of alerts) {
      const own = cases.filter((c) => c.alertname === a.alert);
      expect(own.some((c) => c.exp_alerts.length > 0), `${a.alert} fires in a case`).toBe(true);
      expect(own.some((c) => c.exp_alerts.length === 0), `${a.alert} stays quiet in a case`).toBe(true);
    }
  });

  it('promtool test rules: every case passes', async () => {
    const out = await toolOutput(promtool, ['test', 'rules', ALERT_TESTS]);
    expect(out).toContain('SUCCESS');
  });

  it('deploy/prometheus/prometheus-rule.yaml and the chart\'s PrometheusRule hold exactly the rules of files/alerts.yaml', async () => {
    const plain = loadYaml<KubernetesObject & { spec: RuleGroups }>(fs.readFileSync(path.join(ROOT, 'deploy/prometheus/prometheus-rule.yaml'), 'utf8'));
    expect(plain.spec).toEqual(rules);
    const rendered = (await render(['prometheusRule.enabled=true'])).filter((o) => o.kind === 'PrometheusRule') as (KubernetesObject & { spec: RuleGroups })[];
    expect(rendered).toHaveLength(1);
    expect(rendered[0]!.spec).toEqual(rules);
    // off by default: nothing of the Prometheus Operator's, no dashboard
    const defaults = await render([]);
    expect(defaults.filter((o) => o.apiVersion?.startsWith('monitoring.coreos.com/') || o.kind === 'ConfigMap')).toEqual([]);
  });

  it.each([
    ['values/monitoring.yaml (ServiceMonitor)', [], ['monitoring.yaml']],
    ['a PodMonitor', ['podMonitor.enabled=true', 'podMonitor.labels.release=prom'], []],
  ])('%s: the API server accepts every object with the Prometheus Operator\'s CRDs (server-side dry-run)', async (_name, sets, files) => {
    const objects = (await render(sets, files)).filter((o) => o.apiVersion?.startsWith('monitoring.coreos.com/') || o.kind === 'ConfigMap' || o.kind === 'Service');
    expect(objects.length).toBeGreaterThanOrEqual(2);
    for (const obj of objects) {
      await kapi.create(obj, undefined, 'All').catch((err: unknown) => {
        throw new Error(`the API server rejected ${obj.kind}/${obj.metadata?.name}: ${JSON.stringify((err as { body?: unknown }).body ?? String(err))}`);
      });
    }
  });

  it('values/monitoring.yaml: the ServiceMonitor scrapes /metrics of the metrics Service, which leads to the admin port the NetworkPolicy opens to the scraper\'s namespace', async () => {
    const objects = await render([], ['monitoring.yaml']);
    const find = <T,>(kind: string, name?: string): T => {
      const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata?.name === name));
      expect(found, `${kind} ${name ?? ''}`).toHaveLength(1);
      return found[0] as T;
    };
    type Monitor = KubernetesObject & { spec: { selector: { matchLabels: Record<string, string> }; namespaceSelector: { matchNames: string[] }; endpoints: { port: string; path: string }[] } };
    type Svc = KubernetesObject & { spec: { selector: Record<string, string>; ports: { name: string; port: number; targetPort: string }[] } };
    type Deploy = KubernetesObject & { spec: { template: { metadata: { labels: Record<string, string> }; spec: { containers: { ports: { name: string; containerPort: number }[] }[] } } } };
    type Policy = KubernetesObject & { spec: { ingress: { _from?: { namespaceSelector?: { matchExpressions: { values: string[] }[] } }[]; ports: { port: string }[] }[] } };
    const monitor = find<Monitor>('ServiceMonitor');
    expect(monitor.metadata!.labels).toMatchObject({ release: 'kube-prometheus-stack' });
    const service = find<Svc>('Service', 'rollguard-metrics');
    expect(service.metadata!.labels).toMatchObject(monitor.spec.selector.matchLabels);
    expect(monitor.spec.namespaceSelector.matchNames).toEqual([ns]);
    const endpoint = monitor.spec.endpoints[0]!;
    expect(endpoint.path).toBe('/metrics');
    const port = service.spec.ports.find((p) => p.name === endpoint.port)!;
    expect(port.targetPort).toBe('admin');
    const deploy = find<Deploy>('Deployment');
    expect(deploy.spec.template.metadata.labels).toMatchObject(service.spec.selector);
    expect(deploy.spec.template.spec.containers[0]!.ports.find((p) => p.name === 'admin')?.containerPort).toBe(8080);
    const admin = find<Policy>('NetworkPolicy').spec.ingress.find((r) => r.ports.some((p) => p.port === 'admin'))!;
    // loadAllYaml reads a NetworkPolicy into the client's model, where "from" is "_from"
    expect(admin._from?.[0]?.namespaceSelector?.matchExpressions[0]?.values).toEqual(['monitoring']);
    const dashboard = find<KubernetesObject & { data: Record<string, string> }>('ConfigMap', 'rollguard-dashboard');
    expect(dashboard.metadata!.labels).toMatchObject({ grafana_dashboard: '1' });
    expect(JSON.parse(dashboard.data['rollguard.json']!)).toEqual(JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')));
  });

  it('the chart refuses a ServiceMonitor and a PodMonitor at once', async () => {
    const failure = await render(['serviceMonitor.enabled=true', 'podMonitor.enabled=true']).then(
      () => 'rendered',
      (err: unknown) => String(err),
    );
    expect(failure).toContain('choose one');
  });

  it('every metric the alerts and the dashboard name is one rollguard\'s real /metrics exports, or a named API server metric', async () => {
    const dashboard = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')) as Dashboard;
    const used = new Map<string, string>();
    for (const a of alerts) for (const name of metricNames(a.expr)) used.set(name, `alert ${a.alert}`);
    for (const p of dashboard.panels) for (const t of p.targets) for (const name of metricNames(t.expr)) used.set(name, `panel "${p.title}"`);
    expect(used.size).toBeGreaterThan(15);

    fixture = await startRollguardFixture({ name: 'monitoring', webhook: 'registered' });
    const text = await (await fetch(`${fixture.rollguard.adminUrl}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
    // a labelled metric nothing has moved yet has no sample, only its TYPE line; a histogram's samples are _bucket, _sum and _count
    const exported = new Set<string>();
    for (const line of text.split('\n')) {
      const declared = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$/.exec(line);
      if (declared) {
        const [, name, type] = declared;
        for (const suffix of type === 'histogram' ? ['_bucket', '_sum', '_count'] : type === 'summary' ? ['', '_sum', '_count'] : ['']) exported.add(`${name}${suffix}`);
      } else if (line !== '' && !line.startsWith('#')) {
        exported.add(/^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)![0]);
      }
    }
    expect(exported.has('rollguard_leader')).toBe(true);
    const unknown = [...used].filter(([name]) => !exported.has(name) && !API_SERVER_METRICS.includes(name)).map(([name, where]) => `${name} (${where})`);
    expect(unknown).toEqual([]);
  });

  it('metricNames finds the metrics of an expression and nothing else', () => {
    expect(metricNames('sum by (name) (increase(apiserver_admission_webhook_fail_open_count{name=~".+\\\\.rollguard\\\\.io"}[10m])) > 0')).toEqual(['apiserver_admission_webhook_fail_open_count']);
    expect(metricNames('histogram_quantile(0.99, sum by (le) (rate(rollguard_admission_duration_seconds_bucket[5m])))')).toEqual(['rollguard_admission_duration_seconds_bucket']);
    expect(metricNames('max(rollguard_leader) < 1 or absent(rollguard_leader)')).toEqual(['rollguard_leader']);
    expect(metricNames('min(x_seconds{certificate="serving"}) - time() < 14 * 86400')).toEqual(['x_seconds']);
  });
});
