#!/usr/bin/env bash
# Builds the controller-runtime peer (benchmarks only) from the Go module proxy and prints the
# path of the binary. Cached under ~/.cache/rollguard by a hash of its sources, go.mod and the
# committed go.sum (which pins every module's checksum); takes the control plane's build lock.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"
log() { printf '[peer-controller-runtime] %s\n' "$*" >&2; }

key=$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)
bin_dir="$CACHE_ROOT/bin/peer-controller-runtime-$key"
if [ -x "$bin_dir/peer" ]; then echo "$bin_dir/peer"; exit 0; fi

command -v go >/dev/null || { log "Go is needed to build the peer"; exit 1; }
mkdir -p "$bin_dir"
exec 9>"$CACHE_ROOT/build.lock"
flock 9
if [ -x "$bin_dir/peer" ]; then echo "$bin_dir/peer"; exit 0; fi

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
log "building into $bin_dir (one time; a few minutes on two cores)"
started=$(date +%s)
( cd "$here" && go build -trimpath -o "$bin_dir/peer.tmp" . >&2 )
mv "$bin_dir/peer.tmp" "$bin_dir/peer"
log "built in $(( $(date +%s) - started ))s"
echo "$bin_dir/peer"
