#!/usr/bin/env bash
# Produce kube-apiserver, etcd and kubectl for the test control plane, and on request more
# Kubernetes commands built the same way (hack/node.sh asks for kubelet and kube-scheduler):
#
#   hack/controlplane.sh                          # kube-apiserver, etcd, kubectl
#   hack/controlplane.sh kubelet kube-scheduler   # the same folder, plus those two
#
# There are no release downloads on our machines, only the Go module proxy, so the
# binaries are compiled from it: k8s.io/kubernetes cannot be `go install`ed (its go.mod
# replaces every staging module with a local path), so we build it inside a small
# wrapper module that replaces each staging module with its published v0.Y.Z twin.
# etcd's server module has the same problem and gets a wrapper of its own. Every command
# of k8s.io/kubernetes shares that one wrapper module and Go build cache, so the extra
# commands cost only what they do not share with kube-apiserver.
#
# The result is cached outside the clone, keyed by (kubernetes, etcd, go) versions, so a
# fresh clone on the same machine reuses it. When KUBEBUILDER_ASSETS already points at a
# folder holding every binary asked for, that folder is used as it is.
#
# Prints the folder that holds the binaries as the last line of stdout; progress goes to
# stderr.
set -euo pipefail

LOG_PREFIX=controlplane
# shellcheck source=hack/lib/build.sh
. "$(dirname "$0")/lib/build.sh"

KUBE_VERSION="${DRACO_KUBE_VERSION:-1.37.1}"
ETCD_VERSION="${DRACO_ETCD_VERSION:-3.6.16}"
EXTRA=("$@")
for cmd in "${EXTRA[@]}"; do
  case "$cmd" in
    kubelet|kube-scheduler|kube-controller-manager|kube-proxy) ;;
    *) log "unknown command $cmd (known: kubelet kube-scheduler kube-controller-manager kube-proxy)"; exit 2 ;;
  esac
done

have_all() {
  local b
  for b in kube-apiserver etcd kubectl "${EXTRA[@]}"; do [ -x "$1/$b" ] || return 1; done
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && have_all "$KUBEBUILDER_ASSETS"; then
  log "using binaries in KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

command -v go >/dev/null || { log "go is required to build the control plane (Go >= 1.26)"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
KEY="k8s-v${KUBE_VERSION}_etcd-v${ETCD_VERSION}_${GO_VERSION}"
DIR="$CACHE_ROOT/controlplane/$KEY"
BIN="$DIR/bin"

if have_all "$BIN"; then
  log "reusing cached binaries in $BIN"
  echo "$BIN"
  exit 0
fi

lock_cache_dir "$DIR"
if have_all "$BIN"; then
  log "reusing binaries another process just built in $BIN"
  echo "$BIN"
  exit 0
fi

go_env
MINOR="$(echo "$KUBE_VERSION" | cut -d. -f2)"
STAGING_VERSION="v0.${KUBE_VERSION#1.}"
mkdir -p "$BIN" "$DIR/src/kubernetes" "$DIR/src/etcd"
start=$(date +%s)

# The commands of k8s.io/kubernetes still missing, with the build tags upstream uses.
kube_missing=()
for b in kube-apiserver kubectl "${EXTRA[@]}"; do [ -x "$BIN/$b" ] || kube_missing+=("$b"); done
log "building ${kube_missing[*]:-} v$KUBE_VERSION$([ -x "$BIN/etcd" ] || echo " and etcd v$ETCD_VERSION") with $GO_VERSION into $BIN (first time only: several minutes each)"

if [ "${#kube_missing[@]}" -gt 0 ]; then
(
  cd "$DIR/src/kubernetes"
  [ -f go.mod ] || go mod init local.invalid/draco-controlplane >/dev/null 2>&1
  kmod="$(go list -m -json "k8s.io/kubernetes@v$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  # Every staging module k8s.io/kubernetes requires at v0.0.0 or replaces with ./staging.
  modules="$( { sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$kmod"
                awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$kmod"; } | sort -u )"
  for m in $modules; do go mod edit -replace="$m=$m@$STAGING_VERSION"; done
  # A dependency's godebug line is ignored: mirror it so the binary behaves like upstream's.
  # Both forms: `godebug key=value` (1.33 on) and a `godebug ( ... )` block (1.32).
  for setting in $(awk '/^godebug[[:space:]]*\(/ {block = 1; next}
                        block && /^\)/ {block = 0; next}
                        block {print $1; next}
                        /^godebug[[:space:]]/ {print $2}' "$kmod"); do
    go mod edit -godebug="$setting"
  done
  # Require the module and declare the commands as tools, then let tidy resolve the graph.
  # (`go get -tool <package>@v` would first probe the package path as a module, which the
  # proxy answers with 403, and go stops there.)
  tools=()
  for b in kube-apiserver kubectl "${EXTRA[@]}"; do tools+=("-tool=k8s.io/kubernetes/cmd/$b"); done
  go mod edit -require="k8s.io/kubernetes@v$KUBE_VERSION" "${tools[@]}"
  go mod tidy >&2
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR"
    ldflags="$ldflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for b in "${kube_missing[@]}"; do
    tags="selinux,notest,grpcnotrace"
    [ "$b" != kubectl ] || tags=""
    timed "$b build" go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" \
      -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  done
  # Renamed last, so an interrupted build never looks complete.
  for b in "${kube_missing[@]}"; do mv "$BIN/$b.tmp" "$BIN/$b"; done
)
fi
if [ ! -x "$BIN/etcd" ]; then
  # The same etcd and Go may already be built beside another Kubernetes version.
  for other in "$CACHE_ROOT"/controlplane/*_etcd-v"${ETCD_VERSION}_${GO_VERSION}"/bin/etcd; do
    if [ -x "$other" ] && "$other" --version >/dev/null 2>&1; then
      log "reusing etcd v$ETCD_VERSION from $other"
      cp "$other" "$BIN/etcd.tmp" && mv "$BIN/etcd.tmp" "$BIN/etcd"
      break
    fi
  done
fi
if [ ! -x "$BIN/etcd" ]; then
(
  cd "$DIR/src/etcd"
  [ -f go.mod ] || go mod init local.invalid/draco-etcd >/dev/null 2>&1
  go mod edit -require="go.etcd.io/etcd/server/v3@v$ETCD_VERSION" -tool=go.etcd.io/etcd/server/v3
  go mod tidy >&2
  timed "etcd build" go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
)
fi

log "built in $(( $(date +%s) - start ))s: $("$BIN/kube-apiserver" --version), $("$BIN/etcd" --version | head -1)"
echo "$BIN"
