import jsonpatch, { type Operation } from 'fast-json-patch';
import { isJsonObject } from '../kube/json.js';
import { withDesiredAnnotations, type AnnotationChange, type DesiredAnnotation } from './annotations.js';

const TEMPLATE_METADATA_PATH = '/spec/template/metadata';
const TEMPLATE_ANNOTATIONS_PATH = `${TEMPLATE_METADATA_PATH}/annotations`;

/** The pod template's metadata as a workload carries it; a wire object may hold null where a typed one holds undefined. */
export interface TemplateMetadata {
  annotations?: Record<string, string> | null;
}

/**
 * The JSON Patch operations that bring a workload's pod template annotations from what
 * `metadata` holds to `desired`, given the `changes` between them (annotationChanges). The one
 * patch builder: the webhook and the reconcile loop both write with it. A missing metadata or
 * annotations map is added whole, since removals need an existing map; so is one of the wrong
 * type (a wire object not yet validated), which the add replaces.
 */
export function templateAnnotationOps(
  metadata: TemplateMetadata | null | undefined,
  desired: DesiredAnnotation[],
  changes: AnnotationChange[],
): Operation[] {
  if (changes.length === 0) return [];
  if (!isJsonObject(metadata)) return [{ op: 'add', path: TEMPLATE_METADATA_PATH, value: { annotations: withDesiredAnnotations(undefined, desired) } }];
  if (!isJsonObject(metadata.annotations)) return [{ op: 'add', path: TEMPLATE_ANNOTATIONS_PATH, value: withDesiredAnnotations(undefined, desired) }];
  return changes.map(({ key, from, to }): Operation => {
    const path = `${TEMPLATE_ANNOTATIONS_PATH}/${jsonpatch.escapePathComponent(key)}`;
    if (to === undefined) return { op: 'remove', path };
    return from === undefined ? { op: 'add', path, value: to } : { op: 'replace', path, value: to };
  });
}

/**
 * The operations that set (a string) or remove (undefined) annotations of the workload's own
 * metadata. A workload without an annotation map gets one add of the whole map, so that no
 * operation of the patch replaces the map another one added.
 */
export function workloadAnnotationOps(annotations: Record<string, string> | null | undefined, values: Record<string, string | undefined>): Operation[] {
  const changed = Object.entries(values).filter(([key, value]) => (annotations && Object.hasOwn(annotations, key) ? annotations[key] : undefined) !== value);
  if (changed.length === 0) return [];
  if (!annotations) {
    const added = Object.fromEntries(changed.filter((entry): entry is [string, string] => entry[1] !== undefined));
    return Object.keys(added).length === 0 ? [] : [{ op: 'add', path: '/metadata/annotations', value: added }];
  }
  return changed.map(([key, value]): Operation => {
    const path = `/metadata/annotations/${jsonpatch.escapePathComponent(key)}`;
    if (value === undefined) return { op: 'remove', path };
    return { op: Object.hasOwn(annotations, key) ? 'replace' : 'add', path, value };
  });
}
