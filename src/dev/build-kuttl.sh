#!/usr/bin/env bash
# Provides kubectl-kuttl (github.com/kudobuilder/kuttl) for the project's kuttl cases
# (npm test and rollguard dev). Prints the folder that holds it; built once, cached under ~/.cache/rollguard.
#
# kuttl v0.24.0 does not compile with Go 1.26 (its test harness implements
# testing.testDeps, which gained a method), so it is built with the Go 1.25
# toolchain, which the go command fetches from the module proxy itself. Its
# module is not in the checksum database, hence GONOSUMDB for it alone.
set -euo pipefail

KUTTL_VERSION="${ROLLGUARD_KUTTL_VERSION:-v0.24.0}"
KUTTL_GO="${ROLLGUARD_KUTTL_GO:-go1.25.5}"
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"
bin_dir="$CACHE_ROOT/bin/kuttl-$KUTTL_VERSION"

if [ -x "$bin_dir/kubectl-kuttl" ]; then echo "$bin_dir"; exit 0; fi
mkdir -p "$bin_dir" "$CACHE_ROOT/src/kuttl-$KUTTL_VERSION"
exec 9>"$CACHE_ROOT/build-kuttl.lock"
flock 9
if [ -x "$bin_dir/kubectl-kuttl" ]; then echo "$bin_dir"; exit 0; fi

echo "[kuttl] building kubectl-kuttl $KUTTL_VERSION with $KUTTL_GO (one time, about two minutes)" >&2
cd "$CACHE_ROOT/src/kuttl-$KUTTL_VERSION"
printf 'module rollguard.local/kuttlbuild\n\ngo 1.24.0\n' >go.mod
export CGO_ENABLED=0 GOFLAGS=-mod=mod GONOSUMDB=github.com/kudobuilder/kuttl GOTOOLCHAIN="$KUTTL_GO"
go get "github.com/kudobuilder/kuttl@$KUTTL_VERSION" >&2
# go get may raise the go line; the 1.25 toolchain must still accept it
sed -i 's/^go 1\.2[6-9].*/go 1.24.0/' go.mod
go build -trimpath -ldflags "-s -w -X github.com/kudobuilder/kuttl/pkg/version.gitVersion=$KUTTL_VERSION" \
  -o "$bin_dir/kubectl-kuttl.tmp" github.com/kudobuilder/kuttl/cmd/kubectl-kuttl >&2
mv "$bin_dir/kubectl-kuttl.tmp" "$bin_dir/kubectl-kuttl"
echo "$bin_dir"
