# The two commands a newcomer needs: `make demo` and `make test`. Each installs what it
# needs by itself: a virtualenv in .venv (from PyPI), the control-plane binaries and the
# test node's (built once from the Go module proxy and Debian into ~/.cache/draco, see
# hack/controlplane.sh and hack/node.sh).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`/`make e2e`/`make unit`: each e2e worker starts its own
# control plane (~1-2 GiB with its operators), so auto = cores, at most 3, at most one per
# 2 GiB of available memory, at least 1. PYTEST_WORKERS=0 runs serially in one process.
PYTEST_WORKERS ?= $(shell awk -v c="$$(nproc)" '/^MemAvailable:/ { m = int($$2 / 2097152); \
	w = c < 3 ? c : 3; if (m < w) w = m; if (w < 1) w = 1; print w }' /proc/meminfo)
XDIST = -n $(PYTEST_WORKERS) --dist loadgroup

.PHONY: help venv controlplane node helm lint typecheck unit e2e test test-stress compat differential demo crds chart-docs image clean bench-versus bench-allocator-versus

help:
	@echo "make demo   run the control plane, a real node, operator, agent and examples; print what the pods saw"
	@echo "make test   lint, type checks, unit and e2e tests (builds what it needs)"
	@echo "make unit   unit tests only (no control plane)"
	@echo "make e2e    e2e tests only"
	@echo "make test-stress  make test with two CPU-bound processes beside it (a busy machine)"
	@echo "make compat the representative e2e set on Kubernetes 1.30, 1.31, 1.32, 1.33 and 1.37 (builds each once)"
	@echo "make crds   regenerate crds/ (and the chart's copy) from the models"
	@echo "make chart-docs  regenerate the values reference of docs/install.md from the chart's schema"
	@echo "make image  build the container image with docker or podman (IMAGE=..., EXTRAS=nvidia)"
	@echo "make differential  10,000 random problems through draco's allocator and upstream's (needs Go)"
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

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(XDIST) $(PYTEST_ARGS)

e2e: $(STAMP)
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" DRACO_NODE_ASSETS="$$(hack/node.sh)" HELM="$$(hack/helm.sh)" \
		$(BIN)/pytest tests/e2e $(XDIST) $(PYTEST_ARGS)

test: lint typecheck
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" DRACO_NODE_ASSETS="$$(hack/node.sh)" HELM="$$(hack/helm.sh)" \
		$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

# draco's allocator against upstream's (built from the Go module proxy, cached) on 10,000
# random problems; `make test` runs a few hundred. DRACO_DIFFERENTIAL_SEED replays a run.
differential: $(STAMP)
	DRACO_DIFFERENTIAL_CASES=$${DRACO_DIFFERENTIAL_CASES:-10000} $(BIN)/pytest tests/differential -s $(PYTEST_ARGS)

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

# On a machine that cannot build or run the node (not root, no apt), the demo says so and
# simulates two nodes instead.
demo: $(STAMP)
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" DRACO_NODE_ASSETS="$$(hack/node.sh || true)" \
		$(BIN)/python hack/demo.py

# The chart carries a copy of crds/ (Helm installs charts/draco/crds first); a unit test
# keeps the two identical.
crds: $(STAMP)
	$(BIN)/draco crds -o crds
	rm -f charts/draco/crds/*.yaml && cp crds/*.yaml charts/draco/crds/

chart-docs: $(STAMP)
	$(BIN)/python hack/values-doc.py

# The image of the chart, where a container engine exists (none on our CI machines:
# tests/e2e/test_image.py checks the Dockerfile's install steps instead).
IMAGE ?= draco:$(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' operator/draco/__init__.py)
EXTRAS ?=
ENGINE ?= $(shell command -v docker || command -v podman)
image:
	@test -n "$(ENGINE)" || { echo "make image needs docker or podman (set ENGINE=...)"; exit 1; }
	$(ENGINE) build --build-arg EXTRAS=$(EXTRAS) -t $(IMAGE) .

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
