import type { Check } from '../admission/mutators.js';
import { jsonObjectOrUndefined, stringEntries } from '../kube/json.js';
import { graceBudgetWarnings } from './grace-budget.js';
import { PRIMARY_SELECTOR_ANNOTATION } from './settings.js';

/**
 * On CREATE and UPDATE of a handover-enabled StatefulSet (a primary selector): warns when a
 * container's preStop sleeps at least terminationGracePeriodSeconds. Needs no API call and no cache.
 */
export const handoverGraceCheck: Check = (req, object) => {
  if (req.kind.kind !== 'StatefulSet' || (req.operation !== 'CREATE' && req.operation !== 'UPDATE')) return [];
  const annotations = stringEntries(jsonObjectOrUndefined(object.metadata)?.annotations);
  if (annotations?.[PRIMARY_SELECTOR_ANNOTATION] === undefined) return [];
  const template = jsonObjectOrUndefined(jsonObjectOrUndefined(object.spec)?.template);
  return graceBudgetWarnings(template?.spec);
};
