#!/usr/bin/env bash
# Build podresources-client (hack/podresources-client: the kubelet's own PodResources v1
# client package, k8s.io/kubelet's pkg/apis/podresources/v1, the one dcgm-exporter uses,
# behind a command that prints what a socket answers as JSON) from the Go module proxy.
#
# The binary is cached outside the clone, keyed by the Go version and a hash of the
# program's sources; several sessions asking at once build it once (flock).
#
# Prints the path of the binary as the last line of stdout; progress goes to stderr.
set -euo pipefail

CACHE_ROOT="${DRACO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/draco}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/podresources-client" && pwd)"

log() { printf 'podresources-client: %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is required to build the PodResources client (Go >= 1.26)"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
SOURCES_HASH="$(cat "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum" | sha256sum | cut -c1-12)"
DIR="$CACHE_ROOT/podresources-client/${GO_VERSION}_${SOURCES_HASH}"
BIN="$DIR/podresources-client"

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
log "building with $GO_VERSION into $BIN (first time only)"
rm -rf "$DIR/src"
mkdir -p "$DIR/src"
cp "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum" "$DIR/src/"
(
  cd "$DIR/src"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
  go build -trimpath -o "$BIN.tmp" . >&2
)
mv "$BIN.tmp" "$BIN"
echo "$BIN"
