#!/usr/bin/env bash
# Produce the `helm` binary the chart tests use (helm lint, helm template).
#
# There are no release downloads on our machines, only the Go module proxy, so helm is
# compiled from helm.sh/helm/v3 at a pinned version inside a small wrapper module (the
# same way hack/controlplane.sh builds kube-apiserver). The result is cached outside the
# clone, keyed by (helm, go) versions, so a fresh clone on the same machine reuses it, and
# the build is locked so concurrent callers build once.
#
#   hack/helm.sh          # prints the path of the helm binary as the last line of stdout
#
# HELM, when set to an executable, is used as it is. Progress goes to stderr.
set -euo pipefail

LOG_PREFIX=helm
# shellcheck source=hack/lib/build.sh
. "$(dirname "$0")/lib/build.sh"

HELM_VERSION="${DRACO_HELM_VERSION:-3.22.0}"

if [ -n "${HELM:-}" ] && [ -x "$HELM" ]; then
  log "using HELM=$HELM"
  echo "$HELM"
  exit 0
fi

command -v go >/dev/null || { log "go is required to build helm (Go >= 1.26)"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
DIR="$CACHE_ROOT/helm-v${HELM_VERSION}_${GO_VERSION}"
BIN="$DIR/bin/helm"

if [ -x "$BIN" ]; then
  log "reusing cached $BIN"
  echo "$BIN"
  exit 0
fi

lock_cache_dir "$DIR"
if [ -x "$BIN" ]; then
  log "reusing $BIN another process just built"
  echo "$BIN"
  exit 0
fi

go_env
mkdir -p "$DIR/bin" "$DIR/src"
start=$(date +%s)
log "building helm v$HELM_VERSION with $GO_VERSION into $DIR (first time only: several minutes)"
(
  cd "$DIR/src"
  [ -f go.mod ] || go mod init local.invalid/draco-helm >/dev/null 2>&1
  go mod edit -require="helm.sh/helm/v3@v$HELM_VERSION" -tool=helm.sh/helm/v3/cmd/helm
  go mod tidy >&2
  # As upstream's Makefile: helm reports its version from these variables, and `helm
  # template`/`helm lint` assume the Kubernetes minor of the client-go they were built with
  # (without them: v1.20, and a chart's kubeVersion ">=1.30" fails).
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
  ldflags="$ldflags -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  k8s_minor="$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags="$ldflags -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
  done
  timed "helm build" go build -trimpath -ldflags "$ldflags" -o "$BIN.tmp" helm.sh/helm/v3/cmd/helm
  mv "$BIN.tmp" "$BIN"
)
log "built in $(( $(date +%s) - start ))s: $("$BIN" version --short)"
echo "$BIN"
