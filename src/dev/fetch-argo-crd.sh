#!/usr/bin/env bash
# Provides Argo Rollouts' Rollout CRD (manifests/crds/rollout-crd.yaml of the
# github.com/argoproj/argo-rollouts Go module, downloaded through the module proxy) for
# `rollguard dev --argo-rollouts` and the tests that need it. Prints the path of the YAML file,
# copied once under ~/.cache/rollguard (never into the repository).
#
# Only the CRD: the Argo Rollouts controller is not built (its module pins its own Kubernetes
# with replace directives and builds only in a wrapper module that copies them; a cold build
# does not fit the CI budget). rollguard writes a Rollout's template; what Argo then does
# with it is Argo's.
set -euo pipefail

ARGO_ROLLOUTS_VERSION="${ROLLGUARD_ARGO_ROLLOUTS_VERSION:-v1.8.5}"
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"
module=github.com/argoproj/argo-rollouts
out_dir="$CACHE_ROOT/crds/argo-rollouts-$ARGO_ROLLOUTS_VERSION"
out="$out_dir/rollout-crd.yaml"

log() { printf '[argo-rollouts] %s\n' "$*" >&2; }

if [ -s "$out" ]; then echo "$out"; exit 0; fi
command -v go >/dev/null || { log "Go is needed to download $module@$ARGO_ROLLOUTS_VERSION through the module proxy"; exit 1; }
mkdir -p "$out_dir" "$CACHE_ROOT/src/argo-rollouts-crd"
exec 9>"$CACHE_ROOT/fetch-argo-crd.lock"
flock 9
if [ -s "$out" ]; then echo "$out"; exit 0; fi

log "downloading $module@$ARGO_ROLLOUTS_VERSION (the module's zip, for its CRD manifest)"
dir=$(cd "$CACHE_ROOT/src/argo-rollouts-crd" && GOFLAGS=-mod=mod go mod download -json "$module@$ARGO_ROLLOUTS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
src="$dir/manifests/crds/rollout-crd.yaml"
[ -f "$src" ] || { log "$module@$ARGO_ROLLOUTS_VERSION has no manifests/crds/rollout-crd.yaml"; exit 1; }
cp "$src" "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
