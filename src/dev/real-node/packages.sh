#!/usr/bin/env bash
# Installs the Debian packages a real node needs (the e2e suite, `rollguard dev --real-node`):
# buildah for the images, containerd and runc for the containers, the CNI plugins for the pod
# network, iptables and conntrack for kube-proxy, busybox-static for the app images, gcc for
# the pod sandbox's pause program.
# As root it installs what is missing with apt-get; otherwise it names what to install.
set -euo pipefail

PACKAGES=(buildah runc containerd containernetworking-plugins iptables conntrack busybox-static gcc libc6-dev)

log() { printf '[real-node] %s\n' "$*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

command -v apt-get >/dev/null || { log "a real node needs Debian's packages ${missing[*]}, and this machine has no apt-get"; exit 1; }
[ "$(id -u)" -eq 0 ] || { log "a real node needs root, and the Debian packages: apt-get install ${missing[*]}"; exit 1; }
log "installing ${missing[*]}"
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
log "installed in $(( $(date +%s) - started ))s"
