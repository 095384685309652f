package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// restartAnnotator answers a review as rollguard's /mutate answers a CREATE: always allowed, patched
// only for a write of an apps/v1 StatefulSet, Deployment or DaemonSet whose template annotations are
// not what they should be.
// An UPDATE is planned like a CREATE: rollguard's UPDATE paths (the old object's values kept, its
// loop's own writes, restart reasons) are not mirrored, the benchmark's review is a CREATE.
type restartAnnotator struct {
	lookup versionLookup
	synced *atomic.Bool
	// direct: the JSON Patch is written from the annotations that change (directPatch), as
	// rollguard writes its own; else the object is marshalled again and diffed with the one sent
	// (PatchResponseFromRaw, what controller-runtime's documentation shows)
	direct bool
}

var _ admission.Handler = (*restartAnnotator)(nil)

// the kinds rollguard's /mutate annotates (src/kube/workloads.ts)
var workloadKinds = map[string]bool{"StatefulSet": true, "Deployment": true, "DaemonSet": true}

func (a *restartAnnotator) Handle(_ context.Context, req admission.Request) admission.Response {
	kind := req.Kind
	write := req.Operation == admissionv1.Create || req.Operation == admissionv1.Update
	if !a.synced.Load() || kind.Group != "apps" || kind.Version != "v1" || !workloadKinds[kind.Kind] || !write || req.SubResource != "" {
		return admission.Allowed("")
	}
	var set map[string]any
	if err := json.Unmarshal(req.Object.Raw, &set); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	metadata := object(set, "metadata")
	namespace := req.Namespace
	if namespace == "" {
		namespace = str(metadata, "namespace")
	}
	template := object(set, "spec", "template")
	setAnnotations := object(metadata, "annotations")
	annotations, changed := desiredTemplateAnnotations(namespace, setAnnotations, template, a.lookup)
	records := recordsPresent(setAnnotations)
	if !changed && len(records) == 0 {
		return admission.Allowed("")
	}
	if a.direct {
		var ops []jsonpatch.JsonPatchOperation
		if changed {
			ops = directPatch(template, annotations)
		}
		for _, key := range records {
			ops = append(ops, jsonpatch.NewOperation("remove", "/metadata/annotations/"+escapePointer(key), nil))
		}
		return admission.Patched("", ops...)
	}
	for _, key := range records {
		delete(setAnnotations, key)
	}
	if changed {
		templateMetadata := object(template, "metadata")
		if templateMetadata == nil {
			templateMetadata = map[string]any{}
			template["metadata"] = templateMetadata
		}
		templateMetadata["annotations"] = annotations
	}
	patched, err := json.Marshal(set)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, patched)
}

const templateMetadataPath = "/spec/template/metadata"

// directPatch: the operations that take the template's annotations to `desired`, written without
// marshalling the object: the whole map when the template has no metadata or no annotations map,
// else one operation per key that changes, in key order.
func directPatch(template map[string]any, desired map[string]any) []jsonpatch.JsonPatchOperation {
	templateMetadata, isObject := template["metadata"].(map[string]any)
	if !isObject {
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", templateMetadataPath, map[string]any{"annotations": desired})}
	}
	current, isObject := templateMetadata["annotations"].(map[string]any)
	if !isObject {
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", templateMetadataPath+"/annotations", desired)}
	}
	keys := make([]string, 0, len(current)+len(desired))
	for key := range current {
		keys = append(keys, key)
	}
	for key := range desired {
		if _, ok := current[key]; !ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	var ops []jsonpatch.JsonPatchOperation
	for _, key := range keys {
		path := templateMetadataPath + "/annotations/" + escapePointer(key)
		was, had := current[key]
		want, has := desired[key]
		switch {
		case had && !has:
			ops = append(ops, jsonpatch.NewOperation("remove", path, nil))
		case !had && has:
			ops = append(ops, jsonpatch.NewOperation("add", path, want))
		case was != want:
			ops = append(ops, jsonpatch.NewOperation("replace", path, want))
		}
	}
	return ops
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(token string) string { return pointerEscaper.Replace(token) }
