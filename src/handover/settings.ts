import type { V1StatefulSet } from '@kubernetes/client-node';
import { parseDuration } from '../config.js';
import type { StatefulSetOnlyFeature } from '../restarter/kind-features.js';
import { parseSelector, type Requirement } from './selector.js';

/** The annotations of the handover contract, all on the StatefulSet. */
export const PRIMARY_SELECTOR_ANNOTATION = 'rollguard.io/primary-selector';
export const HANDOVER_HTTP_ANNOTATION = 'rollguard.io/handover-http';
export const HANDOVER_BODY_ANNOTATION = 'rollguard.io/handover-body';
export const HANDOVER_ANNOTATE_ANNOTATION = 'rollguard.io/handover-annotate';
export const HANDOVER_TIMEOUT_ANNOTATION = 'rollguard.io/handover-timeout';
export const HANDOVER_RETRIES_ANNOTATION = 'rollguard.io/handover-retries';
export const HANDOVER_INTERVAL_ANNOTATION = 'rollguard.io/handover-interval';
export const HANDOVER_FALLBACK_ANNOTATION = 'rollguard.io/handover-fallback';
export const HANDOVER_ON_FAILURE_ANNOTATION = 'rollguard.io/handover-on-failure';
export const HANDOVER_CREDENTIALS_ANNOTATION = 'rollguard.io/handover-credentials';
export const HANDOVER_PAUSE_TIMEOUT_ANNOTATION = 'rollguard.io/handover-pause-timeout';

/** A handover picks pods by ordinal and steps by partition: StatefulSets only (restarter/kind-features.ts warns the others). */
export const PRIMARY_HANDOVER: StatefulSetOnlyFeature = {
  feature: 'primary handover',
  asks: (key) => key === PRIMARY_SELECTOR_ANNOTATION || key.startsWith('rollguard.io/handover'),
};

export const DEFAULT_HANDOVER_TIMEOUT_MS = 30_000;
export const DEFAULT_HANDOVER_RETRIES = 3;
export const DEFAULT_HANDOVER_INTERVAL_MS = 10_000;
/** A paused handover keeps trying this long, then gives up and leaves the rollout held for a person. */
export const DEFAULT_HANDOVER_PAUSE_TIMEOUT_MS = 60 * 60_000;
const MIN_PAUSE_TIMEOUT_MS = 1_000;
const MAX_PAUSE_TIMEOUT_MS = 7 * 24 * 60 * 60_000;
/** Past these a typo (`300` meant as seconds, `retries: 1000`) would stall a rollout for days. */
const MAX_TIMEOUT_MS = 10 * 60_000;
const MAX_INTERVAL_MS = 10 * 60_000;
const MAX_RETRIES = 20;
const MIN_TIMEOUT_MS = 100;

const METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']);
const MAX_PORT = 65_535;
const FALLBACK_ANNOTATE_PREFIX = 'annotate:';

/** What the handover does. `on`: the pod it calls, the primary or the chosen candidate. */
export type HandoverAction =
  | { kind: 'http'; on: 'primary' | 'candidate'; method: string; scheme: 'http' | 'https'; port: number; path: string }
  | { kind: 'annotate'; key: string; value: string };

export interface HandoverSettings {
  selectorText: string;
  selector: Requirement[];
  action: HandoverAction;
  /** The body template of an http action; {primary} {candidate} {namespace} {set} are replaced. */
  body?: string;
  fallback?: HandoverAction;
  timeoutMs: number;
  retries: number;
  intervalMs: number;
  onFailure: 'pause' | 'proceed';
  /** How long a paused handover keeps trying before it gives up (no more calls; the step stays held). */
  pauseTimeoutMs: number;
  /** A Secret in the set's namespace: username+password (basic) or token (bearer), ca.crt for https. */
  credentials?: string;
}

export type ParsedSettings = { ok: true; settings: HandoverSettings } | { ok: false; reason: string };

/** True when the set asks for handovers at all (a primary selector, valid or not). */
export function wantsHandover(set: V1StatefulSet): boolean {
  return set.metadata?.annotations?.[PRIMARY_SELECTOR_ANNOTATION] !== undefined;
}

/** `[candidate:] METHOD [https]:PORT[/PATH]`, e.g. `POST :8008/switchover`, `candidate: POST https:8443/promote`. */
export function parseHttpAction(text: string): HandoverAction | string {
  let rest = text.trim();
  let on: 'primary' | 'candidate' = 'primary';
  if (rest.startsWith('candidate:')) {
    on = 'candidate';
    rest = rest.slice('candidate:'.length).trim();
  }
  const m = /^([A-Z]+)\s+(https?)?:(\d{1,5})(\/\S*)?$/.exec(rest);
  if (!m) return `${JSON.stringify(text)} is not "[candidate:] METHOD :PORT/PATH" (e.g. "POST :8008/switchover")`;
  const method = m[1]!;
  if (!METHODS.has(method)) return `${method} is not one of ${[...METHODS].join(', ')}`;
  const port = Number(m[3]);
  if (port < 1 || port > MAX_PORT) return `port ${m[3]} is not between 1 and ${MAX_PORT}`;
  return { kind: 'http', on, method, scheme: m[2] === 'https' ? 'https' : 'http', port, path: m[4] ?? '/' };
}

/** `key=value`: an annotation name (optional prefix) and any value. */
export function parseAnnotateAction(text: string): HandoverAction | string {
  const at = text.indexOf('=');
  const key = (at < 0 ? text : text.slice(0, at)).trim();
  if (at < 0 || !/^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(key)) {
    return `${JSON.stringify(text)} is not "key=value" with an annotation name as key`;
  }
  if (key.startsWith('rollguard.io/')) return `${key}: rollguard's own annotations cannot be the handover action`;
  return { kind: 'annotate', key, value: text.slice(at + 1).trim() };
}

function duration(annotations: Record<string, string>, name: string, fallback: number, min: number, max: number): number | string {
  const raw = annotations[name];
  if (raw === undefined) return fallback;
  const ms = parseDuration(raw);
  if (ms === undefined) return `${name}: ${JSON.stringify(raw)} is not a duration (e.g. 30s, 500ms, 2m)`;
  if (ms < min || ms > max) return `${name}: ${raw} is not between ${min} ms and ${max / 60_000} m`;
  return ms;
}

/**
 * The handover settings of a set whose annotations name a primary selector. Invalid
 * settings are a reason, never a guess: the caller blocks steps of the set with it.
 */
export function handoverSettings(set: V1StatefulSet): ParsedSettings | undefined {
  const a = set.metadata?.annotations ?? {};
  const selectorText = a[PRIMARY_SELECTOR_ANNOTATION];
  if (selectorText === undefined) return undefined;
  const fail = (reason: string): ParsedSettings => ({ ok: false, reason });
  const selector = parseSelector(selectorText);
  if (!selector.ok) return fail(`${PRIMARY_SELECTOR_ANNOTATION}: ${selector.reason}`);

  const http = a[HANDOVER_HTTP_ANNOTATION];
  const annotate = a[HANDOVER_ANNOTATE_ANNOTATION];
  if ((http === undefined) === (annotate === undefined)) {
    return fail(`exactly one of ${HANDOVER_HTTP_ANNOTATION} and ${HANDOVER_ANNOTATE_ANNOTATION} names the handover action`);
  }
  const action = http !== undefined ? parseHttpAction(http) : parseAnnotateAction(annotate ?? '');
  if (typeof action === 'string') return fail(`${http !== undefined ? HANDOVER_HTTP_ANNOTATION : HANDOVER_ANNOTATE_ANNOTATION}: ${action}`);

  let fallback: HandoverAction | undefined;
  const fallbackText = a[HANDOVER_FALLBACK_ANNOTATION];
  if (fallbackText !== undefined) {
    const parsed = fallbackText.trim().startsWith(FALLBACK_ANNOTATE_PREFIX)
      ? parseAnnotateAction(fallbackText.trim().slice(FALLBACK_ANNOTATE_PREFIX.length))
      : parseHttpAction(fallbackText);
    if (typeof parsed === 'string') return fail(`${HANDOVER_FALLBACK_ANNOTATION}: ${parsed}`);
    fallback = parsed;
  }

  const timeoutMs = duration(a, HANDOVER_TIMEOUT_ANNOTATION, DEFAULT_HANDOVER_TIMEOUT_MS, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS);
  if (typeof timeoutMs === 'string') return fail(timeoutMs);
  const intervalMs = duration(a, HANDOVER_INTERVAL_ANNOTATION, DEFAULT_HANDOVER_INTERVAL_MS, 0, MAX_INTERVAL_MS);
  if (typeof intervalMs === 'string') return fail(intervalMs);
  const pauseTimeoutMs = duration(a, HANDOVER_PAUSE_TIMEOUT_ANNOTATION, DEFAULT_HANDOVER_PAUSE_TIMEOUT_MS, MIN_PAUSE_TIMEOUT_MS, MAX_PAUSE_TIMEOUT_MS);
  if (typeof pauseTimeoutMs === 'string') return fail(pauseTimeoutMs);

  let retries = DEFAULT_HANDOVER_RETRIES;
  const retriesText = a[HANDOVER_RETRIES_ANNOTATION];
  if (retriesText !== undefined) {
    if (!/^\d+$/.test(retriesText.trim()) || Number(retriesText) < 1 || Number(retriesText) > MAX_RETRIES) {
      return fail(`${HANDOVER_RETRIES_ANNOTATION}: ${JSON.stringify(retriesText)} is not a whole number from 1 to ${MAX_RETRIES}`);
    }
    retries = Number(retriesText);
  }

  const onFailureText = a[HANDOVER_ON_FAILURE_ANNOTATION] ?? 'pause';
  if (onFailureText !== 'pause' && onFailureText !== 'proceed') {
    return fail(`${HANDOVER_ON_FAILURE_ANNOTATION}: ${JSON.stringify(onFailureText)} is not "pause" or "proceed"`);
  }

  const credentials = a[HANDOVER_CREDENTIALS_ANNOTATION];
  if (credentials !== undefined && !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(credentials)) {
    return fail(`${HANDOVER_CREDENTIALS_ANNOTATION}: ${JSON.stringify(credentials)} is not a Secret name`);
  }

  const body = a[HANDOVER_BODY_ANNOTATION];
  return {
    ok: true,
    settings: {
      selectorText,
      selector: selector.requirements,
      action,
      ...(body !== undefined ? { body } : {}),
      ...(fallback ? { fallback } : {}),
      timeoutMs,
      retries,
      intervalMs,
      onFailure: onFailureText,
      pauseTimeoutMs,
      ...(credentials !== undefined ? { credentials } : {}),
    },
  };
}

/** The body template with its placeholders filled in. */
export function renderBody(template: string, values: { primary: string; candidate: string; namespace: string; set: string }): string {
  return template.replace(/\{(primary|candidate|namespace|set)\}/g, (_, name: keyof typeof values) => values[name]);
}

/** How an action reads in Events: `POST :8008/switchover on the candidate`, `annotation moco.cybozu.com/demote=true`. */
export function describeAction(action: HandoverAction): string {
  if (action.kind === 'annotate') return `annotation ${action.key}=${action.value}`;
  const scheme = action.scheme === 'https' ? 'https' : '';
  return `${action.method} ${scheme}:${action.port}${action.path} on the ${action.on}`;
}
