"""Helpers for e2e tests: a fresh namespace per test, the operator and agent as processes,
and a real node (containerd, kubelet; kube-scheduler while a test uses it) for the tests that
run containers.

Tests never wait for a namespace to be deleted: there is no controller-manager, so it would
stay Terminating forever with whatever it holds. Each test gets a namespace of its own
instead, and its pods are force-deleted at the end (a gated pod left behind would be work
for every later operator that serves the whole cluster).
"""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from draco.logs import get_logger
from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import Node, find_node_assets
from tests.e2e.hostnet import HostNetwork, host_network
from tests.e2e.schedulerkit import KubeScheduler
from tests.e2e.support import DracoProcess, start_draco

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def host_network_before_node() -> HostNetwork:
    """The host's network namespace before the session's node started (it must stay so)."""
    return host_network()


@pytest.fixture(scope="session")
def node_machine(kube: ControlPlane, host_network_before_node: HostNetwork) -> Iterator[Node]:
    """A real node of the test cluster, started once per session on first use: containerd
    with NRI and a kubelet registered as Node `draco-node`, in a network namespace of the
    node's own; no kube-scheduler (the `node` fixture runs one per test).

    Needs `DRACO_NODE_ASSETS` (what `hack/node.sh` prints; `make test` sets it) and root.
    """

    # A SIGTERM (a CI timeout) would end the session without teardown, leaving the node's
    # processes, mounts and namespace behind until the next node's start sweeps them: turn
    # it into an exception that runs the teardown now.
    def terminate(*_: object) -> None:
        raise SystemExit(143)

    previous = signal.signal(signal.SIGTERM, terminate)
    started = time.monotonic()
    real = Node(plane=kube, assets=find_node_assets(), with_scheduler=False).start()
    get_logger(__name__).warning(
        "Test node started", node=real.name, seconds=round(time.monotonic() - started, 1)
    )
    try:
        yield real
    finally:
        real.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def node(node_machine: Node) -> Iterator[Node]:
    """The session's real node with kube-scheduler binding pods, for this test only.

    The scheduler serves the default profile, so it binds every un-gated pod of the
    worker's control plane that names no other scheduler: left running after a node test,
    it bound the next tests' pods to `draco-node` (a pod a test binds itself was taken
    first; a pod left there went Terminating for good once the node stopped). Tests on one
    worker run one at a time, and each one's pods are deleted at its end, so while it runs
    here the pods it finds are the test's own.
    """
    node_machine.start_scheduler()
    try:
        yield node_machine
    finally:
        node_machine.stop_scheduler()


@pytest.fixture
def namespace(kube: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace created for this test alone (name derived from the test's name)."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{secrets.token_hex(3)}"
    kube.kubectl("create", "namespace", name)
    yield name
    # Pods first, at once: the namespace stays Terminating for good, and a gated pod left in
    # it would be work for every later operator that serves the whole cluster.
    kube.kubectl(
        "delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", "--wait=false", check=False
    )
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def draco_process(kube: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., DracoProcess]]:
    """Start `draco <args>` processes against the test cluster; all are stopped at the end.

    Their logs (JSON lines) are kept in the test's tmp_path and printed when a test fails.
    """
    started: list[DracoProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, name: str = "draco") -> DracoProcess:
        log_path = tmp_path / f"{name}-{len(started)}.log"
        process = start_draco(args, env={**kube.env(), **(env or {})}, log_path=log_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@contextmanager
def kopf_operator(args: Sequence[str] = ()) -> Iterator[object]:
    """Run the operator in this process with `kopf.testing.KopfRunner` (for tests that
    need to look inside); prefer `draco_process` for black-box behaviour."""
    from kopf.testing import KopfRunner

    with KopfRunner(["run", "--standalone", "--all-namespaces", "-m", "draco.operator", *args]) as runner:
        yield runner
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None, runner.exception


@pytest.fixture
def scheduler(kube: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[str]:
    """A kube-scheduler of this test's own (`schedulerkit`: it binds only the pods that name
    it, beside draco); yields its name, the test's namespace."""
    process = KubeScheduler(kube, tmp_path / "scheduler", namespace)
    try:
        yield namespace
    finally:
        process.stop()
