import { formatDuration, formatTiming } from '../restarter/timing.js';
import { parseAnnotationValue } from '../restarter/versions.js';
import type { Explanation, Moment, ReferenceExplanation } from './explanation.js';

/** Restarts shown in the text; `-o json` has them all. */
const TEXT_RESTARTS = 5;
const TEXT_EVENTS = 8;

/** "2025-06-01T12:00:08Z (in 3s)", "(2m5s ago)", "(now)". */
export function when(moment: Moment): string {
  const at = moment.at.replace(/\.\d{3}Z$/, 'Z');
  const s = moment.inSeconds;
  const relative = s === 0 ? 'now' : s > 0 ? `in ${formatDuration(s * 1000)}` : `${formatDuration(-s * 1000)} ago`;
  return `${at} (${relative})`;
}

/** An annotation value as a person compares it: the resourceVersion, `absent`, or the value as it is. */
export function shortVersion(value: string | undefined): string {
  if (value === undefined) return '-';
  const parsed = parseAnnotationValue(value);
  return parsed.kind === 'version' ? String(parsed.resourceVersion) : value;
}

function reads(r: ReferenceExplanation): string {
  if (r.reads.length === 0) return '-';
  const keys = r.keys ? `key${r.keys.length === 1 ? '' : 's'} ${r.keys.join(', ') || '(none named)'}` : 'all keys';
  return `${keys} (${[...new Set(r.reads.map((x) => x.via))].join(', ')})`;
}

function podsRun(r: ReferenceExplanation): string {
  if (r.pods.length === 0) return '-';
  return r.pods.map((p) => `${shortVersion(p.version)}×${p.pods}`).join(' ');
}

function table(rows: string[][], indent = '  '): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length)));
  return rows.map((row) => indent + row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ').trimEnd());
}

function referenceState(r: ReferenceExplanation): string {
  const since = r.changedAt ? ` since ${when(r.changedAt)}` : '';
  if (r.state === 'changed' || r.state === 'dropped') return `${r.state}${since}`;
  if (r.state === 'metadata-only') return `metadata only${since}, no restart`;
  if (r.state === 'unread-keys') return `changed${since} only in keys not read, no restart`;
  if (r.state === 'in-place') return `changed${since}, served in place through mounted files, no restart`;
  if (r.why) return `${r.state}: ${r.why}`;
  return r.state;
}

/** `rollguard why`'s text: what a person reads to tell why the workload restarted or did not, and what comes next. */
export function renderExplanation(e: Explanation): string {
  const { kind, namespace, name, generation } = e.workload;
  const lines: string[] = [`${kind} ${namespace}/${name}${generation !== undefined ? ` (generation ${generation})` : ''}`];
  lines.push(`State:    ${e.state}`);
  lines.push(`          ${e.summary}`);
  if (!e.managed) {
    lines.push(`Managed:  no: ${e.notManaged}`);
  } else {
    lines.push(`Managed:  yes, in ${e.dialect}'s dialect${e.notManaged ? `; ${e.notManaged}` : ''}`);
  }
  if (e.lastRestartAt) lines.push(`Last restart by rollguard: ${when(e.lastRestartAt)}`);
  if (e.managed) lines.push(`Timing:   ${formatTiming(e.timing.rules)} (${e.timing.recorded ? 'recorded on the workload by rollguard' : "rollguard's defaults: none recorded on the workload"})`);

  if (e.references.length > 0) {
    lines.push('', 'References (versions are resourceVersions):');
    lines.push(...table([['KIND', 'NAME', 'READS', 'PODS RUN', 'TEMPLATE', 'CURRENT', 'STATE'], ...e.references.map((r) => [r.kind, r.name, reads(r), podsRun(r), shortVersion(r.template), shortVersion(r.current), referenceState(r)])]));
    for (const r of e.references) if (r.change) lines.push(`  ${r.kind} ${r.name}: ${r.change}`);
  } else if (e.managed) {
    lines.push('', 'References: none (the pod template references no ConfigMap or Secret)');
  }

  if (e.next.length > 0) {
    lines.push('', 'Next:');
    for (const step of e.next) lines.push(`  - ${step.at ? `at ${when(step.at)}: ` : ''}${step.text}`);
  }

  if (e.restarts.length > 0) {
    lines.push('', 'Restarts (newest first, from the revisions of the pod template):');
    for (const r of e.restarts.slice(0, TEXT_RESTARTS)) {
      lines.push(`  ${r.revision}  ${r.at ? when(r.at) : '(time unknown)'}  ${r.cause}`);
      lines.push(`      ${r.reason}`);
      if (r.podsReplaced.length > 0) lines.push(`      pods made then or since: ${r.podsReplaced.map((p) => `${p.name}${p.at ? ` ${when(p.at)}` : ''}`).join(', ')}`);
    }
    if (e.restarts.length > TEXT_RESTARTS) lines.push(`  … ${e.restarts.length - TEXT_RESTARTS} older (-o json has them)`);
  }

  if (e.pods.length > 0) {
    lines.push('', 'Pods:');
    for (const group of e.pods) {
      const ready = group.pods.filter((p) => p.ready).length;
      lines.push(`  ${group.revision}${group.update ? ' (the template now)' : ''}: ${group.pods.length} pods, ${ready} ready: ${group.pods.map((p) => p.name).join(', ')}`);
    }
  }

  if (e.events.length > 0) {
    lines.push('', 'Events (newest first):');
    for (const ev of e.events.slice(0, TEXT_EVENTS)) lines.push(`  ${when(ev.last)}  ${ev.type} ${ev.reason}${ev.count > 1 ? ` ×${ev.count}` : ''}: ${ev.message}`);
  }

  if (e.notes.length > 0) {
    lines.push('', 'Notes:');
    for (const note of e.notes) lines.push(`  - ${note}`);
  }
  return lines.join('\n');
}

/** `rollguard list`: one line of state per workload. */
export function renderList(explanations: readonly Explanation[]): string {
  if (explanations.length === 0) return 'no workload is opted in (label rollguard.io/enabled=true) where you looked';
  const rows = explanations.map((e) => [e.workload.namespace, `${e.workload.kind}/${e.workload.name}`, e.state, e.summary]);
  return table([['NAMESPACE', 'WORKLOAD', 'STATE', 'SUMMARY'], ...rows], '').join('\n');
}
