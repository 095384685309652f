import type { V1StatefulSet } from '@kubernetes/client-node';
import { appsV1 } from '../kube/api-clients.js';
import type { KubeAccess } from '../kube/kube-client.js';
import type { Operation } from 'fast-json-patch';
import type { Logger } from 'pino';
import { admissionResponseFor, parseAdmissionReview, type HandlerResult } from '../admission/review.js';
import { errorText, statusCode } from '../kube/api-status.js';
import { jsonObjectOrUndefined } from '../kube/json.js';
import { dropRecordOps } from '../rollout/scale-down-hold.js';
import { decideScaleWrite, recordOps } from './scale-down.js';

const UNPROCESSABLE = 422;

export interface ScaleHandlerOptions {
  /** An opted-in StatefulSet from the shared cache. */
  statefulSet(namespace: string, name: string): V1StatefulSet | undefined;
  /** JSON Patch of the set's annotations: the one API call of this path (never on a dry run). */
  patchSet(namespace: string, name: string, ops: Operation[]): Promise<void>;
  logger: Logger;
}

function replicasOf(scale: unknown): number | undefined {
  const value = jsonObjectOrUndefined(jsonObjectOrUndefined(scale)?.spec)?.replicas;
  return Number.isSafeInteger(value) ? (value as number) : undefined;
}

function answer(uid: string, ops: Operation[], warning?: string): HandlerResult {
  const review = admissionResponseFor(uid, ops);
  if (warning !== undefined && review.response) review.response.warnings = [warning];
  return { status: 200, body: review };
}

/**
 * `/mutate-scale`: UPDATE statefulsets/scale. A scale-down of a handover-enabled set is held
 * as a spec update is (scaleHoldOps): the Scale keeps the old replicas and the wanted count is
 * recorded on the set, with one PATCH, before the answer (held only if recorded). Anything it
 * cannot read or record passes unheld, with a warning: the leader's PrimaryScaledDown Warning
 * stays the backstop, and a scale must never hang on rollguard.
 */
export function createScaleHandler(opts: ScaleHandlerOptions): (body: unknown) => Promise<HandlerResult> {
  return async (body) => {
    const parsed = parseAdmissionReview(body);
    if (!parsed.ok) return { status: 400, body: { reason: parsed.reason } };
    const request = parsed.review.request!;
    const namespace = request.namespace ?? '';
    const name = request.name ?? '';
    if (request.resource?.group !== 'apps' || request.resource.resource !== 'statefulsets' || request.subResource !== 'scale' || request.operation !== 'UPDATE' || !name) {
      return answer(request.uid, []);
    }
    const set = opts.statefulSet(namespace, name);
    const verdict = decideScaleWrite(set, replicasOf(request.oldObject), replicasOf(request.object));
    if (verdict.kind === 'pass') return answer(request.uid, []);
    const log = { statefulSet: `${namespace}/${name}` };
    try {
      if (verdict.kind === 'drop') {
        if (request.dryRun !== true) await opts.patchSet(namespace, name, dropRecordOps(verdict.raw)).catch((err: unknown) => {
          // the record changed or went meanwhile: nothing of it is left to drop
          if (statusCode(err) !== UNPROCESSABLE) throw err;
        });
        return answer(request.uid, []);
      }
      if (request.dryRun !== true) await opts.patchSet(namespace, name, recordOps(set?.metadata?.uid ?? '', verdict.to));
      opts.logger.info({ ...log, from: verdict.from, to: verdict.to, dryRun: request.dryRun === true }, 'scale-down held at the scale subresource until the primary has left the pods it removes');
      return answer(request.uid, [{ op: 'replace', path: '/spec/replicas', value: verdict.from }]);
    } catch (err) {
      opts.logger.warn({ ...log, err: errorText(err) }, 'scale-down could not be held; passed as written');
      return answer(request.uid, [], `rollguard could not hold this scale-down for a primary handover (${errorText(err)}); passed as written`);
    }
  };
}

/** The scale-down hold at the scale subresource on a cluster: the set from the shared cache, one PATCH of its record. */
export function scaleGuard(opts: { kubeConfig: KubeAccess; statefulSets: { get(namespace: string, name: string): V1StatefulSet | undefined }; logger: Logger }): (body: unknown) => Promise<HandlerResult> {
  const apps = appsV1(opts.kubeConfig);
  return createScaleHandler({
    statefulSet: (namespace, name) => opts.statefulSets.get(namespace, name),
    patchSet: async (namespace, name, ops) => {
      await apps.patchNamespacedStatefulSet({ name, namespace, body: ops });
    },
    logger: opts.logger.child({ component: 'scale-guard' }),
  });
}
