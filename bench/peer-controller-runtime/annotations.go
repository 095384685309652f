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
	frozenAnnotation           = "rollguard.io/frozen"
	absent                     = "absent"

	segmentMaxLength = 63
	hashLength       = 32
	namePrefixLength = segmentMaxLength - 1 - hashLength
)

var (
	annotationPrefix       = map[string]string{configMapKind: "configmap.rollguard.io/", secretKind: "secret.rollguard.io/"}
	segmentPattern         = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	unsafeChars            = regexp.MustCompile(`[^-A-Za-z0-9_.]`)
	leadingNonAlnum        = regexp.MustCompile(`^[^A-Za-z0-9]+`)
	resourceVersionPattern = regexp.MustCompile(`^\d{1,30}$`)
	shortenedSegment       = regexp.MustCompile(`_[0-9a-f]{32}$`)
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

// The records rollguard's loop keeps on the workload itself (mutator.ts RESTARTER_RECORDS): a CREATE
// carries none of them, whatever the object says (it is a copy of another set, or a restore).
var restarterRecords = []string{"rollguard.io/last-restart-at", "rollguard.io/digests", frozenAnnotation, "rollguard.io/timing", "rollguard.io/restart-reason"}

// recordsPresent: the records the workload's own annotations carry (string values), in restarterRecords' order.
func recordsPresent(setAnnotations map[string]any) []string {
	var present []string
	for _, key := range restarterRecords {
		if _, ok := setAnnotations[key].(string); ok {
			present = append(present, key)
		}
	}
	return present
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

// A stored value read back: a version, absent, or unreadable (a person's, a bug's).
type parsedValue struct {
	kind string // "version", "absent", "unreadable"
	rv   *big.Int
}

func parseValue(v string) parsedValue {
	if v == absent {
		return parsedValue{kind: "absent"}
	}
	slash := strings.Index(v, "/")
	if slash <= 0 || !resourceVersionPattern.MatchString(v[slash+1:]) {
		return parsedValue{kind: "unreadable"}
	}
	rv, _ := new(big.Int).SetString(v[slash+1:], 10)
	return parsedValue{kind: "version", rv: rv}
}

// replaces: whether candidate may replace stored without moving backwards, for a review with no
// old object and an authoritative lookup (rollguard's versions.ts `replaces` without context).
func replaces(candidate, stored string) bool {
	if candidate == stored {
		return false
	}
	next, now := parseValue(candidate), parseValue(stored)
	switch {
	case now.kind == "unreadable":
		return true
	case next.kind == "unreadable":
		return false
	case next.kind == "version" && now.kind == "version":
		return next.rv.Cmp(now.rv) > 0
	default:
		return next.kind != now.kind
	}
}

// desiredTemplateAnnotations: the template's annotations with every rollguard annotation replaced
// by the desired ones (rollguard's planAnnotations on a CREATE, the stored values filtered by its
// ownObjectsOnly); changed false when the template
// already carries exactly those.
func desiredTemplateAnnotations(namespace string, setAnnotations map[string]any, template map[string]any, lookup versionLookup) (map[string]any, bool) {
	ignored := map[string]map[string]bool{
		configMapKind: ignoredNames(setAnnotations, ignoreConfigMapsAnnotation),
		secretKind:    ignoredNames(setAnnotations, ignoreSecretsAnnotation),
	}
	// the frozen list is one of the set's records, and a new set's records are a copy's, dropped
	// (rollguard's recordsFor on a CREATE): no reference is frozen
	frozen := map[string]bool{}
	current := object(template, "metadata", "annotations")
	result := map[string]any{}
	for key, value := range current {
		if !isRollguardAnnotation(key) {
			result[key] = value
		}
	}
	for _, ref := range referencedObjects(template) {
		key := annotationKey(ref.kind, ref.name)
		stored, hasStored := current[key].(string)
		version := lookup(ref.kind, namespace, ref.name)
		// a new object's value that names another object than the one the cache knows under that
		// name (a copy from another namespace, a restore) is not its own (rollguard's ownObjectsOnly);
		// a shortened key names no object it can be checked against
		if hasStored && version != nil && !shortenedSegment.MatchString(key[len(annotationPrefix[ref.kind]):]) {
			if parsed := parseValue(stored); parsed.kind == "version" && stored[:strings.Index(stored, "/")] != version.UID {
				hasStored = false
			}
		}
		// a frozen reference whose object is gone stays frozen
		labelIgnored := (version != nil && version.Ignored) || (version == nil && frozen[ref.kind+"/"+ref.name])
		if ignored[ref.kind][ref.name] || labelIgnored {
			if hasStored {
				result[key] = stored
			}
			continue
		}
		candidate := absent
		if version != nil {
			candidate = version.UID + "/" + version.ResourceVersion
		}
		if !hasStored || stored == candidate || replaces(candidate, stored) {
			result[key] = candidate
		} else {
			result[key] = stored
		}
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
