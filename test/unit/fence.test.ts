import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  ANNOTATION_PREFIX,
  FROZEN_ANNOTATION,
  LAST_RESTART_ANNOTATION,
  RESTART_REASON_ANNOTATION,
} from '../../src/restarter/annotations.js';
import { DIGESTS_ANNOTATION } from '../../src/restarter/digests.js';
import { LAST_STEP_ANNOTATION } from '../../src/rollout/last-step.js';
import { HANDOVER_REQUEST_ANNOTATION, HANDOVER_STATE_ANNOTATION } from '../../src/handover/state.js';

const read = (file: string): string => fs.readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
const BASE = 'deploy/base/admission-policy.yaml';
const CHART = 'deploy/helm/rollguard/templates/admission-policy.yaml';

/** The names in the policy's one list of set annotations rollguard writes. */
function setAnnotations(file: string): string[] {
  const block = /- name: setAnnotations\n\s+expression: \|\n\s+\[\n([\s\S]*?)\n\s+\]/.exec(read(file))?.[1];
  if (block === undefined) throw new Error(`${file}: no setAnnotations list`);
  return block.split('\n').map((line) => /^\s*'([^']+)',$/.exec(line)?.[1] ?? `unreadable line ${JSON.stringify(line)}`);
}

// The fence's list of StatefulSet annotations rollguard may write is one list, one name a line,
// in the kustomize base; the chart and README carry the same (test/integration/manifests.test.ts
// compares the chart's rendering with the base whole). A name rollguard writes that is
// missing here would have the fence deny rollguard's own patch.
describe('the fence (deploy/base/admission-policy.yaml)', () => {
  it('lets rollguard write every StatefulSet annotation it writes, and no other', () => {
    expect(setAnnotations(BASE)).toEqual([LAST_STEP_ANNOTATION, LAST_RESTART_ANNOTATION, FROZEN_ANNOTATION, RESTART_REASON_ANNOTATION, DIGESTS_ANNOTATION, HANDOVER_STATE_ANNOTATION]);
  });

  it('carries the same list in the Helm chart and in README', () => {
    expect(setAnnotations(CHART)).toEqual(setAnnotations(BASE));
    const section = read('README.md').split('## Security model')[1]?.split('\n## ')[0] ?? '';
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
