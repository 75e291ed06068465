"""Session-wide fixtures: the real control plane every e2e test talks to.

The control plane starts only when an e2e test asks for it, once per session, and stops at
the end even when tests fail. Unit tests never pay for it.

Under pytest-xdist (`make test` runs `-n $(PYTEST_WORKERS) --dist loadgroup`) each worker is
a session of its own, so it starts its own control plane: free loopback ports, its own
workdir in /dev/shm and kubeconfig, so workers share no API objects. Tests that use the
real node (the `node` fixture: containerd, kubelet, kube-scheduler) all go to one worker,
which starts one node, not one per worker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from draco.logs import configure_logging
from draco.tools.dev.controlplane import ControlPlane, find_binaries

ROOT = Path(__file__).resolve().parent.parent
CRDS = ROOT / "crds"

configure_logging(fmt="text", level=os.environ.get("DRACO_TEST_LOG_LEVEL", "WARNING"))

# Property tests on a shared, busy machine: no per-example deadline (a slow example is the
# machine, not a bug) and no too-slow health check. In CI (`CI` set) every run draws the same
# examples (derandomized: each test's seed derives from its name), so a failure reproduces;
# `HYPOTHESIS_PROFILE=explore` draws new ones.
_SHARED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}
settings.register_profile("ci", derandomize=True, **_SHARED)
settings.register_profile("explore", **_SHARED)
_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "explore")
settings.load_profile(_PROFILE)


def pytest_report_header() -> list[str]:
    seeding = "derandomized: each test's seed derives from its name" if _PROFILE == "ci" else "random seeds"
    return [
        f"hypothesis profile: {_PROFILE} ({seeding}; set HYPOTHESIS_PROFILE=ci|explore)",
        f"e2e timeout scale: {os.environ.get('DRACO_TEST_TIMEOUT_SCALE', '1')} (DRACO_TEST_TIMEOUT_SCALE)",
    ]


# The whole cluster's tests (tests/cluster: helm install of the image built here) run with
# `make e2e-cluster` only: they need the image build and a cluster of their own.
collect_ignore = [] if os.environ.get("DRACO_CLUSTER_TESTS") else ["cluster"]
# Autoscaling with the real Karpenter (tests/autoscaling) runs with `make e2e-autoscaling` only:
# Karpenter's first build is long, and the tests wait for nodes to come and go.
if not os.environ.get("DRACO_AUTOSCALING_TESTS"):
    collect_ignore.append("autoscaling")

NODE_GROUP = "node"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep every test that uses the real node on one xdist worker (by fixture, so new
    tests are grouped without a mark of their own); an explicit `xdist_group` mark wins."""
    for item in items:
        if "node" in getattr(item, "fixturenames", ()) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(NODE_GROUP))


@pytest.fixture(scope="session")
def kube() -> Iterator[ControlPlane]:
    """A started etcd + kube-apiserver with every CRD of `crds/` installed and established.

    `KUBECONFIG` points at its admin kubeconfig for the rest of the session, so Kopf,
    kubernetes_asyncio and kubectl in child processes all talk to it.
    """
    plane = ControlPlane(binaries=find_binaries()).start()
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(plane.kubeconfig)
    try:
        if any(CRDS.glob("*.yaml")):
            plane.kubectl("apply", "--server-side", "-f", str(CRDS))
            plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        yield plane
    finally:
        plane.stop()
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old
