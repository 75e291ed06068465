#!/usr/bin/env bash
# Produce the `tilt` binary the Tiltfile's dev loop runs with (`tilt ci`, `tilt up`).
#
# There are no release downloads on our machines, only the Go module proxy. tilt cannot be
# `go install`ed (the proxy does not list its versions, and its go.mod has replace
# directives that only apply inside its own module), so it is built inside a copy of its
# own module: download github.com/tilt-dev/tilt at a pinned version, copy it somewhere
# writable, put a placeholder where its web UI would be (upstream builds that with yarn;
# `tilt ci --web-mode=prod` and the terminal need none of it) and `go build ./cmd/tilt`.
# The result is cached outside the clone, keyed by (tilt, go) versions, and the build is
# locked so concurrent callers build once (first time: ~15 min on a busy 2-core machine).
#
#   hack/tilt.sh          # prints the path of the tilt binary as the last line of stdout
#
# TILT, when set to an executable, is used as it is. Progress goes to stderr.
set -euo pipefail

LOG_PREFIX=tilt
# shellcheck source=hack/lib/build.sh
. "$(dirname "$0")/lib/build.sh"

# The newest tilt the Go module proxy serves.
TILT_VERSION="${DRACO_TILT_VERSION:-0.33.21}"

if [ -n "${TILT:-}" ] && [ -x "$TILT" ]; then
  log "using TILT=$TILT"
  echo "$TILT"
  exit 0
fi

command -v go >/dev/null || { log "go is required to build tilt (Go >= 1.26)"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
DIR="$CACHE_ROOT/tilt-v${TILT_VERSION}_${GO_VERSION}"
BIN="$DIR/bin/tilt"

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
# tilt's Tiltfile language server parses with tree-sitter, a C library: cgo is needed (and a
# C compiler; Debian: gcc).
export CGO_ENABLED=1
command -v "${CC:-gcc}" >/dev/null || { log "tilt needs a C compiler (cgo): apt-get install gcc"; exit 1; }
# tilt's module has no go.sum entries for some of what -mod=mod resolves; its own modules
# are not in the checksum database under these versions.
export GONOSUMDB=github.com/tilt-dev
mkdir -p "$DIR/bin"
start=$(date +%s)
log "building tilt v$TILT_VERSION with $GO_VERSION into $DIR (first time only: ~15 minutes)"
moddir="$(go mod download -json "github.com/tilt-dev/tilt@v$TILT_VERSION" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
src="$DIR/src"
rm -rf "$src"
cp -r "$moddir" "$src"
chmod -R u+w "$src"
mkdir -p "$src/pkg/assets/build"
printf '<!doctype html><title>tilt</title><p>The web UI is not built into this tilt (hack/tilt.sh): use the terminal.</p>\n' \
  >"$src/pkg/assets/build/index.html"
(
  cd "$src"
  ldflags="-s -w -X main.version=$TILT_VERSION -X main.date=1970-01-01"
  timed "tilt build" go build -trimpath -ldflags "$ldflags" -o "$BIN.tmp" ./cmd/tilt
)
mv "$BIN.tmp" "$BIN"
rm -rf "$src"
log "built in $(( $(date +%s) - start ))s: $("$BIN" version)"
echo "$BIN"
