package main

import (
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"regexp"
	"sort"
	"strings"
)

// The contract rollguard's src/restarter/annotations.ts and references.ts define, written again in Go.

const (
	configMapKind = "ConfigMap"
	secretKind    = "Secret"

	ignoreConfigMapsAnnotation = "rollguard.io/ignore-configmaps"
	ignoreSecretsAnnotation    = "rollguard.io/ignore-secrets"
	ignoreLabel                = "rollguard.io/ignore"
	absent                     = "absent"

	segmentMaxLength = 63
	hashLength       = 32
	namePrefixLength = segmentMaxLength - 1 - hashLength
)

var (
	annotationPrefix = map[string]string{configMapKind: "configmap.rollguard.io/", secretKind: "secret.rollguard.io/"}
	segmentPattern   = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	unsafeChars      = regexp.MustCompile(`[^-A-Za-z0-9_.]`)
	leadingNonAlnum  = regexp.MustCompile(`^[^A-Za-z0-9]+`)
	digits           = regexp.MustCompile(`^\d+$`)
)

// objectVersion is what a cache knows of one ConfigMap or Secret.
type objectVersion struct {
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Ignored         bool   `json:"ignored"`
}

// versionLookup returns nil when the object does not exist.
type versionLookup func(kind, namespace, name string) *objectVersion

type reference struct{ kind, name string }

func keySegment(name string) string {
	if len(name) <= segmentMaxLength && segmentPattern.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:hashLength]
	readable := name
	if len(readable) > namePrefixLength {
		readable = readable[:namePrefixLength]
	}
	readable = leadingNonAlnum.ReplaceAllString(unsafeChars.ReplaceAllString(readable, "-"), "")
	if readable == "" {
		readable = "x"
	}
	return readable + "_" + hash
}

func annotationKey(kind, name string) string { return annotationPrefix[kind] + keySegment(name) }

func isRollguardAnnotation(key string) bool {
	for _, prefix := range annotationPrefix {
		if len(key) > len(prefix) && strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}

// Untyped walks, as rollguard walks the decoded JSON: no conversion to typed structs.
func object(v any, path ...string) map[string]any {
	m, _ := v.(map[string]any)
	for _, p := range path {
		m, _ = m[p].(map[string]any)
	}
	return m
}

func list(m map[string]any, key string) []any {
	l, _ := m[key].([]any)
	return l
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// referencedObjects: volumes (plain, projected), env value sources and envFrom of init containers
// and containers; one entry per (kind, name), sorted by kind then name.
func referencedObjects(template map[string]any) []reference {
	found := map[reference]struct{}{}
	visit := func(kind, name string) {
		if name != "" {
			found[reference{kind, name}] = struct{}{}
		}
	}
	spec := object(template, "spec")
	for _, v := range list(spec, "volumes") {
		volume := object(v)
		if cm := object(volume, "configMap"); cm != nil {
			visit(configMapKind, str(cm, "name"))
		}
		if s := object(volume, "secret"); s != nil {
			visit(secretKind, str(s, "secretName"))
		}
		for _, src := range list(object(volume, "projected"), "sources") {
			if cm := object(src, "configMap"); cm != nil {
				visit(configMapKind, str(cm, "name"))
			}
			if s := object(src, "secret"); s != nil {
				visit(secretKind, str(s, "name"))
			}
		}
	}
	for _, field := range []string{"initContainers", "containers"} {
		for _, c := range list(spec, field) {
			container := object(c)
			for _, e := range list(container, "env") {
				from := object(e, "valueFrom")
				if ref := object(from, "configMapKeyRef"); ref != nil {
					visit(configMapKind, str(ref, "name"))
				}
				if ref := object(from, "secretKeyRef"); ref != nil {
					visit(secretKind, str(ref, "name"))
				}
			}
			for _, src := range list(container, "envFrom") {
				if ref := object(src, "configMapRef"); ref != nil {
					visit(configMapKind, str(ref, "name"))
				}
				if ref := object(src, "secretRef"); ref != nil {
					visit(secretKind, str(ref, "name"))
				}
			}
		}
	}
	refs := make([]reference, 0, len(found))
	for r := range found {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].kind != refs[j].kind {
			return refs[i].kind < refs[j].kind
		}
		return refs[i].name < refs[j].name
	})
	return refs
}

func ignoredNames(annotations map[string]any, key string) map[string]bool {
	names := map[string]bool{}
	for _, part := range strings.Split(str(annotations, key), ",") {
		if name := strings.TrimSpace(part); name != "" {
			names[name] = true
		}
	}
	return names
}

// newerOf keeps an annotation that already names a newer version of the same object.
func newerOf(cached string, current string, hasCurrent bool) string {
	if !hasCurrent || cached == absent {
		return cached
	}
	c, cur := strings.Split(cached, "/"), strings.Split(current, "/")
	if len(c) < 2 || len(cur) < 2 || c[0] != cur[0] || c[1] == "" || cur[1] == "" || !digits.MatchString(c[1]) || !digits.MatchString(cur[1]) {
		return cached
	}
	rv, _ := new(big.Int).SetString(c[1], 10)
	curRv, _ := new(big.Int).SetString(cur[1], 10)
	if curRv.Cmp(rv) > 0 {
		return current
	}
	return cached
}

// desiredTemplateAnnotations: the template's annotations with every rollguard annotation replaced
// by the desired ones; changed false when the template already carries exactly those.
func desiredTemplateAnnotations(namespace string, setAnnotations map[string]any, template map[string]any, lookup versionLookup) (map[string]any, bool) {
	ignored := map[string]map[string]bool{
		configMapKind: ignoredNames(setAnnotations, ignoreConfigMapsAnnotation),
		secretKind:    ignoredNames(setAnnotations, ignoreSecretsAnnotation),
	}
	current := object(template, "metadata", "annotations")
	result := map[string]any{}
	for key, value := range current {
		if !isRollguardAnnotation(key) {
			result[key] = value
		}
	}
	for _, ref := range referencedObjects(template) {
		if ignored[ref.kind][ref.name] {
			continue
		}
		version := lookup(ref.kind, namespace, ref.name)
		if version != nil && version.Ignored {
			continue
		}
		key := annotationKey(ref.kind, ref.name)
		value := absent
		if version != nil {
			value = version.UID + "/" + version.ResourceVersion
		}
		cur, has := current[key].(string)
		result[key] = newerOf(value, cur, has)
	}
	if len(result) != len(current) {
		return result, true
	}
	for key, value := range result {
		if cur, ok := current[key]; !ok || cur != value {
			return result, true
		}
	}
	return result, false
}
