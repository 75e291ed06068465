#!/usr/bin/env bash
# Build the Dockerfile's image without a container engine or a registry: `make image` runs
# this where neither docker nor podman is installed (our machines, CI).
#
# The Dockerfile's stages, done with what a Debian machine has:
#
#   FROM python:3.11-slim-bookworm  ->  a root filesystem from Debian's own packages
#                                       (debootstrap, bookworm, minbase + python3, which is
#                                       3.11), with the "nonroot" user 65532; cached outside
#                                       the clone, as is the layer made from it
#   the build stage                 ->  the wheel of this tree and every dependency's wheel,
#                                       fetched by the Python 3.11 running this (pip's cache
#                                       makes a second build quick); a virtualenv at
#                                       /opt/draco made by the image's own python3 (chroot),
#                                       the wheels installed into it by pip running there,
#                                       no pip left in it; `draco --version` run as 65532
#   the final stage                 ->  an OCI image: the base layer, a layer holding only
#                                       /opt/draco, ENTRYPOINT ["draco"], CMD ["--help"],
#                                       USER 65532:65532, the Dockerfile's ENV and labels
#
# The image is written by hack/lib/oci_image.py as an OCI layout tarball that
# `ctr images import`, `docker load`, `podman load` and `skopeo copy oci-archive:...` read.
# It is cached too, keyed by the tree's sources, the extras and these scripts, so asking
# again for an unchanged tree answers at once.
#
#   hack/image.sh [NAME]        # NAME default draco.invalid/draco:<version>; prints the tarball
#   EXTRAS=nvidia hack/image.sh # with the NVML bindings (the Dockerfile's EXTRAS)
#   TARGET=dev hack/image.sh    # the Dockerfile's `dev` stage: /opt/draco owned by 65532
#                               # (for Tilt's live update)
#
# Needs root (debootstrap, chroot), apt-get (debootstrap is installed when missing, under
# the build lock) and a Python 3.11 with pip. Progress goes to stderr; the tarball's path is
# the last line of stdout.
set -euo pipefail

LOG_PREFIX=image
HACK="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HACK/.." && pwd)"
# shellcheck source=hack/lib/build.sh
. "$HACK/lib/build.sh"

VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$ROOT/operator/draco/__init__.py")"
NAME="${1:-draco.invalid/draco:$VERSION}"
EXTRAS="${EXTRAS:-}"
TARGET="${TARGET:-final}"
SUITE=bookworm
PYTHON_MINOR=3.11
MIRROR="${DRACO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-python3}"

case "$TARGET" in final|dev) ;; *) log "TARGET is final or dev, not $TARGET"; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { log "needs root (debootstrap and chroot); or use docker/podman: make image ENGINE=..."; exit 1; }
have_minor="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[ "$have_minor" = "$PYTHON_MINOR" ] || {
  log "$PYTHON is $have_minor: the image's python3 is $PYTHON_MINOR, whose wheels it fetches (set PYTHON=...)"
  exit 1
}

IMAGES="$CACHE_ROOT/image"
BASE="$IMAGES/base-$SUITE-minbase-python3"
mkdir -p "$IMAGES"

# ---- the base: a root filesystem from Debian, once per machine

base_layer="$BASE/layer-$(sha256sum "$HACK/lib/oci_image.py" | cut -c1-12).tar.gz"
if [ ! -f "$base_layer" ]; then
  lock_cache_dir "$BASE"
  if [ ! -f "$BASE/rootfs/.done" ]; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    log "making a $SUITE root filesystem with python3 from $MIRROR (first time only: a few minutes)"
    rm -rf "$BASE/rootfs.tmp" "$BASE/rootfs"
    timed "debootstrap" debootstrap --variant=minbase --include=python3 "$SUITE" "$BASE/rootfs.tmp" "$MIRROR" >&2
    r="$BASE/rootfs.tmp"
    # The Dockerfile's final stage: the user the chart's securityContext runs as.
    chroot "$r" groupadd --gid 65532 nonroot
    chroot "$r" useradd --uid 65532 --gid 65532 --no-create-home nonroot
    # What an image does not need: downloaded packages, package lists, logs.
    rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/var/log/* "$r"/tmp/* \
      "$r"/usr/share/doc/* "$r"/usr/share/man/* "$r"/usr/share/info/*
    # The runtime writes its own resolv.conf, hostname and hosts into every container.
    : >"$r/etc/resolv.conf"
    touch "$r/.done"
    mv "$r" "$BASE/rootfs"
  fi
  if [ ! -f "$base_layer" ]; then
    timed "base layer" "$PYTHON" "$HACK/lib/oci_image.py" layer --root "$BASE/rootfs" --out "$base_layer.tmp" \
      --exclude-contents dev --exclude-contents proc --exclude-contents sys --exclude-contents run
    mv "$base_layer.tmp.json" "$base_layer.json"
    mv "$base_layer.tmp" "$base_layer"
  fi
  exec 9>&-
fi

# ---- draco: the wheel and its dependencies in /opt/draco, once per tree

# Everything the image is made of: the sources the Dockerfile copies, the extras, the
# target, these scripts and the base.
key="$( { cd "$ROOT" && tar -c --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
            --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' pyproject.toml README.md operator
          printf '%s\n' "$EXTRAS" "$TARGET" "$SUITE" "$base_layer"
          cat "$HACK/image.sh" "$HACK/lib/oci_image.py"; } | sha256sum | cut -c1-16)"
suffix="${EXTRAS:+-$EXTRAS}$([ "$TARGET" = final ] || echo "-$TARGET")"
APP="$IMAGES/draco-$VERSION$suffix-$key.layer.tar.gz"
OUT="$IMAGES/draco-$VERSION$suffix-$key-$(printf '%s' "$NAME" | sha256sum | cut -c1-8).tar"
if [ -f "$OUT" ]; then
  touch "$OUT" "$APP"
  log "reusing $OUT ($NAME)"
  echo "$OUT"
  exit 0
fi

start=$(date +%s)
work="$(mktemp -d "$IMAGES/build.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

if [ ! -f "$APP" ]; then
  log "building draco $VERSION${EXTRAS:+ [$EXTRAS]} ($TARGET) in $work"
  # The wheels, as the build stage's `pip wheel` and `pip install` would fetch them: the
  # dependencies' once per pyproject.toml and extras (cached), this tree's every time.
  deps="$IMAGES/wheels-$( { cat "$ROOT/pyproject.toml"; echo "$EXTRAS"; } | sha256sum | cut -c1-16)"
  if [ ! -f "$deps/.done" ]; then
    rm -rf "$deps.tmp"
    timed "dependency wheels" "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$deps.tmp" \
      "$ROOT${EXTRAS:+[$EXTRAS]}" >&2
    rm -f "$deps.tmp"/draco-*.whl
    touch "$deps.tmp/.done"
    rm -rf "$deps" && mv "$deps.tmp" "$deps"
  fi
  mkdir -p "$work/wheels"
  cp "$deps"/*.whl "$work/wheels/"
  timed "wheel" "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$work/wheels" \
    "$ROOT" >&2

  # A scratch copy of the base, where the image's python3 makes the virtualenv and pip
  # (this machine's, run by that python3) installs the wheels into it.
  r="$work/root"
  cp -a "$BASE/rootfs" "$r"
  cp -a "$work/wheels" "$r/tmp/wheels"
  pip_dir="$("$PYTHON" -c 'import os, pip; print(os.path.dirname(pip.__file__))')"
  mkdir -p "$r/tmp/pip"
  cp -a "$pip_dir" "$r/tmp/pip/pip"
  # In the image: its own environment, not this machine's (PIP_* settings, paths).
  clean_env=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8)
  chroot "$r" "${clean_env[@]}" python3 -m venv --without-pip /opt/draco
  timed "install" chroot "$r" "${clean_env[@]}" PYTHONPATH=/tmp/pip /opt/draco/bin/python -m pip install --quiet \
    --disable-pip-version-check --no-cache-dir --no-index --find-links /tmp/wheels \
    "draco${EXTRAS:+[$EXTRAS]}==$VERSION" >&2
  [ "$TARGET" = final ] || chown -R 65532:65532 "$r/opt/draco"
  version="$(chroot --userspec=65532:65532 "$r" env -i PATH=/opt/draco/bin:/usr/bin:/bin HOME=/ draco --version)"
  log "in the image, as 65532: draco --version: $version"
  timed "draco layer" "$PYTHON" "$HACK/lib/oci_image.py" layer --root "$r" --path opt/draco --out "$work/app.tar.gz"
  mv "$work/app.tar.gz.json" "$APP.json"
  mv "$work/app.tar.gz" "$APP"
fi

"$PYTHON" "$HACK/lib/oci_image.py" image --layer "$base_layer" --layer "$APP" --name "$NAME" \
  --entrypoint draco --cmd=--help --user 65532:65532 \
  --env PATH=/opt/draco/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 --env LANG=C.UTF-8 \
  --label org.opencontainers.image.title=draco \
  --label "org.opencontainers.image.description=Dynamic Resource Allocation for any cluster" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.version=$VERSION" \
  --history "hack/image.sh: Debian $SUITE minbase + python3, draco $VERSION${EXTRAS:+[$EXTRAS]} in /opt/draco" \
  --out "$work/image.tar"
mv "$work/image.tar" "$OUT"
# Images and layers of trees nobody asked for in a day go (the cache grows by one per tree).
find "$IMAGES" -maxdepth 1 -name 'draco-*' -mmin +1440 -delete 2>/dev/null || true
log "built in $(( $(date +%s) - start ))s: $OUT ($(du -m "$OUT" | cut -f1) MiB, $NAME)"
echo "$OUT"
