"""The special claim of extended resources: class mapping and per-container requests."""

from __future__ import annotations

from typing import Any

from draco.scheduling.extendedresources import (
    ExtendedResourceStatus,
    RequestMapping,
    build_extended_resource_claim,
    extended_resource_names,
    extended_resource_status,
    extended_resource_status_annotation,
    implicit_resource_name,
    implicit_resource_names,
    resource_class_map,
)


def _class(name: str, *, ext: str | None = None, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if ext is not None:
        spec["extendedResourceName"] = ext
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def _container(name: str, *, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"limits": limits or {}}, **extra}


def _request(name: str, class_name: str, count: int) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count},
    }


def test_every_class_has_its_implicit_name_and_an_explicit_one() -> None:
    mapping = resource_class_map([_class("gpu", ext="example.com/gpu"), _class("nic")])
    assert mapping == {
        "deviceclass.resource.draco.dev/gpu": "gpu",
        "deviceclass.resource.draco.dev/nic": "nic",
        "deviceclass.resource.kubernetes.io/gpu": "gpu",
        "deviceclass.resource.kubernetes.io/nic": "nic",
        "example.com/gpu": "gpu",
    }
    assert extended_resource_names(_class("gpu", ext="example.com/gpu")) == [
        "deviceclass.resource.draco.dev/gpu",
        "deviceclass.resource.kubernetes.io/gpu",
        "example.com/gpu",
    ]


def test_upstreams_implicit_name_builds_the_same_special_claim() -> None:
    """dra-example-driver's extended-resource pod, as written for native DRA."""
    mapping = resource_class_map([_class("gpu.example.com")])
    spec = {
        "containers": [_container("ctr0", limits={"deviceclass.resource.kubernetes.io/gpu.example.com": "1"})]
    }
    built = build_extended_resource_claim(spec, mapping)
    assert built is not None
    assert built.requests == (_request("container-0-request-0", "gpu.example.com", 1),)
    assert built.mappings == (
        RequestMapping("ctr0", "deviceclass.resource.kubernetes.io/gpu.example.com", "container-0-request-0"),
    )


def test_the_newest_class_wins_a_clash_then_the_smaller_name() -> None:
    older = _class("a-old", ext="example.com/gpu", created="2026-01-01T00:00:00Z")
    newer = _class("z-new", ext="example.com/gpu", created="2026-02-01T00:00:00Z")
    assert resource_class_map([newer, older])["example.com/gpu"] == "z-new"
    assert resource_class_map([older, newer])["example.com/gpu"] == "z-new"
    tie_b = _class("b", ext="example.com/gpu", created="2026-02-01T00:00:00Z")
    assert resource_class_map([tie_b, newer])["example.com/gpu"] == "b"
    assert resource_class_map([newer, tie_b])["example.com/gpu"] == "b"


def test_an_invalid_implicit_name_is_left_out() -> None:
    assert implicit_resource_name("x" * 64) is None
    assert implicit_resource_names("x" * 64) == []
    assert resource_class_map([_class("x" * 64)]) == {}
    assert implicit_resource_name("gpu.example.com") == "deviceclass.resource.draco.dev/gpu.example.com"
    assert implicit_resource_names("gpu.example.com") == [
        "deviceclass.resource.draco.dev/gpu.example.com",
        "deviceclass.resource.kubernetes.io/gpu.example.com",
    ]


def test_a_pod_without_mapped_resources_has_no_special_claim() -> None:
    spec = {"containers": [_container("c", limits={"cpu": "1", "other.com/thing": 1})]}
    assert build_extended_resource_claim(spec, {"example.com/gpu": "gpu"}) is None


def test_one_container_limits_become_one_request_named_by_its_sorted_resource_index() -> None:
    spec = {"containers": [_container("c", limits={"example.com/gpu": "2", "cpu": "1", "memory": "1Gi"})]}
    claim = build_extended_resource_claim(spec, {"example.com/gpu": "gpu"})
    assert claim is not None
    # sorted keys: cpu, example.com/gpu, memory -> index 1
    assert claim.requests == (_request("container-0-request-1", "gpu", 2),)
    assert claim.mappings == (RequestMapping("c", "example.com/gpu", "container-0-request-1"),)
    assert claim.claim_spec() == {"devices": {"requests": [_request("container-0-request-1", "gpu", 2)]}}


def test_requests_win_over_limits_and_zero_counts_are_skipped() -> None:
    spec = {
        "containers": [
            {
                "name": "a",
                "resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}},
            },
            _container("b", limits={"example.com/gpu": "0"}),
        ]
    }
    claim = build_extended_resource_claim(spec, {"example.com/gpu": "gpu"})
    assert claim is not None
    assert claim.requests == (_request("container-0-request-0", "gpu", 1),)


def test_init_container_reuses_later_long_lived_requests_and_adds_only_the_rest() -> None:
    # index 0: init (needs 3), index 1: app a (1), index 2: app b (1)
    spec = {
        "initContainers": [_container("init", limits={"example.com/gpu": "3"})],
        "containers": [
            _container("a", limits={"example.com/gpu": "1"}),
            _container("b", limits={"example.com/gpu": "1", "cpu": "1"}),
        ],
    }
    claim = build_extended_resource_claim(spec, {"example.com/gpu": "gpu"})
    assert claim is not None
    assert claim.requests == (
        _request("container-0-request-0", "gpu", 1),
        _request("container-1-request-0", "gpu", 1),
        _request("container-2-request-1", "gpu", 1),
    )
    assert claim.mappings == (
        RequestMapping("a", "example.com/gpu", "container-1-request-0"),
        RequestMapping("b", "example.com/gpu", "container-2-request-1"),
        RequestMapping("init", "example.com/gpu", "container-1-request-0"),
        RequestMapping("init", "example.com/gpu", "container-2-request-1"),
        RequestMapping("init", "example.com/gpu", "container-0-request-0"),
    )


def test_an_init_container_covered_by_long_lived_requests_gets_none_of_its_own() -> None:
    spec = {
        "initContainers": [_container("init", limits={"example.com/gpu": "2"})],
        "containers": [_container("a", limits={"example.com/gpu": "2"})],
    }
    claim = build_extended_resource_claim(spec, {"example.com/gpu": "gpu"})
    assert claim is not None
    assert claim.requests == (_request("container-1-request-0", "gpu", 2),)
    assert claim.mappings == (
        RequestMapping("a", "example.com/gpu", "container-1-request-0"),
        RequestMapping("init", "example.com/gpu", "container-1-request-0"),
    )


def test_only_the_largest_init_request_is_kept_and_others_point_at_it() -> None:
    spec = {
        "initContainers": [
            _container("i0", limits={"example.com/gpu": "2"}),
            _container("i1", limits={"example.com/gpu": "4"}),
        ],
        "containers": [_container("a", limits={"cpu": "1"})],
    }
    claim = build_extended_resource_claim(spec, {"example.com/gpu": "gpu"})
    assert claim is not None
    assert claim.requests == (_request("container-1-request-0", "gpu", 4),)
    assert claim.mappings == (
        RequestMapping("i0", "example.com/gpu", "container-1-request-0"),
        RequestMapping("i1", "example.com/gpu", "container-1-request-0"),
    )


def test_a_sidecar_is_long_lived_and_not_reused_by_init_containers_before_it() -> None:
    spec = {
        "initContainers": [
            _container("side", limits={"example.com/gpu": "1"}, restartPolicy="Always"),
            _container("init", limits={"example.com/gpu": "1"}),
        ],
        "containers": [_container("a", limits={"cpu": "1"})],
    }
    claim = build_extended_resource_claim(spec, {"example.com/gpu": "gpu"})
    assert claim is not None
    assert claim.requests == (
        _request("container-0-request-0", "gpu", 1),
        _request("container-1-request-0", "gpu", 1),
    )
    assert claim.mappings == (
        RequestMapping("side", "example.com/gpu", "container-0-request-0"),
        RequestMapping("init", "example.com/gpu", "container-1-request-0"),
    )


def test_two_resources_of_two_classes() -> None:
    spec = {
        "containers": [
            _container("a", limits={"example.com/gpu": "1", "deviceclass.resource.draco.dev/nic": "1"})
        ]
    }
    mapping = resource_class_map([_class("gpu", ext="example.com/gpu"), _class("nic")])
    claim = build_extended_resource_claim(spec, mapping)
    assert claim is not None
    assert claim.requests == (
        _request("container-0-request-0", "nic", 1),
        _request("container-0-request-1", "gpu", 1),
    )


def test_the_status_annotation_round_trips() -> None:
    status = ExtendedResourceStatus(
        "p-extended-resources-abcde", (RequestMapping("a", "example.com/gpu", "r"),)
    )
    pod = {
        "metadata": {
            "annotations": {
                "resource.draco.dev/extended-resource-claim-status": extended_resource_status_annotation(
                    status
                )
            }
        }
    }
    assert extended_resource_status(pod) == status
    assert status.requests_of("a") == ["r"]
    assert (
        extended_resource_status(
            {"metadata": {"annotations": {"resource.draco.dev/extended-resource-claim-status": "{"}}}
        )
        is None
    )


def test_a_special_claim_made_for_other_classes_is_not_what_the_classes_build_now() -> None:
    """The stale special claim of a pod whose resource another class maps now (upstream's
    Filter finds it unschedulable): what the API server defaults does not matter."""
    spec = {"containers": [_container("main", limits={"example.com/gpu": "2"})]}
    then = build_extended_resource_claim(spec, resource_class_map([_class("old", ext="example.com/gpu")]))
    now = build_extended_resource_claim(spec, resource_class_map([_class("new", ext="example.com/gpu")]))
    assert then is not None and now is not None
    stored = {"devices": {"requests": [_request("container-0-request-0", "old", 2)]}}
    assert then.built(stored)
    assert not now.built(stored)
    assert not now.built({"devices": {"requests": [_request("container-0-request-0", "new", 1)]}})
    assert not now.built({})
