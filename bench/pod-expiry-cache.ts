import v8 from 'node:v8';
import vm from 'node:vm';
import { EXPIRES_AT_PREFIX } from '../src/compat/expiry.js';
import { decodeExpiringPod, ExpiringPodStore } from '../src/compat/expiring-pods.js';

// What the --compat stackable Pod restarter's cache costs per pod: the heap taken by N pods'
// metadata decoded into the ExpiringPodStore, for pods with an expires-at annotation and for pods
// without one, beside the reference of keeping the same PartialObjectMetadata as parsed (what a
// metadata-only cache of whole objects holds), in one process. Prints figures and ratios; asserts nothing.
//   npm run bench -- pod-expiry-cache

const PODS = Number(process.env.BENCH_PODS ?? 20_000);

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

/** The PartialObjectMetadata of a pod as the API server sends it: labels, annotations, owner, managedFields. */
function podMetadataJson(i: number, expiring: boolean): string {
  const name = `trino-worker-default-${i}`;
  return JSON.stringify({
    kind: 'PartialObjectMetadata',
    apiVersion: 'meta.k8s.io/v1',
    metadata: {
      name,
      namespace: `team-${i % 50}`,
      uid: `0b6e2f3c-${String(i).padStart(4, '0')}-4c1e-9a57-2f6d8e1b${String(i % 10_000).padStart(4, '0')}`,
      resourceVersion: String(1_000_000 + i),
      creationTimestamp: '2026-12-01T10:00:00Z',
      generateName: 'trino-worker-default-',
      labels: { app: 'trino', 'app.kubernetes.io/instance': 'trino', 'controller-revision-hash': 'trino-worker-default-6b9f7c', 'statefulset.kubernetes.io/pod-name': name },
      annotations: {
        ...(expiring ? { [`${EXPIRES_AT_PREFIX}secret-tls`]: '2026-12-08T10:00:00Z' } : {}),
        'kubectl.kubernetes.io/default-container': 'trino',
      },
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'trino-worker-default', uid: '5d4c3b2a-1111-2222-3333-444455556666', controller: true, blockOwnerDeletion: true }],
      managedFields: [{ manager: 'kube-controller-manager', operation: 'Update', apiVersion: 'v1', time: '2026-12-01T10:00:00Z', fieldsType: 'FieldsV1', fieldsV1: { 'f:metadata': { 'f:labels': {} } } }],
    },
  });
}

function heapAfter<T>(build: () => T): { bytes: number; held: T } {
  gc();
  const before = process.memoryUsage().heapUsed;
  const held = build();
  gc();
  return { bytes: process.memoryUsage().heapUsed - before, held };
}

function run(expiring: boolean): { store: number; reference: number } {
  const texts = Array.from({ length: PODS }, (_, i) => podMetadataJson(i, expiring));
  const store = heapAfter(() => {
    const s = new ExpiringPodStore();
    for (const text of texts) s.upsert(decodeExpiringPod(JSON.parse(text)));
    return s;
  });
  const reference = heapAfter(() => texts.map((text) => JSON.parse(text) as unknown));
  if (expiring && store.held.size() !== PODS) throw new Error(`store holds ${store.held.size()} of ${PODS}`);
  // a store that keeps nothing can measure a few bytes below zero (the collector moved something)
  return { store: Math.max(0, store.bytes) / PODS, reference: reference.bytes / PODS };
}

for (const expiring of [true, false]) {
  const { store, reference } = run(expiring);
  const ratio = reference > 0 ? (store / reference).toFixed(3) : 'n/a';
  console.log(
    `${PODS} pods ${expiring ? 'with' : 'without'} an expires-at annotation: ${store.toFixed(0)} bytes per pod in the ExpiringPodStore; ` +
      `reference (parsed PartialObjectMetadata kept) ${reference.toFixed(0)} bytes per pod; ratio ${ratio}`,
  );
}
