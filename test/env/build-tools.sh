#!/usr/bin/env bash
# Provides a Go tool for the tests. Prints the folder that holds it.
#
#   build-tools.sh [helm]     helm, for the manifest tests (the default)
#   build-tools.sh promtool   Prometheus' promtool, for `promtool test rules` of the alerts
#   build-tools.sh prometheus-operator-crds
#                             the folder of the Prometheus Operator's CRDs (example/prometheus-operator-crd
#                             of its Go module, downloaded through the module proxy into Go's module cache)
#   build-tools.sh argo-rollouts-crd
#                             the path of Argo Rollouts' Rollout CRD (manifests/crds/rollout-crd.yaml of its Go
#                             module), copied under ~/.cache/rollguard by src/dev/fetch-argo-crd.sh, which
#                             `rollguard dev --argo-rollouts` runs too; the Argo controller is not built
#
# Each is built once with Go from the module proxy (pinned) in a throwaway module outside
# the repo, and cached under ~/.cache/rollguard. A tool already on PATH is not used: the
# tests should run the version pinned here, whatever the machine has.
set -euo pipefail

TOOL="${1:-helm}"
HELM_VERSION="${ROLLGUARD_HELM_VERSION:-v3.22.0}"
# github.com/prometheus/prometheus v0.316.0 is Prometheus 3.16.0 (the Go module numbers v3.x.y as v0.3xx.y)
PROMETHEUS_VERSION="${ROLLGUARD_PROMETHEUS_VERSION:-v0.316.0}"
PROMETHEUS_OPERATOR_VERSION="${ROLLGUARD_PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"

log() { printf '[tools] %s\n' "$*" >&2; }

if [ "$TOOL" = argo-rollouts-crd ]; then
  exec bash "$(dirname "$0")/../../src/dev/fetch-argo-crd.sh"
fi

if [ "$TOOL" = prometheus-operator-crds ]; then
  command -v go >/dev/null || { log "Go is needed to download the Prometheus Operator's CRDs"; exit 1; }
  module=github.com/prometheus-operator/prometheus-operator
  mkdir -p "$CACHE_ROOT/src/prometheus-operator-crds"
  dir=$(cd "$CACHE_ROOT/src/prometheus-operator-crds" && GOFLAGS=-mod=mod go mod download -json "$module@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/example/prometheus-operator-crd" ] || { log "$module@$PROMETHEUS_OPERATOR_VERSION has no example/prometheus-operator-crd"; exit 1; }
  echo "$dir/example/prometheus-operator-crd"
  exit 0
fi

case "$TOOL" in
  helm) version=$HELM_VERSION ;;
  promtool) version=$PROMETHEUS_VERSION ;;
  *) log "unknown tool \"$TOOL\": helm, promtool, prometheus-operator-crds or argo-rollouts-crd"; exit 2 ;;
esac

bin_dir="$CACHE_ROOT/bin/tools-$TOOL-$version"
have_all() { [ -x "$bin_dir/$TOOL" ]; }
if have_all; then echo "$bin_dir"; exit 0; fi

command -v go >/dev/null || { log "Go is needed to build $TOOL $version"; exit 1; }
mkdir -p "$bin_dir"
# the same lock as build-binaries.sh: two cold builds at once would only fight for the CPUs
exec 9>"$CACHE_ROOT/build.lock"
flock 9
if have_all; then echo "$bin_dir"; exit 0; fi

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
started=$(date +%s)

mod="$CACHE_ROOT/src/$TOOL-$version"
mkdir -p "$mod"
cat >"$mod/go.mod" <<MOD
module rollguard.local/${TOOL}build

go 1.24
MOD

build_helm() {
  log "helm $HELM_VERSION: resolving modules"
  go get "helm.sh/helm/v3@$HELM_VERSION" >&2
  # Without these, `helm version` says only the minor (v3.22) and `helm template` renders for
  # Kubernetes v1.20 (.Capabilities.KubeVersion); helm's own release build derives the
  # Kubernetes version from the client-go it is built with, and so does this.
  client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go)
  kube_minor=${client_go#v0.}; kube_minor=${kube_minor%%.*}
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
  done
  log "helm $HELM_VERSION: compiling (a minute or two on a cold cache)"
  go build -trimpath -ldflags "$ldflags" -o "$bin_dir/helm.tmp" helm.sh/helm/v3/cmd/helm >&2
  mv "$bin_dir/helm.tmp" "$bin_dir/helm"
}

build_promtool() {
  log "promtool $PROMETHEUS_VERSION: resolving modules"
  go get "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" >&2
  # `promtool test rules` needs no service discovery: remove_all_sd (Prometheus' own build tag)
  # leaves out the SD plugins and their cloud SDKs, most of what a full promtool compiles
  ldflags="-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"
  log "promtool $PROMETHEUS_VERSION: compiling (minutes on a cold cache)"
  go build -trimpath -tags remove_all_sd -ldflags "$ldflags" -o "$bin_dir/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool >&2
  mv "$bin_dir/promtool.tmp" "$bin_dir/promtool"
}

( cd "$mod" && "build_$TOOL" )

log "built $TOOL $version in $(( $(date +%s) - started ))s"
echo "$bin_dir"
