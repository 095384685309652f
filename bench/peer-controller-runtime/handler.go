package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"

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
	annotations, changed := desiredTemplateAnnotations(namespace, object(metadata, "annotations"), template, a.lookup)
	if !changed {
		return admission.Allowed("")
	}
	templateMetadata := object(template, "metadata")
	if templateMetadata == nil {
		templateMetadata = map[string]any{}
		template["metadata"] = templateMetadata
	}
	templateMetadata["annotations"] = annotations
	patched, err := json.Marshal(set)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, patched)
}
