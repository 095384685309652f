#!/usr/bin/env bash
# Provides helm for the manifest tests. Prints the folder that holds it.
#
# Built once with Go from the module proxy (helm.sh/helm/v3, pinned) in a
# throwaway module outside the repo, and cached under ~/.cache/rollguard.
# A helm already on PATH is not used: the tests should render with the version
# pinned here, whatever the machine has.
set -euo pipefail

HELM_VERSION="${ROLLGUARD_HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"

log() { printf '[tools] %s\n' "$*" >&2; }

bin_dir="$CACHE_ROOT/bin/tools-helm-$HELM_VERSION"
have_all() { [ -x "$bin_dir/helm" ]; }
if have_all; then echo "$bin_dir"; exit 0; fi

command -v go >/dev/null || { log "Go is needed to build helm $HELM_VERSION"; exit 1; }
mkdir -p "$bin_dir"
# the same lock as build-binaries.sh: two cold builds at once would only fight for the CPUs
exec 9>"$CACHE_ROOT/build.lock"
flock 9
if have_all; then echo "$bin_dir"; exit 0; fi

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
started=$(date +%s)

mod="$CACHE_ROOT/src/helm-$HELM_VERSION"
mkdir -p "$mod"
cat >"$mod/go.mod" <<MOD
module rollguard.local/helmbuild

go 1.24
MOD
(
  cd "$mod"
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
)

log "built helm $HELM_VERSION in $(( $(date +%s) - started ))s"
echo "$bin_dir"
