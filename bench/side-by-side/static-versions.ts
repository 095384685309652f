import fs from 'node:fs';
import path from 'node:path';
import type { ObjectKind } from '../../src/restarter/references.js';
import type { ObjectVersion, VersionLookup } from '../../src/restarter/annotations.js';

/** Versions both servers look up without an API server: the peer reads the same file (its --versions flag). */
export interface StaticVersions {
  /** for every object not named in `objects`; null: absent */
  default: ObjectVersion | null;
  /** `Kind/namespace/name`; null: absent */
  objects: Record<string, ObjectVersion | null>;
}

export const BENCH_UID = '0b6a3e7e-4c1b-4f0e-9a7e-6f3c2d1e0f9a';

export const BENCH_VERSIONS: StaticVersions = {
  default: { uid: BENCH_UID, resourceVersion: '123456', ignored: false },
  objects: {
    'ConfigMap/prod/gone-config': null,
    'Secret/prod/gone-secret': null,
    'Secret/prod/ignored-secret': { uid: 'a1e2b3c4-0000-4000-8000-00000000000a', resourceVersion: '77', ignored: true },
  },
};

export function writeVersionsFile(dir: string, versions: StaticVersions): string {
  const file = path.join(dir, 'versions.json');
  fs.writeFileSync(file, JSON.stringify(versions));
  return file;
}

export function staticLookup(file: string): VersionLookup {
  const versions = JSON.parse(fs.readFileSync(file, 'utf8')) as StaticVersions;
  return (kind: ObjectKind, namespace: string, name: string) => {
    const key = `${kind}/${namespace}/${name}`;
    return (Object.hasOwn(versions.objects, key) ? versions.objects[key] : versions.default) ?? undefined;
  };
}
