import fc from 'fast-check';
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { WorkloadKind } from '../../src/kube/workloads.js';
import { checkAfterQuiet, type Figures, type Violation } from './invariants.js';
import { DATA_KEYS, DATA_VALUES, manifest, OBJECT_KINDS, OBJECT_NAMES, SET_NAMES, WORKLOAD_KINDS, type ObjectKind, type ReferenceChoice } from './universe.js';
import type { World } from './world.js';

// The operations of the model checker as plain JSON (so a failing run's trace is a file that
// replays), each with its precondition on the model and its run against the real world.

type Ns = 0 | 1;
interface ObjectTarget {
  ns: Ns;
  kind: ObjectKind;
  name: string;
}
interface SetTarget {
  ns: Ns;
  kind: WorkloadKind;
  name: string;
}

export type Op =
  | ({ op: 'putObject'; data: Record<string, string> } & ObjectTarget)
  | ({ op: 'setKey'; key: string; value: string } & ObjectTarget)
  | ({ op: 'removeKey'; key: string } & ObjectTarget)
  | ({ op: 'deleteObject' } & ObjectTarget)
  | ({ op: 'labelObject'; value: string } & ObjectTarget)
  | ({ op: 'flap'; key: string; times: number } & ObjectTarget)
  | ({ op: 'createSet'; refs: ReferenceChoice[]; via: 'api' | 'kubectl' } & SetTarget)
  | ({ op: 'deleteSet' } & SetTarget)
  | ({ op: 'markSet'; what: 'label' | 'annotate'; value: string } & SetTarget)
  | ({ op: 'setImage'; image: string } & SetTarget)
  | ({ op: 'replaceSet' } & SetTarget)
  | ({ op: 'applySet'; manager: string } & SetTarget)
  | ({ op: 'rolloutRestart' } & SetTarget)
  | ({ op: 'rolloutUndo' } & SetTarget)
  | ({ op: 'scale'; replicas: number } & SetTarget)
  | ({ op: 'clone'; toNs: Ns } & SetTarget)
  | { op: 'killRollguard' }
  | { op: 'startRollguard' }
  | { op: 'webhook'; up: boolean }
  | { op: 'restartApiServer' }
  | { op: 'settle' };

export interface SetModel {
  refs: ReferenceChoice[];
  image: string;
  replicas: number;
  /** ControllerRevisions / ReplicaSets the set has had beyond its first, as far as the model knows: undo needs one */
  changed: boolean;
}

export interface Model {
  objects: Map<string, Set<string>>;
  sets: Map<string, SetModel>;
  rollguardUp: boolean;
  webhookUp: boolean;
}

export const initialModel = (): Model => ({ objects: new Map(), sets: new Map(), rollguardUp: true, webhookUp: true });

/** What a run did, for the report. */
export interface RunStats {
  operations: number;
  /** how many of each op ran (faults by kind among them) */
  byOp: Record<string, number>;
  faults: number;
  dataWrites: number;
  checks: number;
  figures: Figures;
}

export class ModelViolation extends Error {
  constructor(readonly violations: Violation[]) {
    super(`${violations.length} violation(s):\n${violations.map((v) => `  [${v.invariant}] ${v.workload}: ${v.detail}`).join('\n')}`);
    this.name = 'ModelViolation';
  }
}

/** The checker's side of a run: the world, the stats, and where this run's states begin. */
export interface Real {
  world: World;
  stats: RunStats;
  since: Map<string, number>;
  trace: Op[];
}

const objKey = (t: ObjectTarget): string => `${t.ns}/${t.kind}/${t.name}`;
const setKey = (t: SetTarget): string => `${t.ns}/${t.kind}/${t.name}`;
const ref = (kind: string): string => kind.toLowerCase();

export function isFault(op: Op): boolean {
  return op.op === 'killRollguard' || op.op === 'startRollguard' || op.op === 'webhook' || op.op === 'restartApiServer';
}

/** Whether the op can run on the model now (fast-check skips it otherwise, also while shrinking). */
export function applicable(op: Op, m: Model, canRestartApiServer: boolean): boolean {
  switch (op.op) {
    case 'putObject':
      return true;
    case 'setKey':
    case 'labelObject':
    case 'flap':
    case 'deleteObject':
      return m.objects.has(objKey(op));
    case 'removeKey':
      return m.objects.get(objKey(op))?.has(op.key) === true;
    case 'createSet':
      return !m.sets.has(setKey(op)) && op.refs.length > 0;
    case 'clone': {
      const target = { ...op, ns: op.toNs, name: op.toNs === op.ns ? `${op.name}-copy` : op.name };
      return m.sets.has(setKey(op)) && !m.sets.has(setKey(target)) && !op.name.endsWith('-copy');
    }
    case 'scale':
      return m.sets.has(setKey(op)) && op.kind !== 'DaemonSet';
    case 'rolloutUndo':
      return m.sets.get(setKey(op))?.changed === true;
    case 'deleteSet':
    case 'markSet':
    case 'setImage':
    case 'replaceSet':
    case 'applySet':
    case 'rolloutRestart':
      return m.sets.has(setKey(op));
    case 'killRollguard':
      return m.rollguardUp;
    case 'startRollguard':
      return !m.rollguardUp;
    case 'webhook':
      return m.webhookUp !== op.up;
    case 'restartApiServer':
      return canRestartApiServer;
    case 'settle':
      return true;
  }
}

async function writeObject(r: Real, t: ObjectTarget, data: Record<string, string>, exists: boolean): Promise<void> {
  const { world } = r;
  const namespace = world.namespaces[t.ns];
  const body = { metadata: { name: t.name }, ...(t.kind === 'ConfigMap' ? { data } : { stringData: data }) };
  if (t.kind === 'ConfigMap') {
    if (exists) await world.core.replaceNamespacedConfigMap({ namespace, name: t.name, body });
    else await world.core.createNamespacedConfigMap({ namespace, body });
  } else if (exists) {
    // a PUT of a Secret with stringData keeps the data keys it does not name: send the whole data
    await world.core.replaceNamespacedSecret({ namespace, name: t.name, body: { metadata: { name: t.name }, data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])) } });
  } else await world.core.createNamespacedSecret({ namespace, body });
}

async function mergeObject(r: Real, t: ObjectTarget, patch: Record<string, unknown>): Promise<void> {
  const { world } = r;
  const namespace = world.namespaces[t.ns];
  const opts = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  if (t.kind === 'ConfigMap') await world.core.patchNamespacedConfigMap({ namespace, name: t.name, body: patch }, opts);
  else await world.core.patchNamespacedSecret({ namespace, name: t.name, body: patch }, opts);
}

function encoded(kind: ObjectKind, value: string | null): string | null {
  return value === null || kind === 'ConfigMap' ? value : Buffer.from(value).toString('base64');
}

function setManifest(t: SetTarget, s: SetModel): string {
  return JSON.stringify(manifest(t.kind, t.name, s.refs, s.image, s.replicas));
}

/** A copy as users make one: `kubectl get -o json`, the server's fields dropped, created elsewhere (a restore as Velero does it). */
function cloneBody(source: Record<string, unknown>, name: string): string {
  const w = structuredClone(source) as { metadata: Record<string, unknown>; status?: unknown };
  for (const field of ['uid', 'resourceVersion', 'creationTimestamp', 'managedFields', 'generation', 'namespace', 'ownerReferences']) delete w.metadata[field];
  w.metadata.name = name;
  delete w.status;
  return JSON.stringify(w);
}

/** Runs one op against the world and updates the model. */
export async function runOp(op: Op, m: Model, r: Real): Promise<void> {
  const { world } = r;
  r.trace.push(op);
  r.stats.operations++;
  r.stats.byOp[op.op] = (r.stats.byOp[op.op] ?? 0) + 1;
  if (isFault(op)) r.stats.faults++;
  switch (op.op) {
    case 'putObject': {
      const exists = m.objects.has(objKey(op));
      await writeObject(r, op, op.data, exists);
      m.objects.set(objKey(op), new Set(Object.keys(op.data)));
      r.stats.dataWrites++;
      return;
    }
    case 'setKey':
      await mergeObject(r, op, { data: { [op.key]: encoded(op.kind, op.value) } });
      m.objects.get(objKey(op))!.add(op.key);
      r.stats.dataWrites++;
      return;
    case 'removeKey':
      await mergeObject(r, op, { data: { [op.key]: null } });
      m.objects.get(objKey(op))!.delete(op.key);
      r.stats.dataWrites++;
      return;
    case 'labelObject':
      await mergeObject(r, op, { metadata: { labels: { 'model.example/touched': op.value } } });
      return;
    case 'flap':
      for (let i = 0; i < op.times; i++) {
        await mergeObject(r, op, { data: { [op.key]: encoded(op.kind, `flap-${Date.now()}-${i}`) } });
        r.stats.dataWrites++;
      }
      m.objects.get(objKey(op))!.add(op.key);
      return;
    case 'deleteObject': {
      const namespace = world.namespaces[op.ns];
      if (op.kind === 'ConfigMap') await world.core.deleteNamespacedConfigMap({ namespace, name: op.name });
      else await world.core.deleteNamespacedSecret({ namespace, name: op.name });
      m.objects.delete(objKey(op));
      r.stats.dataWrites++;
      return;
    }
    case 'createSet': {
      const s: SetModel = { refs: op.refs, image: 'registry.example/app:1', replicas: 0, changed: false };
      const namespace = world.namespaces[op.ns];
      if (op.via === 'kubectl') await world.kubectlWrite(namespace, ['create', '-f', '-'], setManifest(op, s));
      else {
        const body = manifest(op.kind, op.name, s.refs, s.image, s.replicas);
        const api = world.apps;
        const created =
          op.kind === 'StatefulSet'
            ? await api.createNamespacedStatefulSet({ namespace, body: body as never })
            : op.kind === 'Deployment'
              ? await api.createNamespacedDeployment({ namespace, body: body as never })
              : await api.createNamespacedDaemonSet({ namespace, body: body as never });
        world.noteWrite(created.metadata?.resourceVersion);
      }
      m.sets.set(setKey(op), s);
      return;
    }
    case 'deleteSet':
      await world.kubectl(world.namespaces[op.ns], ['delete', `${ref(op.kind)}/${op.name}`, '--wait=false']);
      m.sets.delete(setKey(op));
      return;
    case 'markSet':
      await world.kubectlWrite(world.namespaces[op.ns], [op.what, `${ref(op.kind)}/${op.name}`, `model.example/mark=${op.value}`, '--overwrite']);
      return;
    case 'setImage': {
      const s = m.sets.get(setKey(op))!;
      await world.kubectlWrite(world.namespaces[op.ns], ['set', 'image', `${ref(op.kind)}/${op.name}`, `app=${op.image}`]);
      if (s.image !== op.image) s.changed = true;
      s.image = op.image;
      return;
    }
    case 'replaceSet':
      await world.kubectlWrite(world.namespaces[op.ns], ['replace', '-f', '-'], setManifest(op, m.sets.get(setKey(op))!));
      return;
    case 'applySet':
      await world.kubectlWrite(world.namespaces[op.ns], ['apply', '--server-side', '--force-conflicts', `--field-manager=${op.manager}`, '-f', '-'], setManifest(op, m.sets.get(setKey(op))!));
      return;
    case 'rolloutRestart':
      await world.kubectlWrite(world.namespaces[op.ns], ['rollout', 'restart', `${ref(op.kind)}/${op.name}`]).catch((err: Error) => {
        // kubectl's restart annotation has a resolution of a second: it refuses a second restart within one, writing nothing
        if (!/already been triggered within the past second/.test(err.message)) throw err;
      });
      m.sets.get(setKey(op))!.changed = true;
      return;
    case 'rolloutUndo':
      await world.kubectlWrite(world.namespaces[op.ns], ['rollout', 'undo', `${ref(op.kind)}/${op.name}`]).catch((err: Error) => {
        // a set whose revisions the model did not foresee (its only revision): kubectl says so, nothing is written
        if (!/no rollout history|revision not found|skipped rollback/.test(err.message)) throw err;
      });
      return;
    case 'scale':
      await world.kubectl(world.namespaces[op.ns], ['scale', `${ref(op.kind)}/${op.name}`, `--replicas=${op.replicas}`]);
      m.sets.get(setKey(op))!.replicas = op.replicas;
      return;
    case 'clone': {
      const source = await world.kubectl(world.namespaces[op.ns], ['get', `${ref(op.kind)}/${op.name}`, '-o', 'json']);
      const name = op.toNs === op.ns ? `${op.name}-copy` : op.name;
      await world.kubectlWrite(world.namespaces[op.toNs], ['create', '-f', '-'], cloneBody(JSON.parse(source) as Record<string, unknown>, name));
      m.sets.set(setKey({ ...op, ns: op.toNs, name }), { ...m.sets.get(setKey(op))!, changed: false });
      return;
    }
    case 'killRollguard':
      await world.killRollguard();
      m.rollguardUp = false;
      return;
    case 'startRollguard':
      await world.startRollguard();
      m.rollguardUp = true;
      return;
    case 'webhook':
      await world.setWebhook(op.up);
      m.webhookUp = op.up;
      return;
    case 'restartApiServer':
      await world.restartApiServer();
      return;
    case 'settle': {
      const { violations, figures } = await checkAfterQuiet(world, r.since);
      r.stats.checks++;
      r.stats.figures = figures;
      m.rollguardUp = true;
      m.webhookUp = true;
      if (violations.length > 0) throw new ModelViolation(violations);
      return;
    }
  }
}

/** The op as an fc command. */
export function commandOf(op: Op, canRestartApiServer: boolean): fc.AsyncCommand<Model, Real> {
  return {
    check: (m) => applicable(op, m, canRestartApiServer),
    run: (m, r) => runOp(op, m, r),
    toString: () => JSON.stringify(op),
  };
}

const ns = fc.constantFrom<Ns>(0, 1);
const objectTarget = fc.record({ ns, kind: fc.constantFrom(...OBJECT_KINDS), name: fc.constantFrom(...OBJECT_NAMES) });
const setTarget = fc.record({ ns, kind: fc.constantFrom(...WORKLOAD_KINDS), name: fc.constantFrom(...SET_NAMES) });
const dataKey = fc.constantFrom(...DATA_KEYS);
const dataValue = fc.constantFrom(...DATA_VALUES);
const data = fc.dictionary(dataKey, dataValue, { maxKeys: 3 });
const reference: fc.Arbitrary<ReferenceChoice> = fc.record({
  kind: fc.constantFrom(...OBJECT_KINDS),
  name: fc.constantFrom(...OBJECT_NAMES),
  shape: fc.constantFrom('envFrom', 'volume', 'keyRef', 'items'),
  key: dataKey,
  optional: fc.boolean(),
});

/** Every op the checker may generate; `faults` with the API server's restart only when the world owns it. */
export function opArbitraries(opts: { apiServerRestart: boolean }): fc.Arbitrary<Op>[] {
  const putObject = fc.tuple(objectTarget, data).map(([t, d]): Op => ({ op: 'putObject', ...t, data: d }));
  // creations twice: most operations need an object or a set to act on
  const userOps: fc.Arbitrary<Op>[] = [
    putObject,
    putObject,
    fc.tuple(objectTarget, dataKey, dataValue).map(([t, key, value]): Op => ({ op: 'setKey', ...t, key, value })),
    fc.tuple(objectTarget, dataKey, dataValue).map(([t, key, value]): Op => ({ op: 'setKey', ...t, key, value })),
    fc.tuple(objectTarget, dataKey).map(([t, key]): Op => ({ op: 'removeKey', ...t, key })),
    objectTarget.map((t): Op => ({ op: 'deleteObject', ...t })),
    fc.tuple(objectTarget, dataValue).map(([t, value]): Op => ({ op: 'labelObject', ...t, value })),
    fc.tuple(objectTarget, dataKey, fc.integer({ min: 3, max: 6 })).map(([t, key, times]): Op => ({ op: 'flap', ...t, key, times })),
    fc.tuple(setTarget, fc.array(reference, { minLength: 1, maxLength: 3 }), fc.constantFrom<'api' | 'kubectl'>('api', 'kubectl')).map(([t, refs, via]): Op => ({ op: 'createSet', ...t, refs, via })),
    fc.tuple(setTarget, fc.array(reference, { minLength: 1, maxLength: 3 })).map(([t, refs]): Op => ({ op: 'createSet', ...t, refs, via: 'api' })),
    setTarget.map((t): Op => ({ op: 'deleteSet', ...t })),
    fc.tuple(setTarget, fc.constantFrom<'label' | 'annotate'>('label', 'annotate'), dataValue).map(([t, what, value]): Op => ({ op: 'markSet', ...t, what, value })),
    fc.tuple(setTarget, fc.constantFrom('registry.example/app:1', 'registry.example/app:2')).map(([t, image]): Op => ({ op: 'setImage', ...t, image })),
    setTarget.map((t): Op => ({ op: 'replaceSet', ...t })),
    fc.tuple(setTarget, fc.constantFrom('argocd', 'flux')).map(([t, manager]): Op => ({ op: 'applySet', ...t, manager })),
    setTarget.map((t): Op => ({ op: 'rolloutRestart', ...t })),
    setTarget.map((t): Op => ({ op: 'rolloutUndo', ...t })),
    fc.tuple(setTarget, fc.integer({ min: 0, max: 2 })).map(([t, replicas]): Op => ({ op: 'scale', ...t, replicas })),
    fc.tuple(setTarget, ns).map(([t, toNs]): Op => ({ op: 'clone', ...t, toNs })),
  ];
  const faults: fc.Arbitrary<Op>[] = [
    fc.constant<Op>({ op: 'killRollguard' }),
    fc.constant<Op>({ op: 'startRollguard' }),
    fc.boolean().map((up): Op => ({ op: 'webhook', up })),
    ...(opts.apiServerRestart ? [fc.constant<Op>({ op: 'restartApiServer' })] : []),
  ];
  return [...userOps, ...faults, fc.constant<Op>({ op: 'settle' })];
}
