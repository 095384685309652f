import { lookup } from 'node:dns/promises';
import type { CoreV1 } from '../kube/api-clients.js';
import type { TargetLookups } from './resolve.js';

const NOT_FOUND = 404;

/** Services from the API server (one GET each), allowed hosts from DNS (all their addresses). */
export function apiTargetLookups(core: CoreV1): TargetLookups {
  return {
    async readService(namespace, name) {
      try {
        const service = await core.readNamespacedService({ namespace, name });
        const clusterIPs = service.spec?.clusterIPs ?? (service.spec?.clusterIP ? [service.spec.clusterIP] : []);
        return { name, type: service.spec?.type, clusterIPs: clusterIPs.filter((ip) => ip !== 'None') };
      } catch (err) {
        if ((err as { code?: number }).code === NOT_FOUND) return undefined;
        throw err;
      }
    },
    async resolveHost(host) {
      return (await lookup(host, { all: true })).map((a) => a.address);
    },
  };
}
