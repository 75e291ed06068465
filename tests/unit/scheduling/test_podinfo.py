"""A pod's placement record: requests as upstream's PodRequests computes them, host ports,
affinity terms and spread constraints with ``matchLabelKeys`` merged."""

from __future__ import annotations

from typing import Any

import pytest

from draco.scheduling.labels import EVERYTHING, NOTHING
from draco.scheduling.podinfo import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    ControllerRef,
    HostPort,
    PodInfoParser,
    pod_info,
    requested_resources,
)

Gi = 1024**3


def _c(
    name: str, *, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": f"{name}:1", "resources": resources, **extra}


def _sidecar(name: str, **kwargs: Any) -> dict[str, Any]:
    return _c(name, restartPolicy="Always", **kwargs)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param(
            {
                "containers": [
                    _c("a", requests={"cpu": "1", "memory": "1Gi"}),
                    _c("b", requests={"cpu": "500m"}),
                ]
            },
            {"cpu": 1500, "memory": Gi},
            id="containers add up, cpu in millicores",
        ),
        pytest.param(
            {"containers": [_c("a", limits={"cpu": "2", "example.com/gpu": "1"})]},
            {"cpu": 2000, "example.com/gpu": 1},
            id="a limit stands in for a missing request, extended resources too",
        ),
        pytest.param(
            {
                "initContainers": [
                    _c("i1", requests={"cpu": "4"}),
                    _c("i2", requests={"cpu": "1", "memory": "3Gi"}),
                ],
                "containers": [_c("a", requests={"cpu": "2", "memory": "1Gi"})],
            },
            {"cpu": 4000, "memory": 3 * Gi},
            id="init containers run one at a time: the larger wins per resource",
        ),
        pytest.param(
            {
                "initContainers": [
                    _sidecar("s1", requests={"cpu": "1"}),
                    _c("init", requests={"cpu": "2"}),
                    _sidecar("s2", requests={"cpu": "3"}),
                ],
                "containers": [_c("a", requests={"cpu": "1"})],
            },
            {"cpu": 5000},
            id="sidecars run beside the containers and the later init containers",
        ),
        pytest.param(
            {
                "initContainers": [_sidecar("s1", requests={"cpu": "1"}), _c("init", requests={"cpu": "5"})],
                "containers": [_c("a", requests={"cpu": "1"})],
            },
            {"cpu": 6000},
            id="an init container after a sidecar needs both",
        ),
        pytest.param(
            {
                "containers": [_c("a", requests={"cpu": "1", "memory": "1Gi"})],
                "overhead": {"cpu": "250m", "memory": "100Mi"},
            },
            {"cpu": 1250, "memory": Gi + 100 * 1024**2},
            id="overhead on top",
        ),
        pytest.param(
            {
                "containers": [_c("a", requests={"cpu": "1", "memory": "1Gi", "example.com/nic": "1"})],
                "resources": {"requests": {"cpu": "3", "memory": "2Gi"}},
            },
            {"cpu": 3000, "memory": 2 * Gi, "example.com/nic": 1},
            id="pod-level resources replace cpu and memory only",
        ),
    ],
)
def test_requests(spec: dict[str, Any], want: dict[str, int]) -> None:
    assert requested_resources(spec) == want
    assert pod_info({"metadata": {"name": "p"}, "spec": spec}).requests == want


def test_scoring_counts_defaults_for_containers_without_requests() -> None:
    info = pod_info(
        {
            "spec": {
                "containers": [_c("a"), _c("b", requests={"cpu": "1", "memory": "1Gi"})],
                "overhead": {"cpu": "10m"},
            }
        }
    )
    assert info.requests == {"cpu": 1010, "memory": Gi}
    assert info.nonzero_milli_cpu == DEFAULT_MILLI_CPU_REQUEST + 1000 + 10
    assert info.nonzero_memory == DEFAULT_MEMORY_REQUEST + Gi
    # An explicit 0 is a request: it stays 0.
    zero = pod_info({"spec": {"containers": [_c("a", requests={"cpu": "0"})]}})
    assert (zero.nonzero_milli_cpu, zero.nonzero_memory) == (0, DEFAULT_MEMORY_REQUEST)


def test_scoring_defaults_beside_pod_level_requests() -> None:
    """Pod-level requests replace what they name; a resource neither they nor any
    container names still counts the default per container."""
    info = pod_info({"spec": {"containers": [_c("a"), _c("b")], "resources": {"requests": {"cpu": "2"}}}})
    assert info.requests == {"cpu": 2000}
    assert (info.nonzero_milli_cpu, info.nonzero_memory) == (2000, 2 * DEFAULT_MEMORY_REQUEST)
    both = pod_info(
        {"spec": {"containers": [_c("a")], "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}}
    )
    assert (both.nonzero_milli_cpu, both.nonzero_memory) == (1000, Gi)


def test_host_ports_of_containers_and_sidecars() -> None:
    spec = {
        "initContainers": [
            _c("init", ports=[{"containerPort": 1, "hostPort": 9000}]),
            _sidecar("proxy", ports=[{"containerPort": 15001, "hostPort": 15001, "protocol": "TCP"}]),
        ],
        "containers": [
            _c(
                "web",
                ports=[
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                    {"containerPort": 9090},
                ],
            )
        ],
    }
    assert set(pod_info({"spec": spec}).host_ports) == {
        HostPort("0.0.0.0", "TCP", 8080),
        HostPort("10.0.0.1", "UDP", 53),
        HostPort("0.0.0.0", "TCP", 15001),
    }


def _pod(labels: dict[str, str], affinity: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels},
        "spec": {"containers": [_c("c")], **({"affinity": affinity} if affinity else {}), **spec},
    }


def _anti(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


APP = {"matchLabels": {"app": "web"}}


def test_affinity_term_namespaces() -> None:
    own, listed, everywhere, selected = pod_info(
        _pod(
            {},
            _anti(
                {"topologyKey": "zone", "labelSelector": APP},
                {"topologyKey": "zone", "labelSelector": APP, "namespaces": ["a", "b"]},
                {"topologyKey": "zone", "labelSelector": APP, "namespaceSelector": {}},
                {
                    "topologyKey": "zone",
                    "labelSelector": APP,
                    "namespaceSelector": {"matchLabels": {"team": "x"}},
                },
            ),
        )
    ).affinity.required_anti
    assert own.namespaces == {"ns"} and own.namespace_selector is None
    assert listed.namespaces == {"a", "b"} and listed.namespace_selector is None
    assert everywhere.namespaces == frozenset() and everywhere.namespace_selector == EVERYTHING
    assert selected.namespace_selector is not None and selected.namespace_selector.matches({"team": "x"})
    web = pod_info({"metadata": {"namespace": "other", "labels": {"app": "web"}}})
    assert not own.matches(web, {}) and everywhere.matches(web, {}) and selected.matches(web, {"team": "x"})
    assert not selected.matches(web, {"team": "y"})


def test_match_label_keys_merge_into_affinity_selectors() -> None:
    """matchLabelKeys adds ``key In (pod's value)``, mismatchLabelKeys ``key NotIn``; a key
    the pod lacks adds nothing; a selector the API server already merged reads the same."""
    labels = {"app": "web", "pod-template-hash": "v1", "tenant": "t1"}
    term = {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": APP,
        "matchLabelKeys": ["pod-template-hash", "absent"],
        "mismatchLabelKeys": ["tenant"],
    }
    (merged,) = pod_info(_pod(labels, _anti(term))).affinity.required_anti
    assert merged.selector.matches({"app": "web", "pod-template-hash": "v1", "tenant": "t2"})
    assert not merged.selector.matches({"app": "web", "pod-template-hash": "v2", "tenant": "t2"})
    assert not merged.selector.matches({"app": "web", "pod-template-hash": "v1", "tenant": "t1"})
    assert merged.selector.matches({"app": "web", "pod-template-hash": "v1"})
    already = {
        **term,
        "labelSelector": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "pod-template-hash", "operator": "In", "values": ["v1"]},
                {"key": "tenant", "operator": "NotIn", "values": ["t1"]},
            ],
        },
    }
    (twice,) = pod_info(_pod(labels, _anti(already))).affinity.required_anti
    for candidate in (
        {**labels, "tenant": "t2"},
        {**labels, "pod-template-hash": "v2", "tenant": "t2"},
        labels,
    ):
        assert twice.selector.matches(candidate) == merged.selector.matches(candidate)
    (no_selector,) = pod_info(
        _pod(labels, _anti({"topologyKey": "zone", "matchLabelKeys": ["app"]}))
    ).affinity.required_anti
    assert no_selector.selector == NOTHING


def test_spread_constraints_with_defaults_and_match_label_keys() -> None:
    constraints = [
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": APP},
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": APP,
            "matchLabelKeys": ["pod-template-hash"],
            "minDomains": 3,
            "nodeAffinityPolicy": "Ignore",
            "nodeTaintsPolicy": "Honor",
        },
        {"maxSkew": 1, "topologyKey": "rack"},
    ]
    soft, hard, unselected = pod_info(
        _pod({"app": "web", "pod-template-hash": "v1"}, topologySpreadConstraints=constraints)
    ).spread
    assert (soft.max_skew, soft.when_unsatisfiable, soft.min_domains) == (2, "ScheduleAnyway", None)
    assert (soft.node_affinity_policy, soft.node_taints_policy) == ("Honor", "Ignore")
    assert (hard.when_unsatisfiable, hard.min_domains) == ("DoNotSchedule", 3)
    assert (hard.node_affinity_policy, hard.node_taints_policy) == ("Ignore", "Honor")
    assert hard.selector.matches({"app": "web", "pod-template-hash": "v1"})
    assert not hard.selector.matches({"app": "web", "pod-template-hash": "v2"})
    assert unselected.selector == NOTHING


def test_metadata() -> None:
    info = pod_info(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "u1",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": True},
                ],
            },
            "spec": {"priority": 7, "initContainers": [_c("i")], "containers": [_c("c")]},
        },
        node="n1",
    )
    assert (info.key, info.uid, info.node, info.terminating, info.priority) == ("ns/p", "u1", "n1", True, 7)
    assert info.controller == ControllerRef("apps/v1", "StatefulSet", "db")
    assert info.images == ("i:1", "c:1")
    assert pod_info({"metadata": {"name": "q"}}).controller is None


def test_the_parser_reads_what_pod_info_reads() -> None:
    """PodInfoParser shares parsed parts between pods of one template; each record equals
    pod_info's."""
    parser = PodInfoParser()
    containers = [_c("web", requests={"cpu": "1"}, ports=[{"containerPort": 80, "hostPort": 8080}])]
    affinity = _anti({"topologyKey": "zone", "labelSelector": APP, "matchLabelKeys": ["pod-template-hash"]})
    for index, extra in enumerate(
        [{}, {"overhead": {"cpu": "10m"}}, {"resources": {"requests": {"memory": "1Gi"}}}]
    ):
        body = {
            "metadata": {
                "name": f"p{index}",
                "namespace": "ns",
                "uid": f"u{index}",
                "labels": {"app": "web", "pod-template-hash": f"v{index}"},
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}
                ],
            },
            "spec": {"containers": containers, "affinity": affinity, **extra},
        }
        assert parser.parse(body, node="n") == pod_info(body, node="n")
