import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadYaml } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { goTool, toolOutput } from '../env/tools.js';

// The chart's values.schema.json closes every object, so a mistyped key or a value of the
// wrong type fails `helm install` (and template, lint, upgrade) before anything reaches a
// cluster. Each key of values.yaml is misspelled in turn, and each value given the wrong type.

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = path.join(ROOT, 'deploy/helm/rollguard');
const VALUE_SETS = path.join(ROOT, 'deploy/helm/values');
const SCHEMA_FAILURE = "values don't meet the specifications of the schema";

type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
type Segment = string | number;

function show(at: Segment[]): string {
  return at.map((s) => (typeof s === 'number' ? `[${s}]` : `.${s}`)).join('').slice(1);
}

const isObject = (v: Json): v is { [key: string]: Json } => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Maps whose keys are the user's to choose (labels the Grafana sidecar selects on): any key is
 * right there, so a misspelled one cannot fail; their values still must be strings.
 */
const FREE_FORM_MAPS = ['dashboard.labels'];

/** Every path to a key of an object, in objects and in the objects of lists, depth first; not into FREE_FORM_MAPS. */
function keyPaths(value: Json, at: Segment[] = []): Segment[][] {
  if (Array.isArray(value)) return value.flatMap((v, i) => keyPaths(v, [...at, i]));
  if (!isObject(value) || FREE_FORM_MAPS.includes(show(at))) return [];
  return Object.entries(value).flatMap(([k, v]) => [[...at, k], ...keyPaths(v, [...at, k])]);
}

/** Every path to a leaf value: a scalar, an empty list or an empty map. */
function leafPaths(value: Json, at: Segment[] = []): Segment[][] {
  if (Array.isArray(value)) return value.length === 0 ? [at] : value.flatMap((v, i) => leafPaths(v, [...at, i]));
  if (isObject(value)) {
    const entries = Object.entries(value);
    return entries.length === 0 ? [at] : entries.flatMap(([k, v]) => leafPaths(v, [...at, k]));
  }
  return [at];
}

/** A typo a person makes: the last two letters swapped ("replicaCoutn"), or one letter doubled when they are the same. */
function misspelled(key: string): string {
  if (key.length < 2) return `${key}${key}`;
  const a = key.at(-2)!;
  const b = key.at(-1)!;
  return a === b ? `${key}${b}` : `${key.slice(0, -2)}${b}${a}`;
}

/** A value of another JSON type than the one given. */
function wrongType(value: Json): Json {
  // a list, not a number: a quantity ("50m") may be a number too
  if (typeof value === 'string') return [value];
  if (typeof value === 'number' || typeof value === 'boolean') return 'seven';
  return 'seven';
}

/** The copy of `root` in which `change` replaced the value (or, for a key, the entry) at the path. */
function changedAt(root: Json, at: Segment[], change: (parent: { [key: string]: Json } | Json[], last: Segment) => void): Json {
  const copy = structuredClone(root);
  let parent: Json = copy;
  for (const segment of at.slice(0, -1)) parent = (parent as Record<Segment, Json>)[segment]!;
  change(parent as { [key: string]: Json } | Json[], at.at(-1)!);
  return copy;
}

/** Only the top-level entry `key` of `values` (the rest comes from the chart's defaults). */
function topLevel(values: Json, key: string): Json {
  return { [key]: (values as { [key: string]: Json })[key]! };
}

/** Runs `task` over `items`, `limit` at a time, in the items' order of results. */
async function inTurns<T, R>(items: T[], limit: number, task: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < items.length; i = next++) results[i] = await task(items[i]!);
  };
  await Promise.all(Array.from({ length: limit }, worker));
  return results;
}

// each case is one `helm template` (about 0.3 s); three at a time on a shared 2-core machine
const AT_ONCE = 3;
const LOOP_TIMEOUT_MS = 300_000;


describe('the Helm chart values schema', () => {
  let helm: string;
  let dir: string;
  const defaults = loadYaml<Json>(fs.readFileSync(path.join(CHART, 'values.yaml'), 'utf8'));

  beforeAll(async () => {
    helm = await goTool('helm');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chart-values-'));
  });
  afterAll(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  /** `helm template` with one values file (JSON is YAML); the error text when it fails, else undefined. */
  async function templateFailure(values: Json, name: string): Promise<string | undefined> {
    const file = path.join(dir, `${name.replace(/[^A-Za-z0-9]+/g, '_')}.yaml`);
    fs.writeFileSync(file, JSON.stringify(values));
    return toolOutput(helm, ['template', 'rollguard', CHART, '--namespace', 'rollguard-system', '-f', file]).then(
      () => undefined,
      (err: unknown) => String(err),
    );
  }

  it('the misspelling covers every key of values.yaml, nested ones and those in lists too', () => {
    const paths = keyPaths(defaults).map(show);
    expect(paths.length).toBeGreaterThan(50);
    for (const nested of ['image.digest', 'resources.requests.memory', 'topologySpreadConstraints[0].whenUnsatisfiable', 'containerSecurityContext.capabilities.drop']) {
      expect(paths).toContain(nested);
    }
    expect(misspelled('replicaCount')).toBe('replicaCoutn');
    expect(misspelled('cpu')).toBe('cup');
  });

  it('helm install --dry-run fails on the schema for a misspelled top-level key, and installs with the defaults', async () => {
    // helm install asks the cluster for its version even on a client dry run, and for objects the release would
    // adopt: a release and a namespace of their own, which no other test file fills (they share one API server)
    const namespace = `chart-values-${process.pid}`;
    const install = ['install', `values-${process.pid}`, CHART, '--dry-run=client', '--namespace', namespace, '--kubeconfig', inject('kubeconfigPath')];
    const failure = await toolOutput(helm, [...install, '--set', 'replicaCoutn=3']).then(
      () => 'installed',
      (err: unknown) => String(err),
    );
    expect(failure).toContain(SCHEMA_FAILURE);
    expect(failure).toContain("'replicaCoutn' not allowed");
    const rendered = await toolOutput(helm, install);
    expect(rendered).toContain('kind: Deployment');
  });

  it(
    'every misspelled key of values.yaml fails on the schema, naming the key',
    async () => {
      const accepted = await inTurns(keyPaths(defaults), AT_ONCE, async (at) => {
        const wrong = misspelled(at.at(-1) as string);
        const values = changedAt(defaults, at, (parent, last) => {
          const entries = Object.entries(parent as { [key: string]: Json }).map(([k, v]): [string, Json] => [k === last ? wrong : k, v]);
          for (const k of Object.keys(parent)) delete (parent as { [key: string]: Json })[k];
          Object.assign(parent, Object.fromEntries(entries));
        });
        const failure = await templateFailure(topLevel(values, at.length === 1 ? wrong : (at[0] as string)), `key-${show(at)}`);
        return failure?.includes(SCHEMA_FAILURE) && failure.includes(`'${wrong}'`) ? [] : [`${show(at)} as ${wrong}: ${failure ?? 'rendered'}`];
      });
      expect(accepted.flat()).toEqual([]);
    },
    LOOP_TIMEOUT_MS,
  );

  it(
    'every value of values.yaml given the wrong type fails on the schema',
    async () => {
      const accepted = await inTurns(leafPaths(defaults), AT_ONCE, async (at) => {
        const values = changedAt(defaults, at, (parent, last) => {
          (parent as Record<Segment, Json>)[last] = wrongType((parent as Record<Segment, Json>)[last]!);
        });
        const failure = await templateFailure(topLevel(values, at[0] as string), `type-${show(at)}`);
        return failure?.includes(SCHEMA_FAILURE) ? [] : [`${show(at)}: ${failure ?? 'rendered'}`];
      });
      expect(accepted.flat()).toEqual([]);
    },
    LOOP_TIMEOUT_MS,
  );

  it.each([
    ['an unknown log level', ['logLevel=verbose']],
    ['an image digest that is not sha256', ['image.digest=latest']],
    ['a resource name without its domain', ['resources.limits.gpu=1']],
    ['a namespace that is no DNS label', ['networkPolicy.adminNamespaces={Monitoring}']],
    ['an extra argument that is no flag', ['extraArgs={debounce=10s}']],
    ['a spread constraint that cannot be satisfied', ['topologySpreadConstraints[0].whenUnsatisfiable=Sometimes']],
  ])('the schema turns away %s', async (_what, sets) => {
    const failure = await toolOutput(helm, ['template', 'rollguard', CHART, ...sets.flatMap((s) => ['--set', s])]).then(
      () => 'rendered',
      (err: unknown) => String(err),
    );
    expect(failure).toContain(SCHEMA_FAILURE);
  });

  it('a global key is allowed (a parent chart passes its globals down)', async () => {
    await toolOutput(helm, ['template', 'rollguard', CHART, '--set', 'global.imageRegistry=registry.example.com']);
  });

  it.each(['', ...fs.readdirSync(VALUE_SETS).filter((f) => f.endsWith('.yaml'))])('helm lint --strict passes with %s', async (file) => {
    const out = await toolOutput(helm, ['lint', '--strict', CHART, ...(file ? ['-f', path.join(VALUE_SETS, file)] : [])]);
    expect(out).toContain('0 chart(s) failed');
  });
});
