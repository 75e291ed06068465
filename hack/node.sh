#!/usr/bin/env bash
# Produce what a real test node needs: kubelet and kube-scheduler (built by
# hack/controlplane.sh beside kube-apiserver, same wrapper module and Go build cache),
# containerd 2.x with its runc shim and ctr, the CNI plugins the pods' network uses,
# runc, and a local image made from Debian's busybox-static.
#
# Like the control plane, everything comes from registries we can reach: containerd and
# the CNI plugins from the Go module proxy (both `go install`able: no replace directives),
# runc and busybox from Debian (installed with apt-get when missing and running as root,
# under the build lock, waiting for any other apt or dpkg).
# The result is cached outside the clone, keyed by the versions, and used through one
# folder per Kubernetes build (DRACO_KUBE_VERSION; printed as the last line of stdout,
# progress goes to stderr):
#
#   <folder>/bin/     kubelet kube-scheduler containerd containerd-shim-runc-v2 ctr runc
#   <folder>/cni/     bridge host-local loopback
#   <folder>/images/  images.tar (OCI layout: draco.invalid/busybox:local, draco.invalid/pause:local)
#
# When DRACO_NODE_ASSETS already points at such a folder, it is used as it is.
set -euo pipefail

LOG_PREFIX=node
HACK="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=hack/lib/build.sh
. "$HACK/lib/build.sh"

CONTAINERD_VERSION="${DRACO_CONTAINERD_VERSION:-2.4.2}"
CNI_PLUGINS_VERSION="${DRACO_CNI_PLUGINS_VERSION:-1.9.1}"
IMAGE_NAME=draco.invalid/busybox:local
PAUSE_NAME=draco.invalid/pause:local
BINARIES=(kubelet kube-scheduler containerd containerd-shim-runc-v2 ctr runc)
CNI_PLUGINS=(bridge host-local loopback)

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$1/bin/$b" ] || return 1; done
  for b in "${CNI_PLUGINS[@]}"; do [ -x "$1/cni/$b" ] || return 1; done
  [ -f "$1/images/${IMAGE_TAR:-images.tar}" ]
}

if [ -n "${DRACO_NODE_ASSETS:-}" ] && have_all "$DRACO_NODE_ASSETS"; then
  log "using the node in DRACO_NODE_ASSETS=$DRACO_NODE_ASSETS"
  echo "$DRACO_NODE_ASSETS"
  exit 0
fi

command -v go >/dev/null || { log "go is required to build containerd (Go >= 1.26)"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
# The cache key holds what is built; runc and the image are cheap and follow the machine's
# Debian packages (the image is named after busybox's version and the script that made it).
KEY="containerd-v${CONTAINERD_VERSION}_cni-v${CNI_PLUGINS_VERSION}_${GO_VERSION}"
DIR="$CACHE_ROOT/node/$KEY"

# What the machine must have from Debian: runc, and a statically linked busybox for the
# image (ldd fails on static binaries).
debian_missing() {
  need_packages=()
  command -v runc >/dev/null || need_packages+=(runc)
  { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || need_packages+=(busybox-static)
}

image_tar() {
  BUSYBOX_VERSION="$(/bin/busybox 2>&1 | awk 'NR==1 {print $2}')"
  IMAGE_TAR="busybox-${BUSYBOX_VERSION}-$(sha256sum "$HACK/lib/oci_image.py" | cut -c1-12).tar"
}

# The folder printed is a view per Kubernetes build: links into the shared containerd, CNI
# and image folder and into that build's kubelet and kube-scheduler, so that sessions on
# several Kubernetes versions (`make compat`, tests beside it) never relink each other's
# kubelet.
link_k8s() {
  VIEW="$DIR/views/$(basename "$(dirname "$K8S_BIN")")"
  mkdir -p "$VIEW/bin"
  ln -sfn "$K8S_BIN/kubelet" "$VIEW/bin/kubelet"
  ln -sfn "$K8S_BIN/kube-scheduler" "$VIEW/bin/kube-scheduler"
  ln -sfn "$RUNC" "$VIEW/bin/runc"
  for b in containerd containerd-shim-runc-v2 ctr; do ln -sfn "$DIR/bin/$b" "$VIEW/bin/$b"; done
  ln -sfn "$DIR/cni" "$VIEW/cni.tmp" && mv -T "$VIEW/cni.tmp" "$VIEW/cni"
  ln -sfn "$DIR/images" "$VIEW/images.tmp" && mv -T "$VIEW/images.tmp" "$VIEW/images"
  if [ -f "$DIR/images/$IMAGE_TAR" ]; then ln -sfn "$IMAGE_TAR" "$DIR/images/images.tar"; fi
}
# What is built once for every Kubernetes version (the views add kubelet and kube-scheduler).
built() {
  local b
  for b in containerd containerd-shim-runc-v2 ctr; do [ -x "$DIR/bin/$b" ] || return 1; done
  for b in "${CNI_PLUGINS[@]}"; do [ -x "$DIR/cni/$b" ] || return 1; done
  [ -f "$DIR/images/$IMAGE_TAR" ]
}

# Warm: everything is there already (nothing on the machine is touched, no lock).
debian_missing
if [ "${#need_packages[@]}" -eq 0 ]; then
  image_tar
  if built; then
    RUNC="$(command -v runc)"
    K8S_BIN="$("$HACK/controlplane.sh" kubelet kube-scheduler | tail -n 1)"
    link_k8s
    log "reusing cached node binaries in $DIR ($VIEW)"
    echo "$VIEW"
    exit 0
  fi
fi

# Cold: the lock first, then the machine (apt), then the builds. Concurrent callers wait
# here and then find everything done.
lock_cache_dir "$DIR"
log "holding the node build lock $DIR/.lock"

debian_missing
# Under the lock: apt-get waits for any other apt or dpkg (hack/lib/build.sh).
[ "${#need_packages[@]}" -eq 0 ] || apt_install "${need_packages[@]}"
RUNC="$(command -v runc)"
RUNC_VERSION="$("$RUNC" --version | awk 'NR==1 {print $3}')"
image_tar

# Kubernetes' node commands: the control plane's cache folder, built once for both.
K8S_BIN="$("$HACK/controlplane.sh" kubelet kube-scheduler | tail -n 1)"

mkdir -p "$DIR/bin" "$DIR/cni" "$DIR/images"
link_k8s
if built; then
  log "reusing node binaries another process just built in $DIR ($VIEW)"
  echo "$VIEW"
  exit 0
fi

go_env
start=$(date +%s)
[ -x "$DIR/bin/containerd" ] && [ -x "$DIR/cni/bridge" ] \
  || log "building containerd v$CONTAINERD_VERSION and CNI plugins v$CNI_PLUGINS_VERSION with $GO_VERSION into $DIR (first time only: several minutes)"

# `go install module/cmd@version` works for these modules (no replace directives); it
# goes to a scratch GOBIN and is renamed last, so an interrupted build never looks done.
scratch="$DIR/.gobin"
rm -rf "$scratch"
mkdir -p "$scratch"
if [ ! -x "$DIR/bin/containerd" ] || [ ! -x "$DIR/bin/containerd-shim-runc-v2" ] || [ ! -x "$DIR/bin/ctr" ]; then
  ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    GOBIN="$scratch" timed "$cmd build" go install -trimpath -ldflags "$ldflags" \
      "github.com/containerd/containerd/v2/cmd/$cmd@v$CONTAINERD_VERSION"
  done
  for cmd in containerd containerd-shim-runc-v2 ctr; do mv "$scratch/$cmd" "$DIR/bin/$cmd"; done
fi
missing_cni=()
for p in "${CNI_PLUGINS[@]}"; do [ -x "$DIR/cni/$p" ] || missing_cni+=("$p"); done
if [ "${#missing_cni[@]}" -gt 0 ]; then
  pkgs=()
  for p in "${missing_cni[@]}"; do
    case "$p" in
      host-local) pkgs+=("github.com/containernetworking/plugins/plugins/ipam/$p@v$CNI_PLUGINS_VERSION") ;;
      *) pkgs+=("github.com/containernetworking/plugins/plugins/main/$p@v$CNI_PLUGINS_VERSION") ;;
    esac
  done
  GOBIN="$scratch" timed "CNI plugins build" go install -trimpath -ldflags "-s -w" "${pkgs[@]}"
  for p in "${missing_cni[@]}"; do mv "$scratch/$p" "$DIR/cni/$p"; done
fi
rm -rf "$scratch"

if [ ! -f "$DIR/images/$IMAGE_TAR" ]; then
  python3 "$HACK/lib/oci_image.py" --busybox /bin/busybox --out "$DIR/images/$IMAGE_TAR" \
    --name "$IMAGE_NAME" --pause "$PAUSE_NAME"
  ln -sfn "$IMAGE_TAR" "$DIR/images/images.tar"
fi

log "built in $(( $(date +%s) - start ))s: $("$DIR/bin/containerd" --version), $("$VIEW/bin/kubelet" --version), runc $RUNC_VERSION, busybox $BUSYBOX_VERSION"
echo "$VIEW"
