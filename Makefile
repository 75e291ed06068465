# The two commands a newcomer needs: `make demo` and `make test`. Each installs what it
# needs by itself: a virtualenv in .venv (from PyPI), the control-plane binaries and the
# test node's (built once from the Go module proxy and Debian into ~/.cache/draco, see
# hack/controlplane.sh and hack/node.sh), Prometheus and promtool (Debian's package,
# unpacked into the same cache in seconds by hack/prometheus.sh).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# What `make unit` and `make e2e` run: a folder, or files and node ids of it
# (`make e2e TESTS=tests/e2e/test_leader.py`; a path in PYTEST_ARGS would run beside the folder).
UNIT_TESTS ?= tests/unit
TESTS ?= tests/e2e
# pytest-xdist workers for `make test`/`make e2e`/`make unit`: each e2e worker starts its own
# control plane (~1-2 GiB with its operators), so auto = cores, at most 3, at most one per
# 2 GiB of available memory, at least 1. PYTEST_WORKERS=0 runs serially in one process.
PYTEST_WORKERS ?= $(shell awk -v c="$$(nproc)" '/^MemAvailable:/ { m = int($$2 / 2097152); \
	w = c < 3 ? c : 3; if (m < w) w = m; if (w < 1) w = 1; print w }' /proc/meminfo)
XDIST = -n $(PYTEST_WORKERS) --dist loadgroup

.PHONY: help venv controlplane node helm prometheus lint typecheck unit e2e test test-stress test-repeat soak compat differential demo crds chart-docs dashboard image e2e-cluster e2e-autoscaling tilt clean bench-versus bench-allocator-versus

help:
	@echo "make demo   run the control plane, a real node, operator, agent and examples; print what the pods saw"
	@echo "            (DEMO_ARGS=--simulate: simulated nodes; DEMO_ARGS=--keep: keep the cluster up)"
	@echo "make test   lint, type checks, unit and e2e tests (builds what it needs)"
	@echo "make unit   unit tests only (no control plane)"
	@echo "make e2e    e2e tests only"
	@echo "make test-stress  make test with two CPU-bound processes beside it (a busy machine)"
	@echo "make test-repeat  the unit suite 20 times, each in a random order (REPEATS=...; seeds printed)"
	@echo "make soak   the fault-injection soak for 30 min beside two CPU hogs (SOAK_SECONDS, SOAK_SEED, SOAK_HOGS)"
	@echo "make compat the representative e2e set on Kubernetes 1.30, 1.31, 1.32, 1.33 and 1.37 (builds each once)"
	@echo "make crds   regenerate crds/ (and the chart's copy) from the models"
	@echo "make chart-docs  regenerate the values reference of docs/install.md from the chart's schema"
	@echo "make dashboard   regenerate the chart's Grafana dashboard from hack/dashboard.py"
	@echo "make image  build the container image: docker/podman, else hack/image.sh (IMAGE=..., EXTRAS=nvidia)"
	@echo "make e2e-autoscaling  the real Karpenter (kwok) scaling GPU nodes for draco's pods (tests/autoscaling)"
	@echo "make e2e-cluster  helm install of the chart and its image on a whole test cluster (tests/cluster)"
	@echo "make tilt   build tilt (hack/tilt.sh) and run \`tilt ci\` on the Tiltfile's local processes"
	@echo "make differential  10,000 random problems through draco's allocator and upstream's, 1,000 random"
	@echo "            placements through draco + kube-scheduler and kube-scheduler with native DRA (needs Go)"
	@echo "make bench-versus  draco + kube-scheduler against kube-scheduler + kube-controller-manager (BENCH_ARGS=...)"
	@echo "make bench-allocator-versus  draco's allocator against upstream's Go allocator, case by case"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

venv: $(STAMP)

controlplane:
	@hack/controlplane.sh >/dev/null

node:
	@hack/node.sh >/dev/null

helm:
	@hack/helm.sh >/dev/null

prometheus:
	@hack/prometheus.sh >/dev/null

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python hack/sizes.py

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest $(UNIT_TESTS) $(XDIST) $(PYTEST_ARGS)

# kube-controller-manager beside the defaults: the extended-resource quota e2e runs its
# resourcequota controller (built once into the same cache, a few minutes cold).
e2e: $(STAMP)
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh kube-controller-manager)" DRACO_NODE_ASSETS="$$(hack/node.sh)" HELM="$$(hack/helm.sh)" \
	PROMETHEUS_ASSETS="$$(hack/prometheus.sh)" \
		$(BIN)/pytest $(TESTS) $(XDIST) $(PYTEST_ARGS)

test: lint typecheck
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh kube-controller-manager)" DRACO_NODE_ASSETS="$$(hack/node.sh)" HELM="$$(hack/helm.sh)" \
	PROMETHEUS_ASSETS="$$(hack/prometheus.sh)" \
		$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

# draco's allocator against upstream's (built from the Go module proxy, cached) on 10,000
# random problems, and draco's placement (operator + kube-scheduler) against kube-scheduler
# with native DRA on 1,000 random cases; `make test` runs a few hundred problems and a few
# dozen cases. DRACO_DIFFERENTIAL_SEED / DRACO_PLACEMENT_SEED replay a run;
# PYTEST_ARGS="-k placement" (or "-k 'not placement'") runs one of the two.
differential: $(STAMP)
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh kube-scheduler)" \
	DRACO_DIFFERENTIAL_CASES=$${DRACO_DIFFERENTIAL_CASES:-10000} DRACO_PLACEMENT_CASES=$${DRACO_PLACEMENT_CASES:-1000} \
		$(BIN)/pytest tests/differential -s $(PYTEST_ARGS)

# The representative e2e set on every Kubernetes version of the matrix, a table of results
# per version and area (hack/compat.sh; DRACO_COMPAT_VERSIONS / DRACO_COMPAT_AREAS narrow
# it). Not part of `make test`: a cold run builds four more Kubernetes versions.
compat: $(STAMP)
	PYTEST_WORKERS=$(PYTEST_WORKERS) hack/compat.sh

# The suite as CI meets it on a shared machine: two CPU-bound processes run beside it.
test-stress:
	@hogs=""; for i in 1 2; do $(PYTHON) -c 'while True: pass' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	$(MAKE) test

# The unit suite REPEATS times (default 20), each in an order of its own: every test shuffled
# among all (pytest-random-order, bucket "global"), a fresh seed per run, printed with the
# command that replays it. Runs them all, then lists the failed ones; not part of `make test`.
REPEATS ?= 20
test-repeat: $(STAMP)
	@failed=""; for i in $$(seq 1 $(REPEATS)); do \
		seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
		echo "== make test-repeat: run $$i of $(REPEATS), seed $$seed"; \
		$(BIN)/pytest $(UNIT_TESTS) $(XDIST) -q -p no:cacheprovider --random-order-bucket=global \
			--random-order-seed=$$seed $(PYTEST_ARGS) || failed="$$failed $$seed"; \
	done; \
	if [ -n "$$failed" ]; then \
		echo "make test-repeat: failed with seeds$$failed; replay one with" \
			"make unit PYTEST_ARGS='--random-order-bucket=global --random-order-seed=SEED'" >&2; exit 1; \
	fi; echo "make test-repeat: $(REPEATS) runs in random order passed"

# The fault-injection soak (tests/e2e/test_soak.py) for SOAK_SECONDS (default 30 min)
# beside SOAK_HOGS CPU-bound processes (default 2): churn while the operator leader and
# standby, the webhook and the agents are killed and restarted, kube-apiserver restarts,
# etcd pauses and prepares fail, invariants checked all along. `make test` runs it for 60 s.
# SOAK_SEED replays a run (the seed is printed).
SOAK_SECONDS ?= 1800
SOAK_HOGS ?= 2
SOAK_SEED ?=
soak: $(STAMP)
	@hogs=""; i=0; while [ $$i -lt $(SOAK_HOGS) ]; do $(PYTHON) -c 'while True: pass' & hogs="$$hogs $$!"; i=$$((i+1)); done; \
	trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" DRACO_SOAK_SECONDS=$(SOAK_SECONDS) DRACO_SOAK_SEED=$(SOAK_SEED) \
		$(BIN)/pytest tests/e2e/test_soak.py -s $(PYTEST_ARGS)

# A real node, or a failure that says why; `DEMO_ARGS=--simulate` asks for two simulated
# nodes instead (no node build), `DEMO_ARGS=--keep` keeps the cluster up afterwards and
# prints its `export KUBECONFIG=` line (Ctrl-C stops it).
DEMO_ARGS ?=
demo: $(STAMP)
	@cp="$$(hack/controlplane.sh)" || { echo "make demo: the control plane could not be built (see above)" >&2; exit 1; }; \
	node=""; \
	case " $(DEMO_ARGS) " in *" --simulate "*) ;; *) \
		node="$$(hack/node.sh)" || { echo "make demo: the real node could not be built (see above); DEMO_ARGS=--simulate runs the demo on simulated nodes" >&2; exit 1; } ;; \
	esac; \
	KUBEBUILDER_ASSETS="$$cp" DRACO_NODE_ASSETS="$$node" $(BIN)/python hack/demo.py $(DEMO_ARGS)

# The chart carries a copy of crds/ (Helm installs charts/draco/crds first); a unit test
# keeps the two identical.
crds: $(STAMP)
	$(BIN)/draco crds -o crds
	rm -f charts/draco/crds/*.yaml && cp crds/*.yaml charts/draco/crds/

chart-docs: $(STAMP)
	$(BIN)/python hack/values-doc.py

# The Grafana dashboard the chart ships (charts/draco/dashboards/draco.json), from
# hack/dashboard.py's panels; a unit test keeps the two equal.
dashboard: $(STAMP)
	$(BIN)/python hack/dashboard.py

# The image of the chart: with docker or podman where a user has one; otherwise built here
# without an engine or a registry by hack/image.sh (Debian root filesystem + the wheel and
# its dependencies in /opt/draco, as the Dockerfile's stages), written as an OCI archive
# (`ctr images import`, `podman load`, `skopeo copy oci-archive:...`).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' operator/draco/__init__.py)
IMAGE ?= draco:$(VERSION)
EXTRAS ?=
ENGINE ?= $(shell command -v docker || command -v podman)
image:
	@if [ -n "$(ENGINE)" ] && $(ENGINE) info >/dev/null 2>&1; then \
		$(ENGINE) build --build-arg EXTRAS=$(EXTRAS) -t $(IMAGE) .; \
	else \
		echo "make image: no working docker or podman; building with hack/image.sh" >&2; \
		tar="$$(EXTRAS=$(EXTRAS) hack/image.sh $(IMAGE) | tail -n 1)" && \
		echo "$(IMAGE): $$tar (OCI archive: ctr -n k8s.io images import, podman load, skopeo copy oci-archive:...)"; \
	fi

# The chart installed with helm on a whole test cluster (control plane, kube-controller-
# manager, a real node), its image built by hack/image.sh and imported into the node's
# containerd: tests/cluster. Not part of `make test` (the image and the cluster take minutes).
CLUSTER_IMAGE ?= draco.invalid/draco:$(VERSION)
e2e-cluster: $(STAMP)
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh kube-controller-manager)" DRACO_NODE_ASSETS="$$(hack/node.sh)" \
	HELM="$$(hack/helm.sh)" DRACO_IMAGE="$$(hack/image.sh $(CLUSTER_IMAGE) | tail -n 1)" \
	DRACO_IMAGE_NAME=$(CLUSTER_IMAGE) DRACO_CLUSTER_TESTS=1 \
		$(BIN)/pytest tests/cluster $(PYTEST_ARGS)

# Autoscaling with the real Karpenter (kwok provider, built once from the Go module proxy by
# hack/karpenter.sh): GPU nodes from zero for pods and groups, scale-down kept off nodes in use
# (tests/autoscaling, docs/autoscaling.md). Not part of `make test`.
e2e-autoscaling: $(STAMP)
	@assets="$$(hack/controlplane.sh kube-controller-manager kube-scheduler)" && \
	KUBEBUILDER_ASSETS="$$assets" DRACO_NODE_ASSETS="$$(dirname "$$assets")" KARPENTER="$$(hack/karpenter.sh)" \
	DRACO_AUTOSCALING_TESTS=1 $(BIN)/pytest tests/autoscaling -s $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis

# draco + kube-scheduler against kube-scheduler + kube-controller-manager v1.37.1 (built
# once from the Go module proxy), interleaved runs; BENCH_ARGS e.g. "--workload all --runs 3".
bench-versus: $(STAMP)
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh kube-scheduler kube-controller-manager)" \
		$(BIN)/python benchmarks/versus_upstream.py $(BENCH_ARGS)

# draco's allocator against upstream's Go allocator, case by case.
bench-allocator-versus: $(STAMP)
	$(BIN)/python benchmarks/allocator_versus_upstream.py $(BENCH_ARGS)

# The Tiltfile's dev loop once, headless: tilt (built by hack/tilt.sh, cached) brings every
# resource up and exits 0 when all are ready. TILT_ARGS="-- --cluster" for the cluster mode.
TILT_ARGS ?=
tilt: $(STAMP)
	"$$(hack/tilt.sh)" ci --web-mode=prod --port 0 $(TILT_ARGS)
