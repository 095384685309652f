import type { Operation } from 'fast-json-patch';
import { isJsonObject, nestedDeeperThan } from '../kube/json.js';

export const ADMISSION_API_VERSION = 'admission.k8s.io/v1';
export const ADMISSION_REVIEW_KIND = 'AdmissionReview';

export interface GroupVersionKind {
  group: string;
  version: string;
  kind: string;
}

export interface GroupVersionResource {
  group: string;
  version: string;
  resource: string;
}

export type AdmissionOperation = 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';

export interface AdmissionUserInfo {
  username?: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

export interface AdmissionRequest {
  uid: string;
  kind: GroupVersionKind;
  resource: GroupVersionResource;
  subResource?: string;
  requestKind?: GroupVersionKind;
  requestResource?: GroupVersionResource;
  requestSubResource?: string;
  name?: string;
  namespace?: string;
  operation: AdmissionOperation;
  userInfo?: AdmissionUserInfo;
  /** The object as the API server decoded it; null or absent for DELETE and CONNECT. */
  object?: unknown;
  oldObject?: unknown;
  dryRun?: boolean;
  options?: unknown;
}

export interface AdmissionStatus {
  code?: number;
  message?: string;
  reason?: string;
}

export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: AdmissionStatus;
  patchType?: 'JSONPatch';
  /** base64 of the JSON Patch document. */
  patch?: string;
  auditAnnotations?: Record<string, string>;
  warnings?: string[];
}

export interface AdmissionReview {
  apiVersion: typeof ADMISSION_API_VERSION;
  kind: typeof ADMISSION_REVIEW_KIND;
  request?: AdmissionRequest;
  response?: AdmissionResponse;
}

/**
 * A StatefulSet is a built-in type whose schema is about 20 levels deep, and the API server drops
 * unknown fields: 100 levels take any object it sends, and keep the mutators' recursive code
 * (structuredClone, spec comparison) far from the stack limit that a hostile body could reach.
 */
export const MAX_OBJECT_NESTING = 100;

export type ParsedAdmissionReview = { ok: true; review: AdmissionReview } | { ok: false; reason: string };

const OPERATIONS: readonly string[] = ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'] satisfies AdmissionOperation[];

export function isAdmissionOperation(value: unknown): value is AdmissionOperation {
  return typeof value === 'string' && OPERATIONS.includes(value);
}

function shown(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value);
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function groupVersionKindProblem(field: string, value: unknown): string | undefined {
  if (!isJsonObject(value)) return `${field}: expected an object {group, version, kind}, got ${shown(value)}`;
  for (const part of ['group', 'version', 'kind'] as const) {
    if (typeof value[part] !== 'string') return `${field}.${part}: expected a string, got ${shown(value[part])}`;
  }
  return undefined;
}

/**
 * Checks an incoming body before it is trusted as an AdmissionReview. Only what the
 * handler relies on is checked; the rest is taken as the API server sent it.
 */
export function parseAdmissionReview(body: unknown): ParsedAdmissionReview {
  if (!isJsonObject(body)) return { ok: false, reason: `body: expected an AdmissionReview object, got ${shown(body)}` };
  if (body.apiVersion !== ADMISSION_API_VERSION) {
    return { ok: false, reason: `apiVersion: expected "${ADMISSION_API_VERSION}", got ${shown(body.apiVersion)}` };
  }
  if (body.kind !== ADMISSION_REVIEW_KIND) {
    return { ok: false, reason: `kind: expected "${ADMISSION_REVIEW_KIND}", got ${shown(body.kind)}` };
  }
  const request = body.request;
  if (!isJsonObject(request)) return { ok: false, reason: `request: expected an object, got ${shown(request)}` };
  if (typeof request.uid !== 'string' || request.uid === '') {
    return { ok: false, reason: `request.uid: expected a non-empty string, got ${shown(request.uid)}` };
  }
  const kindProblem = groupVersionKindProblem('request.kind', request.kind);
  if (kindProblem) return { ok: false, reason: kindProblem };
  if (!isAdmissionOperation(request.operation)) {
    return {
      ok: false,
      reason: `request.operation: expected one of ${OPERATIONS.join(', ')}, got ${shown(request.operation)}`,
    };
  }
  for (const field of ['name', 'namespace', 'subResource'] as const) {
    const value = request[field];
    if (value !== undefined && value !== null && typeof value !== 'string') {
      return { ok: false, reason: `request.${field}: expected a string, got ${shown(value)}` };
    }
  }
  for (const field of ['object', 'oldObject'] as const) {
    if (nestedDeeperThan(request[field], MAX_OBJECT_NESTING)) {
      return { ok: false, reason: `request.${field}: nested more than ${MAX_OBJECT_NESTING} levels deep; no Kubernetes object is` };
    }
  }
  // The checks above cover every field the handler reads without a guard; the objects are read through workload-view.ts.

  return { ok: true, review: body as unknown as AdmissionReview };
}

/** What a route of the webhook server answers: an HTTP status and a JSON body. */
export interface HandlerResult {
  status: number;
  body: unknown;
}

/**
 * Answers one review body. The body has passed ADMISSION_REVIEW_SCHEMA and nothing more: a
 * handler checks the rest with parseAdmissionReview. The webhook server calls it; the features
 * implement it, and neither imports the other.
 */
export type ReviewHandler = (review: unknown) => HandlerResult | Promise<HandlerResult>;

/** What the server checks of every body before a handler sees it: only what it needs to answer at all. */
export const ADMISSION_REVIEW_SCHEMA = {
  type: 'object',
  required: ['apiVersion', 'kind', 'request'],
  properties: {
    apiVersion: { const: ADMISSION_API_VERSION },
    kind: { const: ADMISSION_REVIEW_KIND },
    request: {
      type: 'object',
      required: ['uid'],
      properties: { uid: { type: 'string', minLength: 1 } },
    },
  },
} as const;

/** One violation of ADMISSION_REVIEW_SCHEMA, shaped as Ajv reports one (the webhook server's schemaReason reads it). */
export interface EnvelopeIssue {
  instancePath: string;
  schemaPath: string;
  keyword: string;
  params: Record<string, unknown>;
  message: string;
}

/** "/request/uid" -> "/properties/request/properties/uid": where in the schema a field's rules are */
const schemaPathOf = (instancePath: string): string => instancePath.split('/').slice(1).map((p) => `/properties/${p}`).join('');

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * ADMISSION_REVIEW_SCHEMA checked by hand, with the first issue Ajv would report (Fastify's
 * default, allErrors off: type, then each required key in order, then each property in order):
 * Ajv and its compiler cost the process about 3 MB for a schema of six rules.
 * test/unit/admission-envelope.test.ts holds the two equal on generated bodies.
 */
export function envelopeIssues(body: unknown): EnvelopeIssue[] {
  const issue = (instancePath: string, keyword: string, params: Record<string, unknown>, message: string): EnvelopeIssue[] => [
    { instancePath, schemaPath: `#${schemaPathOf(instancePath)}/${keyword}`, keyword, params, message },
  ];
  if (!isObject(body)) return issue('', 'type', { type: 'object' }, 'must be object');
  for (const key of ADMISSION_REVIEW_SCHEMA.required) {
    if (!(key in body) || body[key] === undefined) return issue('', 'required', { missingProperty: key }, `must have required property '${key}'`);
  }
  const { properties } = ADMISSION_REVIEW_SCHEMA;
  if (body.apiVersion !== properties.apiVersion.const) return issue('/apiVersion', 'const', { allowedValue: properties.apiVersion.const }, 'must be equal to constant');
  if (body.kind !== properties.kind.const) return issue('/kind', 'const', { allowedValue: properties.kind.const }, 'must be equal to constant');
  const request = body.request;
  if (!isObject(request)) return issue('/request', 'type', { type: 'object' }, 'must be object');
  if (!('uid' in request) || request.uid === undefined) return issue('/request', 'required', { missingProperty: 'uid' }, "must have required property 'uid'");
  if (typeof request.uid !== 'string') return issue('/request/uid', 'type', { type: 'string' }, 'must be string');
  if ([...request.uid].length < 1) return issue('/request/uid', 'minLength', { limit: 1 }, 'must NOT have fewer than 1 characters');
  return [];
}

/** An allowing review response for `uid`, carrying `ops` as a JSON Patch and `warnings` when there are any. */
export function admissionResponseFor(uid: string, ops: Operation[], warnings: readonly string[] = []): AdmissionReview {
  const response: AdmissionResponse = { uid, allowed: true };
  if (ops.length > 0) {
    response.patchType = 'JSONPatch';
    response.patch = Buffer.from(JSON.stringify(ops)).toString('base64');
  }
  if (warnings.length > 0) response.warnings = [...warnings];
  return { apiVersion: ADMISSION_API_VERSION, kind: ADMISSION_REVIEW_KIND, response };
}
