# Shared by the scripts of hack/ (sourced, not run): logging, timing, the cache root, the
# build lock and apt-get, so every script builds and caches the same way.
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

# apt-get, waiting (up to 15 min) for another apt or dpkg that holds Debian's locks rather
# than failing: dpkg's own lock through DPkg::Lock::Timeout, the package lists' lock (which
# `apt-get update` takes without a timeout) by retrying.
apt_wait() {
  local attempt out
  for attempt in $(seq 1 90); do
    if out="$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@" 2>&1)"; then
      printf '%s\n' "$out" >&2
      return 0
    fi
    if ! printf '%s' "$out" | grep -qi 'could not get lock\|unable to acquire\|is another process using it'; then
      printf '%s\n' "$out" >&2
      return 1
    fi
    [ "$attempt" -gt 1 ] || log "another apt or dpkg holds Debian's lock: waiting for it"
    sleep 10
  done
  printf '%s\n' "$out" >&2
  return 1
}

# Install Debian packages (root and apt-get only; otherwise say what to install and fail).
apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    log "missing $*: install them (Debian: apt-get install $*)"
    exit 1
  fi
  log "installing $* from Debian"
  apt_wait update -qq || { log "apt-get update failed"; exit 1; }
  apt_wait install -y -qq --no-install-recommends "$@" || { log "apt-get install $* failed"; exit 1; }
}
