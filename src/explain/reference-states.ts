import type { V1Pod } from '@kubernetes/client-node';
import type { Workload, WorkloadKind } from '../kube/workloads.js';
import { jsonObjectOrUndefined } from '../kube/json.js';
import { FROZEN_ANNOTATION, annotationChanges, frozenEntry, planAnnotations, type Dialect, type ObjectVersion, type VersionLookup } from '../restarter/annotations.js';
import { describeChange } from '../restarter/change-text.js';
import { parseDigestRecords, sameKeysSince } from '../restarter/digests.js';
import { referenceReads } from '../restarter/references.js';
import { momentOf, type ReferenceExplanation } from './explanation.js';
import { podRevisionLabel, type ObjectFact, type RevisionFact } from './facts.js';

function versionOf(fact: ObjectFact, ignoreLabel: string): ObjectVersion | undefined {
  return fact.status === 'found' ? { uid: fact.uid, resourceVersion: fact.resourceVersion, ignored: fact.labels[ignoreLabel] === 'true' } : undefined;
}

function valueOf(version: ObjectVersion | undefined, dialect: Dialect): string {
  return version ? `${version.uid}/${version.resourceVersion}` : dialect.missing;
}

function templateAnnotations(template: unknown): Record<string, string> {
  const annotations = jsonObjectOrUndefined(jsonObjectOrUndefined(jsonObjectOrUndefined(template)?.metadata)?.annotations) ?? {};
  return Object.fromEntries(Object.entries(annotations).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

/** How many running pods carry each value of `annotation`, by the template of the revision each was made from. */
function podVersions(kind: WorkloadKind, pods: readonly V1Pod[], revisions: readonly RevisionFact[], annotation: string): { version?: string; pods: number }[] {
  const label = podRevisionLabel(kind);
  const counts = new Map<string | undefined, number>();
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    const revision = revisions.find((r) => r.podLabel !== '' && r.podLabel === pod.metadata?.labels?.[label]);
    const value = revision ? templateAnnotations(revision.template)[annotation] : undefined;
    counts.set(value, (counts.get(value) ?? 0) + 1);
  }
  return [...counts].map(([version, n]) => (version === undefined ? { pods: n } : { version, pods: n }));
}

/**
 * Each object the workload's template references, as the loop would plan it (planAnnotations
 * over what the reader found, the same function the webhook and the loop use): the version the
 * template names, the one the running pods were made with, the object's current one, and whether
 * that is a restart due, an opted-out change, or one the digest record knows to be metadata only.
 * The data check itself (a read of the data, keyed with rollguard's secret) is the leader's alone:
 * a `changed` reference may still turn out to be metadata only.
 */
export function referenceStates(input: {
  kind: WorkloadKind;
  workload: Workload;
  dialect: Dialect;
  objects: readonly ObjectFact[];
  pods: readonly V1Pod[];
  revisions: readonly RevisionFact[];
  now: Date;
}): ReferenceExplanation[] {
  const { workload, dialect, now } = input;
  const namespace = workload.metadata?.namespace ?? '';
  const template = workload.spec?.template;
  const stored = template?.metadata?.annotations ?? {};
  const facts = new Map(input.objects.map((o) => [`${o.kind}/${o.name}`, o]));
  // an object the reader could not read is taken as the template has it: no change is claimed for it
  const lookup: VersionLookup = (kind, _namespace, name) => {
    const fact = facts.get(`${kind}/${name}`);
    if (fact && fact.status !== 'unreadable') return versionOf(fact, dialect.ignoreLabel);
    const value = stored[dialect.annotationKey(kind, name)];
    const slash = value?.indexOf('/') ?? -1;
    return value === undefined || slash < 0 ? undefined : { uid: value.slice(0, slash), resourceVersion: value.slice(slash + 1), ignored: false };
  };
  const plan = planAnnotations({ dialect, namespace, annotations: workload.metadata?.annotations, template, stored, storedAt: workload.metadata?.resourceVersion, lookup });
  const desired = new Map(plan.desired.map((d) => [d.key, d]));
  const heldBack = new Set(plan.heldBack.map((h) => h.key));
  const missing = new Set(plan.missing.map((m) => m.key));
  const optedOut = dialect.ignoredNames(workload.metadata?.annotations);
  const frozen = new Set((workload.metadata?.annotations?.[FROZEN_ANNOTATION] ?? '').split(',').map((e) => e.trim()));
  const records = parseDigestRecords(workload.metadata?.annotations);
  const tracked = new Set(dialect.references(template).map((r) => `${r.kind}/${r.name}`));

  const out: ReferenceExplanation[] = [];
  for (const read of referenceReads(template)) {
    if (!tracked.has(`${read.kind}/${read.name}`)) continue;
    const { kind, name } = read;
    const annotation = dialect.annotationKey(kind, name);
    const fact = facts.get(`${kind}/${name}`);
    const version = fact ? versionOf(fact, dialect.ignoreLabel) : undefined;
    const base: ReferenceExplanation = {
      kind,
      name,
      annotation,
      reads: read.reads.map((r) => (r.keys ? { via: r.via, keys: r.keys } : { via: r.via })),
      ...(read.keys ? { keys: read.keys } : {}),
      ...(Object.hasOwn(stored, annotation) ? { template: stored[annotation] } : {}),
      pods: podVersions(input.kind, input.pods, input.revisions, annotation),
      ...(fact?.status !== 'unreadable' ? { current: valueOf(version, dialect) } : {}),
      state: 'up-to-date',
    };
    const changedAt = fact?.status === 'found' && fact.changedAt ? { changedAt: momentOf(fact.changedAt, now) } : {};
    const wanted = desired.get(annotation);
    const ignoredBy = optedOut[kind].has(name)
      ? `named in the workload's ${kind === 'ConfigMap' ? 'ConfigMap' : 'Secret'} opt-outs`
      : version?.ignored
        ? `label ${dialect.ignoreLabel}=true on the ${kind}`
        : version === undefined && frozen.has(frozenEntry(kind, name))
          ? `frozen while labelled ${dialect.ignoreLabel}=true, since deleted`
          : undefined;
    if (fact?.status === 'unreadable') {
      out.push({ ...base, state: 'unreadable', why: fact.error });
    } else if (ignoredBy !== undefined) {
      out.push({ ...base, state: wanted ? 'ignored' : 'untracked', why: ignoredBy });
    } else if (missing.has(annotation)) {
      out.push({ ...base, state: 'missing', why: `the ${kind} is gone and its pods cannot start without it (not optional): the template keeps ${base.template}, no restart` });
    } else if (wanted && wanted.value !== base.template) {
      const change = describeChange({ key: annotation, kind, name, from: base.template, to: wanted.value });
      out.push({ ...base, state: 'changed', change, ...changedAt });
    } else if (heldBack.has(annotation)) {
      out.push({ ...base, state: 'ahead', why: `the template names ${base.template}, newer than the ${kind}'s ${base.current}` });
    } else if (base.current !== base.template) {
      const record = records.get(annotation);
      const same = record && base.template !== undefined ? sameKeysSince(record, base.template) : undefined;
      if (record?.inPlaceSince !== undefined) {
        out.push({ ...base, state: 'in-place', why: `rollguard's digest record: the pods read ${record.version}'s data from their mounted files, served in place since ${record.inPlaceSince}`, ...changedAt });
      } else if (same) {
        const keys = same.length === 0 ? 'no key read' : `the ${same.length === 1 ? 'key' : 'keys'} read (${same.join(', ')})`;
        out.push({ ...base, state: 'unread-keys', why: `rollguard's digest record: ${record!.version} holds the data of ${base.template} in ${keys}`, ...changedAt });
      } else {
        out.push({ ...base, state: 'metadata-only', why: `rollguard's digest record: the data of ${record?.version ?? base.current} is the data of ${base.template}`, ...changedAt });
      }
    } else {
      out.push(base);
    }
  }
  // annotations of references the template dropped: removed with the next restart
  for (const change of annotationChanges(stored, plan.desired, dialect).filter((c) => c.to === undefined)) {
    if (desired.has(change.key)) continue;
    out.push({
      kind: change.kind ?? 'ConfigMap',
      name: change.name ?? change.key,
      annotation: change.key,
      reads: [],
      template: change.from,
      pods: podVersions(input.kind, input.pods, input.revisions, change.key),
      state: 'dropped',
      change: describeChange(change),
    });
  }
  return out;
}
