import v8 from 'node:v8';
import vm from 'node:vm';
import type { V1Pod, V1StatefulSet } from '@kubernetes/client-node';
// Not re-exported from the package root; it is what a full typed pod cache would hold.
import { ObjectSerializer } from '@kubernetes/client-node/dist/serializer.js';
import { decideRollout } from '../src/rollout/decision.js';
import { HANDOVER_POD_ANNOTATIONS } from '../src/handover/state.js';
import { PodCache, decodePod } from '../src/rollout/pod-cache.js';

// Memory of the rollout controller's pod cache: heap per pod held slim (PodCache) against the
// same pods held as whole typed V1Pods, from realistic wire JSON; and the time of one decision
// for a large set. Prints figures; asserts nothing.
// Run: npm run bench -- rollout-pod-cache

const PODS = Number(process.env.BENCH_PODS ?? 20_000);
const PODS_PER_SET = 100;
const DECISIONS = 2_000;
/** What the cache is meant to stay under per pod, so that a cluster of 20,000 StatefulSet pods costs tens of MB. */
const TARGET_BYTES_PER_POD = 1024;

/** A StatefulSet pod as the API server lists it: managedFields, a few env vars, volumes, probes. */
function wirePod(index: number): string {
  const set = `app${Math.floor(index / PODS_PER_SET)}`;
  const name = `${set}-${index % PODS_PER_SET}`;
  const time = '2025-03-01T11:00:00Z';
  return JSON.stringify({
    metadata: {
      name,
      namespace: 'bench',
      uid: `0b6c${String(index).padStart(8, '0')}-4e3a-4f0e-9a61-2f4d5c6b7a8e`,
      resourceVersion: String(100_000 + index),
      creationTimestamp: time,
      labels: { app: set, 'controller-revision-hash': `${set}-5d8f7c9b4`, 'statefulset.kubernetes.io/pod-name': name, 'apps.kubernetes.io/pod-index': String(index % PODS_PER_SET) },
      annotations: { 'configmap.rollguard.io/settings': `1f2e3d4c-0000-4000-8000-${String(index).padStart(12, '0')}/12345` },
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: set, uid: 'a1b2c3d4-0000-4000-8000-000000000000', controller: true, blockOwnerDeletion: true }],
      managedFields: [
        { manager: 'kube-controller-manager', operation: 'Update', apiVersion: 'v1', time, fieldsType: 'FieldsV1', fieldsV1: { 'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} } }, 'f:spec': { 'f:containers': { 'k:{"name":"app"}': { '.': {}, 'f:image': {}, 'f:env': {} } } } } },
        { manager: 'kubelet', operation: 'Update', apiVersion: 'v1', time, fieldsType: 'FieldsV1', subresource: 'status', fieldsV1: { 'f:status': { 'f:conditions': {}, 'f:containerStatuses': {}, 'f:phase': {}, 'f:podIP': {} } } },
      ],
    },
    spec: {
      hostname: name,
      subdomain: set,
      containers: [
        {
          name: 'app',
          image: 'registry.example/app:1.2.3',
          env: Array.from({ length: 8 }, (_, i) => ({ name: `SETTING_${i}`, value: `value-${i}-${'x'.repeat(24)}` })),
          ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }],
          readinessProbe: { httpGet: { path: '/ready', port: 8080, scheme: 'HTTP' }, periodSeconds: 5, timeoutSeconds: 1, successThreshold: 1, failureThreshold: 3 },
          resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
          volumeMounts: [{ name: 'data', mountPath: '/data' }, { name: 'kube-api-access', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true }],
        },
      ],
      volumes: [{ name: 'data', persistentVolumeClaim: { claimName: `data-${name}` } }, { name: 'kube-api-access', projected: { sources: [{ serviceAccountToken: { path: 'token', expirationSeconds: 3607 } }] } }],
      nodeName: `node-${index % 50}`,
    },
    status: {
      phase: 'Running',
      hostIP: '10.0.0.1',
      podIP: `10.1.${Math.floor(index / 250)}.${index % 250}`,
      startTime: time,
      conditions: ['PodReadyToStartContainers', 'Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map((type) => ({ type, status: 'True', lastProbeTime: null, lastTransitionTime: time })),
      containerStatuses: [{ name: 'app', image: 'registry.example/app:1.2.3', imageID: 'registry.example/app@sha256:' + 'a'.repeat(64), containerID: 'containerd://' + 'b'.repeat(64), ready: true, started: true, restartCount: 0, state: { running: { startedAt: time } } }],
      qosClass: 'Burstable',
    },
  });
}

function heapAfterGc(gc: () => void): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

function main(): void {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  const wire = Array.from({ length: PODS }, (_, i) => wirePod(i));
  const wireBytes = wire.reduce((n, json) => n + json.length, 0);

  const baseSlim = heapAfterGc(gc);
  const cache = new PodCache();
  for (const json of wire) cache.upsert(decodePod(JSON.parse(json), HANDOVER_POD_ANNOTATIONS));
  const slimBytes = heapAfterGc(gc) - baseSlim;

  const baseFull = heapAfterGc(gc);
  const full: V1Pod[] = wire.map((json) => ObjectSerializer.deserialize(JSON.parse(json), 'V1Pod') as V1Pod);
  const fullBytes = heapAfterGc(gc) - baseFull;

  const set: V1StatefulSet = {
    metadata: { name: 'app0', namespace: 'bench', generation: 2, labels: { 'rollguard.io/enabled': 'true' }, annotations: { 'rollguard.io/rollout': 'health-gated' } },
    spec: { replicas: PODS_PER_SET, serviceName: 'app0', selector: {}, template: {}, updateStrategy: { type: 'RollingUpdate', rollingUpdate: { partition: PODS_PER_SET } } },
    status: { replicas: PODS_PER_SET, observedGeneration: 2, currentRevision: 'app0-5d8f7c9b4', updateRevision: 'app0-7b9c4e' },
  };
  const pods = cache.podsOf('bench', 'app0');
  const started = performance.now();
  for (let i = 0; i < DECISIONS; i++) decideRollout({ set, pods, now: new Date(), minStepIntervalMs: 0, defaultMinReadySeconds: 0 });
  const decisionUs = ((performance.now() - started) * 1000) / DECISIONS;

  const perPod = (bytes: number): string => `${Math.round(bytes / PODS)} B/pod`;
  console.log(`pods: ${cache.size()} (wire JSON ${perPod(wireBytes)})`);
  console.log(`slim PodCache:     ${(slimBytes / 2 ** 20).toFixed(1)} MiB, ${perPod(slimBytes)} (target ≤ ${TARGET_BYTES_PER_POD} B/pod: ${slimBytes / PODS <= TARGET_BYTES_PER_POD ? 'met' : 'MISSED'})`);
  console.log(`full typed V1Pods: ${(fullBytes / 2 ** 20).toFixed(1)} MiB, ${perPod(fullBytes)} (held ${full.length})`);
  console.log(`ratio full/slim:   ${(fullBytes / slimBytes).toFixed(1)}x`);
  console.log(`decideRollout on ${PODS_PER_SET} pods: ${decisionUs.toFixed(1)} µs per decision`);
}

main();
