import type { AdmissionHandler } from '../server/webhook-server.js';
import type { Metrics } from '../metrics.js';
import { admit, type TemplateMutator } from './admission.js';
import { parseAdmissionReview } from './admission-review.js';
import type { VersionLookup } from './annotations.js';

export interface AdmissionHandlerOptions {
  cachesSynced: () => boolean;
  lookup: VersionLookup;
  mutators?: TemplateMutator[];
  metrics: Metrics;
}

/** `/mutate`'s decision: a 400 with the reason for a review it cannot answer, else always allowed. */
export function createAdmissionHandler(opts: AdmissionHandlerOptions): AdmissionHandler {
  return (body) => {
    const parsed = parseAdmissionReview(body);
    if (!parsed.ok) return { status: 400, body: { reason: parsed.reason } };
    const synced = opts.cachesSynced();
    const response = admit(parsed.review, { cachesSynced: synced, lookup: opts.lookup, mutators: opts.mutators });
    const result = !synced ? 'not_synced' : response.response?.patch ? 'patched' : 'unchanged';
    opts.metrics.admissionReviews.inc({ result });
    return { status: 200, body: response };
  };
}
