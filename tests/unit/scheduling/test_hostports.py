"""NodePorts: the scenarios of upstream's node_ports_test.go (TestNodePorts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from draco.scheduling import hostports
from draco.scheduling.hostports import REASON
from tests.unit.scheduling.rulekit import cluster, container, node, placed, pod, run_filter


def ports_pod(*ports: str, init: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return pod(containers=[container(ports=ports)], init=init)


CASES = [
    ("other port", ports_pod("UDP/127.0.0.1/8080"), ports_pod("UDP/127.0.0.1/9090"), None),
    ("same udp port", ports_pod("UDP/127.0.0.1/8080"), ports_pod("UDP/127.0.0.1/8080"), REASON),
    ("same tcp port", ports_pod("TCP/127.0.0.1/8080"), ports_pod("TCP/127.0.0.1/8080"), REASON),
    ("different host ip", ports_pod("TCP/127.0.0.1/8080"), ports_pod("TCP/127.0.0.2/8080"), None),
    ("different protocol", ports_pod("UDP/127.0.0.1/8080"), ports_pod("TCP/127.0.0.1/8080"), None),
    (
        "second udp port conflict",
        ports_pod("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
        ports_pod("UDP/127.0.0.1/8080"),
        REASON,
    ),
    (
        "first tcp port conflict",
        ports_pod("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
        ports_pod("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"),
        REASON,
    ),
    (
        "first tcp port conflict due to 0.0.0.0 hostIP",
        ports_pod("TCP/0.0.0.0/8001"),
        ports_pod("TCP/127.0.0.1/8001"),
        REASON,
    ),
    (
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        ports_pod("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
        ports_pod("TCP/127.0.0.1/8001"),
        REASON,
    ),
    (
        "second tcp port conflict to 0.0.0.0 hostIP",
        ports_pod("TCP/127.0.0.1/8001"),
        ports_pod("TCP/0.0.0.0/8001"),
        REASON,
    ),
    ("second different protocol", ports_pod("UDP/127.0.0.1/8001"), ports_pod("TCP/0.0.0.0/8001"), None),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        ports_pod("UDP/127.0.0.1/8001"),
        ports_pod("TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"),
        REASON,
    ),
    (
        "TCP hostPort conflict from sidecar initContainer",
        pod(containers=[container()], init=[container("s", ports=["TCP/0.0.0.0/8001"], sidecar=True)]),
        ports_pod("TCP/0.0.0.0/8001"),
        REASON,
    ),
    (
        "an existing pod's sidecar takes its port",
        ports_pod("TCP/0.0.0.0/8001"),
        pod(containers=[container()], init=[container("s", ports=["TCP/0.0.0.0/8001"], sidecar=True)]),
        REASON,
    ),
    (
        "an existing pod's plain init container does not",
        ports_pod("TCP/0.0.0.0/8001"),
        pod(containers=[container()], init=[container("i", ports=["TCP/0.0.0.0/8001"])]),
        None,
    ),
    (
        "an empty hostIP is the wildcard",
        ports_pod("TCP/127.0.0.1/8001"),
        pod(containers=[{"name": "c", "image": "x", "ports": [{"containerPort": 1, "hostPort": 8001}]}]),
        REASON,
    ),
]


@pytest.mark.parametrize(("body", "existing", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_host_ports(body: dict[str, Any], existing: dict[str, Any], reason: str | None) -> None:
    snapshot = cluster([node("n"), node("empty")], [placed(existing, "n")])
    assert run_filter(hostports.host_ports_filter, body, snapshot) == [reason, None]


@pytest.mark.parametrize(
    "body",
    [
        pod(containers=[container()]),
        pod(containers=[container()], init=[container("i", ports=["TCP/0.0.0.0/8001"])]),
    ],
    ids=["no host ports", "non-sidecar initContainer using hostPort"],
)
def test_a_pod_without_host_ports_is_not_checked(body: dict[str, Any]) -> None:
    snapshot = cluster([node("n")], [placed(ports_pod("TCP/0.0.0.0/8001"), "n")])
    assert run_filter(hostports.host_ports_filter, body, snapshot) is None
