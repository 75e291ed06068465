#!/usr/bin/env bash
# Build the upstream allocator runner (hack/upstream-allocator: upstream's structured
# allocator from k8s.io/dynamic-resource-allocation behind a JSON-lines interface) for
# the differential test, from the Go module proxy.
#
# The binary is cached outside the clone, keyed by the module version, the Go version and
# a hash of the program's sources, so a fresh clone on the same machine reuses it and a
# change to the program rebuilds it. Several test sessions may ask at once: one builds
# (flock), the others wait and reuse.
#
# Prints the path of the binary as the last line of stdout; progress goes to stderr.
set -euo pipefail

DRA_VERSION="v0.37.1" # k8s.io/dynamic-resource-allocation, the release of kube 1.37.1
CACHE_ROOT="${DRACO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/draco}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/upstream-allocator" && pwd)"

log() { printf 'upstream-allocator: %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is required to build the upstream allocator (Go >= 1.26)"; exit 1; }
grep -q "k8s.io/dynamic-resource-allocation $DRA_VERSION" "$SRC/go.mod" \
  || { log "$SRC/go.mod does not pin k8s.io/dynamic-resource-allocation $DRA_VERSION"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
SOURCES_HASH="$(cat "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum" | sha256sum | cut -c1-12)"
DIR="$CACHE_ROOT/upstream-allocator/dra-${DRA_VERSION}_${GO_VERSION}_${SOURCES_HASH}"
BIN="$DIR/upstream-allocator"

if [ -x "$BIN" ]; then
  log "reusing $BIN"
  echo "$BIN"
  exit 0
fi

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ -x "$BIN" ]; then
  log "reusing $BIN, which another process just built"
  echo "$BIN"
  exit 0
fi

log "building with $GO_VERSION into $BIN (first time only: a minute or two)"
start=$(date +%s)
# Build from a copy, so the clone's folder is never written to (go.sum stays as committed).
rm -rf "$DIR/src"
mkdir -p "$DIR/src"
cp "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum" "$DIR/src/"
(
  cd "$DIR/src"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
  go build -trimpath -o "$BIN.tmp" . >&2
)
# Renamed last, so an interrupted build never looks complete.
mv "$BIN.tmp" "$BIN"
log "built in $(( $(date +%s) - start ))s"
echo "$BIN"
