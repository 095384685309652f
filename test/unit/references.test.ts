import { describe, expect, it } from 'vitest';
import type { V1Container, V1PodTemplateSpec, V1Volume } from '@kubernetes/client-node';
import { referenceReads, referencedObjects, type Reference } from '../../src/restarter/references.js';

function template(spec: { containers?: V1Container[]; initContainers?: V1Container[]; volumes?: V1Volume[] }): V1PodTemplateSpec {
  return { spec: { containers: spec.containers ?? [{ name: 'app' }], initContainers: spec.initContainers, volumes: spec.volumes } };
}

const cm = (name: string): Reference => ({ kind: 'ConfigMap', name });
const secret = (name: string): Reference => ({ kind: 'Secret', name });

describe('referencedObjects', () => {
  const cases: { name: string; template: V1PodTemplateSpec | undefined; want: Reference[] }[] = [
    { name: 'no template', template: undefined, want: [] },
    { name: 'template without spec', template: { metadata: { labels: { app: 'db' } } }, want: [] },
    { name: 'containers without references', template: template({}), want: [] },
    {
      name: 'configMap and secret volumes (secret by secretName)',
      template: template({
        volumes: [
          { name: 'config', configMap: { name: 'db-config' } },
          { name: 'tls', secret: { secretName: 'db-tls' } },
          { name: 'scratch', emptyDir: {} },
        ],
      }),
      want: [cm('db-config'), secret('db-tls')],
    },
    {
      name: 'projected sources, other projections ignored',
      template: template({
        volumes: [
          {
            name: 'all',
            projected: {
              sources: [
                { configMap: { name: 'proj-cm', optional: true } },
                { secret: { name: 'proj-secret' } },
                { serviceAccountToken: { path: 'token' } },
                { downwardAPI: { items: [{ path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } }] } },
              ],
            },
          },
        ],
      }),
      want: [cm('proj-cm'), secret('proj-secret')],
    },
    {
      name: 'env value sources, field refs ignored',
      template: template({
        containers: [
          {
            name: 'app',
            env: [
              { name: 'LEVEL', valueFrom: { configMapKeyRef: { name: 'settings', key: 'level' } } },
              { name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'creds', key: 'password', optional: true } } },
              { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
              { name: 'PLAIN', value: 'x' },
            ],
          },
        ],
      }),
      want: [cm('settings'), secret('creds')],
    },
    {
      name: 'envFrom',
      template: template({
        containers: [{ name: 'app', envFrom: [{ configMapRef: { name: 'env-cm' } }, { prefix: 'S_', secretRef: { name: 'env-secret' } }] }],
      }),
      want: [cm('env-cm'), secret('env-secret')],
    },
    {
      name: 'init containers and sidecars only',
      template: template({
        initContainers: [
          { name: 'migrate', envFrom: [{ secretRef: { name: 'migrate-creds' } }] },
          { name: 'proxy', restartPolicy: 'Always', env: [{ name: 'C', valueFrom: { configMapKeyRef: { name: 'proxy-config', key: 'c' } } }] },
        ],
      }),
      want: [cm('proxy-config'), secret('migrate-creds')],
    },
    {
      name: 'duplicates across containers, volumes and env collapse to one entry',
      template: template({
        volumes: [{ name: 'config', configMap: { name: 'shared' } }],
        initContainers: [{ name: 'init', envFrom: [{ configMapRef: { name: 'shared' } }] }],
        containers: [
          { name: 'a', env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'shared', key: 'x' } } }] },
          { name: 'b', envFrom: [{ configMapRef: { name: 'shared' } }] },
        ],
      }),
      want: [cm('shared')],
    },
    {
      name: 'a ConfigMap and a Secret with the same name are two references',
      template: template({
        volumes: [
          { name: 'c', configMap: { name: 'same' } },
          { name: 's', secret: { secretName: 'same' } },
        ],
      }),
      want: [cm('same'), secret('same')],
    },
    {
      name: 'one entry per object, optional or not, however many places reference it',
      template: template({
        volumes: [
          { name: 'a', configMap: { name: 'all-optional', optional: true } },
          { name: 'b', configMap: { name: 'one-required', optional: true } },
          { name: 'c', secret: { secretName: 'unset-means-required' } },
        ],
        containers: [
          {
            name: 'app',
            envFrom: [
              { configMapRef: { name: 'all-optional', optional: true } },
              { configMapRef: { name: 'one-required', optional: false } },
              { secretRef: { name: 'unset-means-required', optional: true } },
            ],
          },
        ],
      }),
      want: [cm('all-optional'), cm('one-required'), secret('unset-means-required')],
    },
    {
      name: 'empty and missing names are skipped',
      template: template({
        volumes: [
          { name: 'a', configMap: { name: '' } },
          { name: 'b', configMap: {} },
          { name: 'c', secret: {} },
          { name: 'd', projected: { sources: [{ secret: { name: '' } }] } },
        ],
        containers: [{ name: 'app', env: [{ name: 'X', valueFrom: { secretKeyRef: { key: 'x' } } }], envFrom: [{ configMapRef: {} }] }],
      }),
      want: [],
    },
    {
      name: 'sorted by kind, then name in code-unit order',
      template: template({
        volumes: [
          { name: '1', secret: { secretName: 'b' } },
          { name: '2', configMap: { name: 'web-2' } },
          { name: '3', secret: { secretName: 'a' } },
          { name: '4', configMap: { name: 'web-10' } },
          { name: '5', configMap: { name: 'api' } },
        ],
      }),
      want: [cm('api'), cm('web-10'), cm('web-2'), secret('a'), secret('b')],
    },
  ];

  it.each(cases)('$name', ({ template, want }) => {
    expect(referencedObjects(template)).toEqual(want);
  });

  it('does not change the template it reads', () => {
    const t = template({ volumes: [{ name: 'c', configMap: { name: 'x' } }] });
    const before = structuredClone(t);
    referencedObjects(t);
    expect(t).toEqual(before);
  });
});

describe('referencedObjects on the wire JSON of a review, fields of the wrong type', () => {
  // an admission review reaches us before anything validated it: a wrong-typed field is absent
  const good = { name: 'app', envFrom: [{ configMapRef: { name: 'kept' } }] };
  const cases: { name: string; template: unknown }[] = [
    { name: 'template an array', template: [good] },
    { name: 'template a string', template: 'spec' },
    { name: 'spec a number', template: { spec: 7 } },
    { name: 'volumes an object', template: { spec: { containers: [good], volumes: { name: 'v', configMap: { name: 'x' } } } } },
    { name: 'volumes a string', template: { spec: { containers: [good], volumes: 'configMap' } } },
    { name: 'containers a string', template: { spec: { containers: 'app', initContainers: [good] } } },
    { name: 'containers a number', template: { spec: { containers: 3, initContainers: [good] } } },
    { name: 'env an object', template: { spec: { containers: [{ ...good, env: { valueFrom: { configMapKeyRef: { name: 'x' } } } }] } } },
    { name: 'envFrom entries of the wrong type', template: { spec: { containers: [{ ...good, envFrom: [null, 'x', 3, ...good.envFrom] }] } } },
    { name: 'valueFrom a string', template: { spec: { containers: [{ ...good, env: [{ name: 'A', valueFrom: 'x' }] }] } } },
    { name: 'a name that is a number', template: { spec: { containers: [{ ...good, env: [{ name: 'A', valueFrom: { secretKeyRef: { name: 42 } } }] }] } } },
    { name: 'a name that is an object', template: { spec: { containers: [good], volumes: [{ name: 'v', secret: { secretName: { x: 1 } } }] } } },
    { name: 'projected sources an object', template: { spec: { containers: [good], volumes: [{ name: 'v', projected: { sources: { secret: { name: 'x' } } } }] } } },
    { name: 'projected sources with nulls', template: { spec: { containers: [good], volumes: [{ name: 'v', projected: { sources: [null, { configMap: null }] } }] } } },
  ];

  it.each(cases)('$name: no throw, the wrong-typed part counts as absent', ({ template }) => {
    const found = referencedObjects(template);
    expect(found.every((r) => typeof r.name === 'string')).toBe(true);
    expect(found.filter((r) => r.name !== 'kept')).toEqual([]);
  });
});

describe('referenceReads: where and which keys the template reads of each object', () => {
  const cases: { name: string; template: V1PodTemplateSpec; want: { kind: string; name: string; keys?: string[]; via: string[] }[] }[] = [
    {
      name: 'a whole-object volume and envFrom read every key',
      template: template({ containers: [{ name: 'app', envFrom: [{ secretRef: { name: 's' } }] }], volumes: [{ name: 'v', configMap: { name: 'c' } }] }),
      want: [
        { kind: 'ConfigMap', name: 'c', via: ['volume'] },
        { kind: 'Secret', name: 's', via: ['envFrom'] },
      ],
    },
    {
      name: 'volume items and key refs name their keys',
      template: template({
        containers: [{ name: 'app', env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'c', key: 'level' } } }] }],
        volumes: [{ name: 'v', configMap: { name: 'c', items: [{ key: 'app.yaml', path: 'app.yaml' }] } }],
      }),
      want: [{ kind: 'ConfigMap', name: 'c', keys: ['app.yaml', 'level'], via: ['volume', 'env'] }],
    },
    {
      name: 'two containers reading different keys of one Secret: the union, sorted and once each',
      template: template({
        containers: [
          { name: 'a', env: [{ name: 'P', valueFrom: { secretKeyRef: { name: 's', key: 'password' } } }] },
          { name: 'b', env: [{ name: 'U', valueFrom: { secretKeyRef: { name: 's', key: 'user' } } }, { name: 'P', valueFrom: { secretKeyRef: { name: 's', key: 'password' } } }] },
        ],
      }),
      want: [{ kind: 'Secret', name: 's', keys: ['password', 'user'], via: ['env', 'env', 'env'] }],
    },
    {
      name: 'one whole read among named ones reads every key',
      template: template({
        containers: [{ name: 'app', env: [{ name: 'A', valueFrom: { configMapKeyRef: { name: 'c', key: 'level' } } }], envFrom: [{ configMapRef: { name: 'c' } }] }],
      }),
      want: [{ kind: 'ConfigMap', name: 'c', via: ['env', 'envFrom'] }],
    },
    {
      name: 'projected items, init containers too',
      template: template({
        initContainers: [{ name: 'init', envFrom: [{ configMapRef: { name: 'p' } }] }],
        volumes: [{ name: 'v', projected: { sources: [{ secret: { name: 'p', items: [{ key: 'tls.crt', path: 'crt' }] } }] } }],
      }),
      want: [
        { kind: 'ConfigMap', name: 'p', via: ['envFrom'] },
        { kind: 'Secret', name: 'p', keys: ['tls.crt'], via: ['projected volume'] },
      ],
    },
  ];

  it.each(cases)('$name', ({ template: t, want }) => {
    const got = referenceReads(t).map((r) => ({ kind: r.kind, name: r.name, ...(r.keys ? { keys: r.keys } : {}), via: r.reads.map((x) => x.via) }));
    expect(got).toEqual(want);
  });

  it('finds the same objects as referencedObjects, in the same order', () => {
    const t = template({
      containers: [{ name: 'app', envFrom: [{ configMapRef: { name: 'z' } }, { secretRef: { name: 'a' } }], env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'b', key: 'k' } } }] }],
      volumes: [{ name: 'v', projected: { sources: [{ configMap: { name: 'q' } }] } }],
    });
    for (const projected of [true, false]) {
      expect(referenceReads(t, { projected }).map((r) => ({ kind: r.kind, name: r.name }))).toEqual(referencedObjects(t, { projected }));
    }
  });
});
