import { describe, expect, it } from 'vitest';
import { ReverseIndex } from '../../src/restarter/reverse-index.js';
import type { Reference } from '../../src/restarter/references.js';

const cm = (name: string): Reference => ({ kind: 'ConfigMap', name });
const secret = (name: string): Reference => ({ kind: 'Secret', name });

describe('ReverseIndex', () => {
  it('finds the sets that reference an object, by kind and namespace', () => {
    const index = new ReverseIndex();
    index.setReferences('prod/web', 'prod', [cm('app'), secret('tls')]);
    index.setReferences('prod/api', 'prod', [cm('app')]);
    index.setReferences('dev/web', 'dev', [cm('app')]);
    expect(index.referrersOf('ConfigMap', 'prod', 'app').sort()).toEqual(['prod/api', 'prod/web']);
    expect(index.referrersOf('Secret', 'prod', 'tls')).toEqual(['prod/web']);
    // Same name, other kind or namespace: someone else's object.
    expect(index.referrersOf('Secret', 'prod', 'app')).toEqual([]);
    expect(index.referrersOf('ConfigMap', 'dev', 'app')).toEqual(['dev/web']);
    expect(index.referrersOf('ConfigMap', 'prod', 'nothing')).toEqual([]);
    expect(index.size()).toEqual({ sets: 3, objects: 3 });
  });

  it('keeps workloads of different kinds and one name apart', () => {
    const index = new ReverseIndex();
    index.setReferences('StatefulSet/ns/web', 'ns', [cm('app')]);
    index.setReferences('Deployment/ns/web', 'ns', [cm('app')]);
    index.setReferences('DaemonSet/ns/web', 'ns', [secret('tls')]);
    expect(index.referrersOf('ConfigMap', 'ns', 'app').sort()).toEqual(['Deployment/ns/web', 'StatefulSet/ns/web']);
    index.removeSet('Deployment/ns/web');
    expect(index.referrersOf('ConfigMap', 'ns', 'app')).toEqual(['StatefulSet/ns/web']);
    expect(index.size()).toEqual({ sets: 2, objects: 2 });
  });

  it('replaces what a set references when it is updated', () => {
    const index = new ReverseIndex();
    index.setReferences('ns/web', 'ns', [cm('old'), cm('kept')]);
    index.setReferences('ns/web', 'ns', [cm('kept'), cm('new')]);
    expect(index.referrersOf('ConfigMap', 'ns', 'old')).toEqual([]);
    expect(index.referrersOf('ConfigMap', 'ns', 'kept')).toEqual(['ns/web']);
    expect(index.referrersOf('ConfigMap', 'ns', 'new')).toEqual(['ns/web']);
    expect(index.size()).toEqual({ sets: 1, objects: 2 });
  });

  it('forgets a deleted set, and a set that references nothing', () => {
    const index = new ReverseIndex();
    index.setReferences('ns/a', 'ns', [cm('shared')]);
    index.setReferences('ns/b', 'ns', [cm('shared'), secret('own')]);
    index.removeSet('ns/b');
    expect(index.referrersOf('ConfigMap', 'ns', 'shared')).toEqual(['ns/a']);
    expect(index.referrersOf('Secret', 'ns', 'own')).toEqual([]);
    index.setReferences('ns/a', 'ns', []);
    expect(index.referrersOf('ConfigMap', 'ns', 'shared')).toEqual([]);
    expect(index.size()).toEqual({ sets: 0, objects: 0 });
    index.removeSet('ns/never-seen');
  });
});
