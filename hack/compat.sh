#!/usr/bin/env bash
# `make compat`: the representative e2e set on each Kubernetes version of the matrix, and a
# table of results, version x area. Builds what is missing first (hack/controlplane.sh:
# kube-apiserver, etcd and kubectl of each version, cached under ~/.cache/draco; cold,
# ~20-30 min per version on two busy cores; warm, seconds). The set runs on simulated
# nodes, so no kubelet or kube-scheduler of each version is needed; the optional area
# `node` (named in DRACO_COMPAT_AREAS) runs the real-node files on each version's kubelet
# and kube-scheduler (hack/node.sh builds them; root).
#
#   DRACO_COMPAT_VERSIONS="1.30.14 1.37.1" make compat   # a part of the matrix
#   DRACO_COMPAT_AREAS="agent chart" make compat        # a part of the areas
#   DRACO_COMPAT_AREAS="node" make compat               # the real node on each version
#
# Results go to $DRACO_COMPAT_DIR (default .compat/): one JUnit file per version, the
# pytest log, and table.md (what docs/install.md quotes). Exit 1 when any test failed.
set -uo pipefail

LOG_PREFIX=compat
HACK="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=hack/lib/build.sh
. "$HACK/lib/build.sh"
ROOT="$(dirname "$HACK")"
cd "$ROOT" || exit 2

# The latest patch of each minor on the Go module proxy (2026-11); 1.37 is `make test`'s.
VERSIONS="${DRACO_COMPAT_VERSIONS:-1.30.14 1.31.14 1.32.13 1.33.13 1.37.1}"
OUT="${DRACO_COMPAT_DIR:-$ROOT/.compat}"
PYTEST="${PYTEST:-$ROOT/.venv/bin/pytest}"
WORKERS="${PYTEST_WORKERS:-1}"
AREAS="$("$ROOT/.venv/bin/python" "$HACK/compat_table.py" --areas ${DRACO_COMPAT_AREAS:-})" || exit 2
mkdir -p "$OUT"

failed=0
for version in $VERSIONS; do
  log "Kubernetes $version: building what is missing (cached)"
  started=$(date +%s)
  if ! cp_bin="$(KUBEBUILDER_ASSETS= DRACO_KUBE_VERSION="$version" "$HACK/controlplane.sh" | tail -n 1)"; then
    log "Kubernetes $version: the build failed; see above"
    echo "build-failed" > "$OUT/$version.status"
    failed=1
    continue
  fi
  node_assets=""
  if [[ " $AREAS " == *" tests/e2e/test_node_"* ]] \
    && ! node_assets="$(DRACO_KUBE_VERSION="$version" "$HACK/node.sh" | tail -n 1)"; then
    log "Kubernetes $version: the node build failed; see above"
    echo "build-failed" > "$OUT/$version.status"
    failed=1
    continue
  fi
  built=$(date +%s)
  log "Kubernetes $version: built or reused in $((built - started))s; running the e2e set"
  # shellcheck disable=SC2086  # AREAS is a list of test files
  KUBEBUILDER_ASSETS="$cp_bin" DRACO_NODE_ASSETS="$node_assets" HELM="$("$HACK/helm.sh" | tail -n 1)" \
    "$PYTEST" $AREAS -n "$WORKERS" --dist loadgroup -p no:cacheprovider -q \
      --junitxml="$OUT/$version.xml" ${PYTEST_ARGS:-} > "$OUT/$version.log" 2>&1
  rc=$?
  echo "$rc" > "$OUT/$version.status"
  echo "$((built - started)) $(( $(date +%s) - built ))" > "$OUT/$version.seconds"
  tail -n 3 "$OUT/$version.log" >&2
  [ "$rc" -eq 0 ] || failed=1
done

"$ROOT/.venv/bin/python" "$HACK/compat_table.py" --table "$OUT" $VERSIONS | tee "$OUT/table.md"
exit "$failed"
