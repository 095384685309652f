import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  ANNOTATION_PREFIX,
  FROZEN_ANNOTATION,
  LAST_RESTART_ANNOTATION,
  RESTART_REASON_ANNOTATION,
} from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { EVENT_DUE_ANNOTATION } from '../../src/restarter/event-due.js';
import { TIMING_ANNOTATION } from '../../src/restarter/timing.js';
import { LAST_STEP_ANNOTATION } from '../../src/rollout/last-step.js';
import { HANDOVER_REQUEST_ANNOTATION, HANDOVER_STATE_ANNOTATION } from '../../src/handover/state.js';
import { WANTED_REPLICAS_ANNOTATION } from '../../src/rollout/scale-down-hold.js';

const read = (file: string): string => fs.readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
const BASE = 'deploy/base/admission-policy.yaml';
const CHART = 'deploy/helm/rollguard/templates/admission-policy.yaml';
const ARGO_COMPONENT = 'deploy/components/argo-rollouts/fence-rollouts.yaml';

/** The names in each policy's list of workload annotations rollguard writes, by policy (the name after `-fence-`). */
function setAnnotationLists(file: string): Map<string, string[]> {
  const lists = new Map<string, string[]>();
  for (const policy of read(file).split('\n---\n')) {
    const name = /kind: ValidatingAdmissionPolicy\nmetadata:\n\s+name: .*-fence-(\S+)/.exec(policy)?.[1];
    const block = /- name: setAnnotations\n\s+expression: \|\n\s+\[\n([\s\S]*?)\n\s+\]/.exec(policy)?.[1];
    if (name === undefined || block === undefined) continue;
    lists.set(name, block.split('\n').map((line) => /^\s*'([^']+)',$/.exec(line)?.[1] ?? `unreadable line ${JSON.stringify(line)}`));
  }
  return lists;
}

/** The StatefulSet policy's list. */
function setAnnotations(file: string): string[] {
  const list = setAnnotationLists(file).get('statefulsets');
  if (list === undefined) throw new Error(`${file}: no setAnnotations list in the StatefulSet policy`);
  return list;
}

// The fence's list of StatefulSet annotations rollguard may write is one list, one name a line,
// in the kustomize base; the chart and docs/security.md carry the same (test/integration/manifests.test.ts
// compares the chart's rendering with the base whole). A name rollguard writes that is
// missing here would have the fence deny rollguard's own patch.
describe('the fence (deploy/base/admission-policy.yaml)', () => {
  it('lets rollguard write every StatefulSet annotation it writes, and no other', () => {
    expect(setAnnotations(BASE)).toEqual([LAST_STEP_ANNOTATION, LAST_RESTART_ANNOTATION, FROZEN_ANNOTATION, RESTART_REASON_ANNOTATION, EVENT_DUE_ANNOTATION, DIGESTS_ANNOTATION, TIMING_ANNOTATION, HANDOVER_STATE_ANNOTATION, WANTED_REPLICAS_ANNOTATION]);
  });

  it('lets rollguard change replicas only to the count a held scale-down recorded, and write that record only as a count below replicas', () => {
    for (const file of [BASE, CHART]) {
      const text = read(file);
      expect(text, file).toContain(`((object.spec.?replicas == oldObject.spec.?replicas || variables.appliesHeldScaleDown) ? [] : ['spec.replicas'])`);
      expect(text, file).toContain(`string(object.spec.?replicas.orValue(1)) == variables.oldSet['${WANTED_REPLICAS_ANNOTATION}']`);
      expect(text, file).toContain(`int(variables.newSet['${WANTED_REPLICAS_ANNOTATION}']) < object.spec.?replicas.orValue(1))`);
    }
  });

  it('lets rollguard write the same annotations on Deployments and DaemonSets, but for the partition step\'s', () => {
    const lists = setAnnotationLists(BASE);
    expect([...lists.keys()]).toEqual(['statefulsets', 'deployments-daemonsets']);
    expect(lists.get('deployments-daemonsets')).toEqual([LAST_RESTART_ANNOTATION, FROZEN_ANNOTATION, RESTART_REASON_ANNOTATION, EVENT_DUE_ANNOTATION, DIGESTS_ANNOTATION, TIMING_ANNOTATION]);
    // the chart's Rollout policy (argoRollouts.enabled) comes after them
    expect(new Map([...setAnnotationLists(CHART)].filter(([name]) => name !== 'rollouts'))).toEqual(lists);
  });

  it('lets rollguard write the Deployment list on Argo Rollouts, in the kustomize component and the chart alike', () => {
    const component = setAnnotationLists(ARGO_COMPONENT);
    expect([...component.keys()]).toEqual(['rollouts']);
    expect(component.get('rollouts')).toEqual([LAST_RESTART_ANNOTATION, FROZEN_ANNOTATION, RESTART_REASON_ANNOTATION, EVENT_DUE_ANNOTATION, DIGESTS_ANNOTATION, TIMING_ANNOTATION]);
    expect(setAnnotationLists(CHART).get('rollouts')).toEqual(component.get('rollouts'));
    const prefixes = (file: string): string | undefined => /- name: templateAnnotationPrefixes\n\s+expression: "\[(.*)\]"/.exec(read(file))?.[1];
    expect(prefixes(ARGO_COMPONENT)).toBe(Object.values(ANNOTATION_PREFIX).map((p) => `'${p}'`).join(', '));
    // rollguard never restarts a Rollout through Argo's own restartAt: the fence says so
    expect(read(ARGO_COMPONENT)).toContain(`(object.spec.?restartAt == oldObject.spec.?restartAt ? [] : ['spec.restartAt'])`);
  });

  it('fences the updates of every kind the restarter patches, and no policy forgets the template prefixes', () => {
    const base = read(BASE);
    expect(base).toContain('resources: [statefulsets]');
    expect(base).toContain('resources: [deployments, daemonsets]');
    expect(base.match(/- name: templateAnnotationPrefixes/g)).toHaveLength(2);
  });

  it('carries the same list in the Helm chart and in docs/security.md', () => {
    expect(setAnnotations(CHART)).toEqual(setAnnotations(BASE));
    const section = read('docs/security.md');
    for (const name of setAnnotations(BASE)) expect(section).toContain(`\`${name}\``);
  });

  it('allows the pod-template annotation prefixes the restarter writes', () => {
    const prefixes = /- name: templateAnnotationPrefixes\n\s+expression: "\[(.*)\]"/.exec(read(BASE))?.[1];
    expect(prefixes).toBe(Object.values(ANNOTATION_PREFIX).map((p) => `'${p}'`).join(', '));
  });

  it('lets rollguard remove from a pod only the handover request annotation it names', () => {
    for (const file of [BASE, CHART]) {
      const rule = /expression: variables\.removedAnnotations\.all\(k, k == '([^']+)'\)/.exec(read(file))?.[1];
      expect(rule, file).toBe(HANDOVER_REQUEST_ANNOTATION);
    }
  });
});
