#!/usr/bin/env bash
# Provides etcd, kube-apiserver, kube-controller-manager and kubectl for the
# local control plane (rollguard dev and the tests). Prints the folder that holds them.
#
#   build-binaries.sh         the control plane (the default)
#   build-binaries.sh node    kubelet, kube-scheduler and kube-proxy for a real node (the e2e
#                             suite), from the same k8s.io/kubernetes module, into their own folder
#
# From $KUBEBUILDER_ASSETS when set (envtest convention); otherwise built once
# with Go from the module proxy and cached under ~/.cache/rollguard/<versions>.
# A cold build takes 15-30 minutes on two cores; a warm one costs nothing.
set -euo pipefail

KUBE_VERSION="${ROLLGUARD_KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${ROLLGUARD_ETCD_VERSION:-v3.6.16}"
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"
TARGET="${1:-control-plane}"

log() { printf '[control-plane] %s\n' "$*" >&2; }

case "$TARGET" in
  control-plane | node) ;;
  *) log "unknown target \"$TARGET\": control-plane or node"; exit 2 ;;
esac

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ "$TARGET" = control-plane ]; then
  for bin in etcd kube-apiserver; do
    [ -x "$KUBEBUILDER_ASSETS/$bin" ] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $bin"; exit 1; }
  done
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

if [ "$TARGET" = node ]; then
  bin_dir="$CACHE_ROOT/bin/kube-node-$KUBE_VERSION"
  wanted=(kubelet kube-scheduler kube-proxy)
else
  bin_dir="$CACHE_ROOT/bin/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
  wanted=(etcd kube-apiserver kube-controller-manager kubectl)
fi
have_all() { for b in "${wanted[@]}"; do [ -x "$bin_dir/$b" ] || return 1; done; }
if have_all; then echo "$bin_dir"; exit 0; fi

command -v go >/dev/null || { log "Go is needed to build the control plane (or set KUBEBUILDER_ASSETS)"; exit 1; }
mkdir -p "$bin_dir"
exec 9>"$CACHE_ROOT/build.lock"
flock 9
if have_all; then echo "$bin_dir"; exit 0; fi

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
started=$(date +%s)

build_etcd() {
  local mod="$CACHE_ROOT/src/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  cat >"$mod/go.mod" <<MOD
module rollguard.local/etcdbuild

go 1.24
MOD
  ( cd "$mod"
    log "etcd $ETCD_VERSION: resolving modules"
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
    log "etcd $ETCD_VERSION: compiling"
    go build -trimpath -o "$bin_dir/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
    mv "$bin_dir/etcd.tmp" "$bin_dir/etcd" )
}

build_kube() {
  local mod="$CACHE_ROOT/src/kubernetes-$KUBE_VERSION"
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local staging="v0.${KUBE_VERSION#v1.}"
  mkdir -p "$mod"
  log "kubernetes $KUBE_VERSION: reading upstream go.mod"
  local upstream_mod
  upstream_mod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  local go_line
  go_line=$(grep -m1 '^go ' "$upstream_mod")
  {
    echo "module rollguard.local/kubebuild"
    echo
    echo "$go_line"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    # upstream replaces every staging module with a local path; pin each to its release
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$upstream_mod" \
      | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
  } >"$mod/go.mod"
  # every command either target builds, so that one go.mod serves both
  {
    printf 'package tools\n\nimport (\n'
    for cmd in kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy; do
      printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd"
    done
    printf ')\n'
  } >"$mod/tools.go"
  sed -i '1i //go:build tools\n' "$mod/tools.go"
  local ldflags="-s -w"
  local commit
  commit=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$commit"
  done
  ( cd "$mod"
    log "kubernetes $KUBE_VERSION: resolving modules (staging pinned to $staging)"
    go mod tidy -e >&2 || true
    go mod download >&2
    for cmd in "${wanted[@]}"; do
      [ "$cmd" = etcd ] && continue
      log "kubernetes $KUBE_VERSION: compiling $cmd (several minutes each on a cold cache)"
      go build -trimpath -ldflags "$ldflags" -o "$bin_dir/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" >&2
      mv "$bin_dir/$cmd.tmp" "$bin_dir/$cmd"
    done )
}

if [ "$TARGET" = node ]; then
  log "building kubelet, kube-scheduler and kube-proxy into $bin_dir (one time; a few minutes on a warm Go cache)"
else
  log "building the local control plane into $bin_dir (one time; a cold build takes 15-30 minutes on two cores)"
  [ -x "$bin_dir/etcd" ] || build_etcd
fi
build_kube
log "built in $(( $(date +%s) - started ))s"
echo "$bin_dir"
