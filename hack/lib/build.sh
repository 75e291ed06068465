# Shared by hack/controlplane.sh and hack/node.sh (sourced, not run): logging, timing,
# the cache root and the build lock, so both scripts build and cache the same way.
#
# The caller sets LOG_PREFIX before sourcing.

CACHE_ROOT="${DRACO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/draco}"

log() { printf '%s: %s\n' "${LOG_PREFIX:-build}" "$*" >&2; }

# Run a build step and log its wall time and peak memory, so the cost of a cold build is
# visible in the log.
timed() {
  local what="$1"; shift
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "${LOG_PREFIX:-build}: $what took %es, peak RSS %M KiB" "$@"
  else
    "$@"
  fi
}

# Take the build lock of a cache folder (several test sessions or developers may ask at
# once: only one builds, the others wait and then reuse). Held until the script exits.
lock_cache_dir() {
  mkdir -p "$1"
  exec 9>"$1/.lock"
  flock 9
}

# Offline, reproducible Go builds: no toolchain downloads, the module graph resolved by us.
go_env() {
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
}
