#!/usr/bin/env bash
# Produce the `karpenter` binary the autoscaling e2e runs (make e2e-autoscaling): the real
# Karpenter controller (sigs.k8s.io/karpenter) with its in-tree `kwok` cloud provider, whose
# NodeClaims become Node objects drawn from an instance-type file (no cloud, no kubelet).
#
# There are no release downloads on our machines, only the Go module proxy, so Karpenter is
# compiled from its module at a pinned version inside a small wrapper module (as
# hack/helm.sh builds helm). v1.14.1 is the newest release whose go.mod this machine's Go
# (1.26.8) satisfies without fetching a toolchain. The result is cached outside the clone,
# keyed by (karpenter, go) versions, with Karpenter's CRDs beside it (the e2e applies
# them), and the build is locked so concurrent callers build once.
#
#   hack/karpenter.sh     # prints the path of the karpenter binary as the last line of stdout
#
# KARPENTER, when set to an executable, is used as it is (its CRDs are then looked for in
# KARPENTER_CRDS). Progress goes to stderr.
set -euo pipefail

LOG_PREFIX=karpenter
# shellcheck source=hack/lib/build.sh
. "$(dirname "$0")/lib/build.sh"

KARPENTER_VERSION="${DRACO_KARPENTER_VERSION:-1.14.1}"
# cluster-autoscaler's ProvisioningRequest CRD (autoscaling.x-k8s.io/v1): the module proxy does
# not serve k8s.io/autoscaler, but OpenShift's cluster-autoscaler-operator ships the CRD its
# generator makes from cluster-autoscaler's API types; the e2e checks draco's requests against it.
PROVREQ_MODULE="github.com/openshift/cluster-autoscaler-operator"
PROVREQ_VERSION="${DRACO_PROVREQ_VERSION:-v0.0.1-0.20260608074635-5c8643284941}"
PROVREQ_CRD="autoscaling.x-k8s.io_provisioningrequests.yaml"

if [ -n "${KARPENTER:-}" ] && [ -x "$KARPENTER" ]; then
  log "using KARPENTER=$KARPENTER"
  echo "$KARPENTER"
  exit 0
fi

command -v go >/dev/null || { log "go is required to build karpenter (Go >= 1.26.6)"; exit 1; }
GO_VERSION="$(go env GOVERSION)"
DIR="$CACHE_ROOT/karpenter-v${KARPENTER_VERSION}_${GO_VERSION}"
BIN="$DIR/bin/karpenter"

if [ -x "$BIN" ] && [ -f "$DIR/crds/$PROVREQ_CRD" ]; then
  log "reusing cached $BIN"
  echo "$BIN"
  exit 0
fi

lock_cache_dir "$DIR"
if [ -x "$BIN" ] && [ -f "$DIR/crds/$PROVREQ_CRD" ]; then
  log "reusing $BIN another process just built"
  echo "$BIN"
  exit 0
fi

go_env
mkdir -p "$DIR/bin" "$DIR/src"
start=$(date +%s)
log "building karpenter v$KARPENTER_VERSION (kwok provider) with $GO_VERSION into $DIR (first time only: many minutes)"
(
  cd "$DIR/src"
  [ -f go.mod ] || go mod init local.invalid/draco-karpenter >/dev/null 2>&1
  go mod edit -require="sigs.k8s.io/karpenter@v$KARPENTER_VERSION" -tool=sigs.k8s.io/karpenter/kwok
  go mod tidy >&2
  # The NodePool/NodeClaim CRDs and the kwok provider's KWOKNodeClass CRD ship in the
  # module; copy them next to the binary so the e2e applies the ones of this very build.
  mod_dir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
  rm -rf "$DIR/crds.tmp" && mkdir -p "$DIR/crds.tmp"
  cp "$mod_dir"/pkg/apis/crds/*.yaml "$mod_dir"/kwok/apis/crds/*.yaml "$DIR/crds.tmp/"
  provreq_dir="$(go mod download -json "$PROVREQ_MODULE@$PROVREQ_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  cp "$provreq_dir/install/11_provisioningrequest.crd.yaml" "$DIR/crds.tmp/$PROVREQ_CRD"
  chmod -R u+w "$DIR/crds.tmp"
  if [ ! -x "$BIN" ]; then
    timed "karpenter build" go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" sigs.k8s.io/karpenter/kwok
    mv "$BIN.tmp" "$BIN"
  fi
  rm -rf "$DIR/crds" && mv "$DIR/crds.tmp" "$DIR/crds"
)
log "built in $(( $(date +%s) - start ))s"
echo "$BIN"
