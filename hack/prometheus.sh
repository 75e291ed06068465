#!/usr/bin/env bash
# Produce `prometheus` and `promtool` for the chart's alert tests (`promtool test rules`)
# and the observability e2e (a real Prometheus scraping a test cluster).
#
# Taken from Debian's `prometheus` package rather than built from the Go module proxy: the
# package is one static binary pair that downloads and unpacks in seconds, where a build of
# github.com/prometheus/prometheus takes many minutes and gigabytes. The .deb is fetched
# with `apt-get download` and unpacked with `dpkg-deb -x` into the cache: nothing is
# installed on the machine (no service, no user), and no root is needed once Debian's
# package lists are there (as root, they are fetched when missing). Cached outside the
# clone, keyed by the package's version, under the build lock.
#
#   hack/prometheus.sh    # prints the folder holding prometheus and promtool, last line of stdout
#
# PROMETHEUS_ASSETS, when set to a folder holding both, is used as it is. Progress goes to stderr.
set -euo pipefail

LOG_PREFIX=prometheus
# shellcheck source=hack/lib/build.sh
. "$(dirname "$0")/lib/build.sh"

have_both() { [ -x "$1/prometheus" ] && [ -x "$1/promtool" ]; }

if [ -n "${PROMETHEUS_ASSETS:-}" ] && have_both "$PROMETHEUS_ASSETS"; then
  log "using PROMETHEUS_ASSETS=$PROMETHEUS_ASSETS"
  echo "$PROMETHEUS_ASSETS"
  exit 0
fi

command -v apt-get >/dev/null || { log "apt-get is required (Debian's prometheus package), or set PROMETHEUS_ASSETS"; exit 1; }

candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p' | grep -v '(none)' || true; }
VERSION="${DRACO_PROMETHEUS_VERSION:-$(candidate)}"
if [ -z "$VERSION" ] && [ "$(id -u)" -eq 0 ]; then
  log "no package lists yet: apt-get update"
  apt_wait update -qq || { log "apt-get update failed"; exit 1; }
  VERSION="$(candidate)"
fi
[ -n "$VERSION" ] || { log "Debian's package lists know no prometheus (run apt-get update as root), or set PROMETHEUS_ASSETS"; exit 1; }

DIR="$CACHE_ROOT/prometheus-${VERSION//[^A-Za-z0-9._+-]/_}"
if have_both "$DIR/bin"; then
  log "reusing cached $DIR/bin"
  echo "$DIR/bin"
  exit 0
fi

lock_cache_dir "$DIR"
if have_both "$DIR/bin"; then
  log "reusing $DIR/bin another process just made"
  echo "$DIR/bin"
  exit 0
fi

start=$(date +%s)
work="$(mktemp -d "$DIR/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT
log "fetching Debian's prometheus $VERSION into $DIR"
(cd "$work" && apt_wait download "prometheus=$VERSION") || { log "apt-get download prometheus=$VERSION failed"; exit 1; }
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$DIR/bin"
for b in prometheus promtool; do
  install -m 0755 "$work/root/usr/bin/$b" "$DIR/bin/$b.tmp"
  mv "$DIR/bin/$b.tmp" "$DIR/bin/$b"
done
log "ready in $(( $(date +%s) - start ))s: $("$DIR/bin/prometheus" --version 2>&1 | head -n 1)"
echo "$DIR/bin"
