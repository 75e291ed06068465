"""The models read what the API server returns and write it back unchanged, apply
upstream's defaults, and load both apiVersions."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from draco.api import (
    API_VERSION,
    NATIVE_API_VERSION,
    DeviceAttribute,
    DeviceClass,
    DeviceRequest,
    DeviceTaint,
    DeviceTaintRule,
    DeviceToleration,
    ExactDeviceRequest,
    ObjectMeta,
    Quantity,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimStatus,
    ResourceSlice,
    iter_objects,
    load_object,
    stamp_taint_times,
)
from draco.api.load import KINDS
from draco.errors import InvalidObjectError
from tests.unit.api import samples


@pytest.mark.parametrize("make", samples.ALL_SAMPLES.values(), ids=samples.ALL_SAMPLES.keys())
def test_server_json_round_trips_exactly(make: Callable[[], dict[str, Any]]) -> None:
    data = make()
    obj = load_object(copy.deepcopy(data))
    assert obj.to_dict() == data
    assert type(obj).from_dict(obj.to_dict()) == obj


@pytest.mark.parametrize("make", samples.ALL_SAMPLES.values(), ids=samples.ALL_SAMPLES.keys())
def test_both_api_versions_load_and_keep_their_version(make: Callable[[], dict[str, Any]]) -> None:
    native = load_object(make())
    assert native.api_version == NATIVE_API_VERSION
    ours = load_object({**make(), "apiVersion": API_VERSION})
    assert ours.api_version == API_VERSION
    assert ours.to_dict(api_version=NATIVE_API_VERSION) == native.to_dict()
    assert native.to_dict(api_version=API_VERSION)["apiVersion"] == API_VERSION


def test_unknown_fields_are_kept() -> None:
    data = samples.resource_slice()
    data["spec"]["futureField"] = {"x": [1, 2]}
    data["spec"]["devices"][0]["futureDeviceField"] = "yes"
    data["status"] = {"something": True}
    assert load_object(copy.deepcopy(data)).to_dict() == data


def test_attributes_expose_their_kind_and_value() -> None:
    device = ResourceSlice.from_dict(samples.resource_slice()).devices[0]
    attributes = device.attributes or {}
    assert attributes["model"].kind == "string"
    assert attributes["index"].value == 0
    assert attributes["index"].kind == "int"
    assert attributes["healthy"].value is True
    assert attributes["driverVersion"].kind == "version"
    assert attributes["driverVersion"].value == "580.65.6"
    assert attributes["example.com/links"].value == ["nvlink0", "nvlink1"]
    assert DeviceAttribute().kind is None
    assert DeviceAttribute(int_=3).to_dict() == {"int": 3}
    assert DeviceAttribute.from_dict({"bool": False}).bool_ is False
    assert set(DeviceAttribute.from_dict({"int": 1, "string": "x"}).set_fields) == {"int", "string"}
    with pytest.raises(ValueError):
        DeviceAttribute.from_dict({"int": "1"})
    assert device.capacity is not None
    assert device.capacity["memory"].value == Quantity("141Gi")
    qualified = device.qualified_attributes(driver="gpu.example.com")
    assert set(qualified) >= {"gpu.example.com/model", "example.com/numa"}


def test_request_defaults_mode_and_count() -> None:
    spec = ResourceClaimSpec.from_dict(
        {
            "devices": {
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": "c"}},
                    {"name": "b", "exactly": {"deviceClassName": "c", "count": 0, "allocationMode": ""}},
                    {"name": "c", "exactly": {"deviceClassName": "c", "allocationMode": "All"}},
                    {
                        "name": "d",
                        "firstAvailable": [
                            {"name": "x", "deviceClassName": "c"},
                            {"name": "y", "deviceClassName": "c", "count": 3},
                            {"name": "z", "deviceClassName": "c", "allocationMode": "All"},
                        ],
                    },
                ]
            }
        }
    )
    a, b, c, d = spec.iter_requests()
    assert a.exactly is not None and (a.exactly.allocation_mode, a.exactly.count) == ("ExactCount", 1)
    assert b.exactly is not None and (b.exactly.allocation_mode, b.exactly.count) == ("ExactCount", 1)
    assert c.exactly is not None and (c.exactly.allocation_mode, c.exactly.count) == ("All", None)
    assert d.first_available is not None
    assert [(s.allocation_mode, s.count) for s in d.first_available] == [
        ("ExactCount", 1),
        ("ExactCount", 3),
        ("All", None),
    ]
    built = DeviceRequest(name="e", exactly=ExactDeviceRequest(device_class_name="c"))
    assert built.to_dict() == {
        "name": "e",
        "exactly": {"deviceClassName": "c", "allocationMode": "ExactCount", "count": 1},
    }


def test_toleration_operator_defaults_to_equal() -> None:
    assert DeviceToleration.from_dict({"key": "k", "value": "v"}).operator == "Equal"
    assert DeviceToleration.from_dict({"operator": "Exists"}).operator == "Exists"
    assert DeviceToleration(key="k").to_dict() == {"key": "k", "operator": "Equal"}


def test_toleration_matching() -> None:
    taint = DeviceTaint(key="k", value="v", effect="NoExecute")
    assert DeviceToleration(key="k", value="v").tolerates(taint)
    assert not DeviceToleration(key="k", value="w").tolerates(taint)
    assert DeviceToleration(operator="Exists").tolerates(taint)
    assert not DeviceToleration(key="k", operator="Exists", effect="NoSchedule").tolerates(taint)
    assert DeviceToleration(key="k", operator="Exists", effect="NoExecute").tolerates(taint)


def test_python_construction_uses_snake_case_and_fills_type_meta() -> None:
    device_class = DeviceClass(metadata=ObjectMeta(name="gpu"), spec={"selectors": []})  # type: ignore[arg-type]
    assert device_class.to_dict() == {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": []},
    }


def test_times_are_utc_and_written_like_the_api_server() -> None:
    claim = ResourceClaim.from_dict(samples.resource_claim())
    assert claim.metadata.creation_timestamp == datetime(2026, 11, 20, 21, 14, 3, tzinfo=UTC)
    claim.metadata.deletion_timestamp = datetime(2026, 11, 21, 1, 2, 3)  # naive means UTC
    assert claim.to_dict()["metadata"]["deletionTimestamp"] == "2026-11-21T01:02:03Z"


def _claim(status: dict[str, Any] | None = None, *, deleting: bool = False) -> ResourceClaim:
    data = samples.resource_claim()
    if status is None:
        del data["status"]
    else:
        data["status"] = status
    if deleting:
        data["metadata"]["deletionTimestamp"] = "2026-11-21T00:00:00Z"
    return ResourceClaim.from_dict(data)


def test_state_strings_match_upstream() -> None:
    allocated = samples.resource_claim()["status"]
    unreserved = {"allocation": allocated["allocation"]}
    assert _claim().state == "pending"
    assert _claim({}).state == "pending"
    assert _claim(unreserved).state == "allocated"
    assert _claim(allocated).state == "allocated,reserved"
    assert _claim(deleting=True).state == "deleted"
    assert _claim(unreserved, deleting=True).state == "deleted,allocated"
    assert _claim(allocated, deleting=True).state == "deleted,allocated,reserved"


def test_refresh_summary_stores_state_and_devices() -> None:
    claim = _claim()
    assert claim.refresh_summary()
    assert claim.status is not None
    assert (claim.status.state, claim.status.allocated_devices) == ("pending", None)
    assert not claim.refresh_summary()
    claim.status = ResourceClaimStatus.from_dict(samples.resource_claim()["status"])
    assert claim.refresh_summary()
    assert claim.status.state == "allocated,reserved"
    assert claim.status.allocated_devices == "node-a/eth1,node-a/gpu-0"  # numeric-aware order
    assert claim.to_dict()["status"]["state"] == "allocated,reserved"


def test_claim_helpers() -> None:
    claim = _claim(samples.resource_claim()["status"])
    assert claim.is_allocated and claim.is_reserved
    assert [r.device_id for r in claim.results] == [
        ("gpu.example.com", "node-a", "gpu-0"),
        ("nic.example.com", "node-a", "eth1"),
    ]
    assert claim.reserved_for[0].is_pod
    assert claim.key == "ml/trainer-0-gpu-x7k2p"
    assert claim.results[1].consumed_capacity == {"bandwidth": Quantity("10G")}
    assert not _claim().results


def test_stamp_taint_times_on_slices() -> None:
    now = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
    data = samples.resource_slice()
    data["spec"]["devices"][1]["taints"] = [{"key": "new", "effect": "NoSchedule"}]
    slice_ = ResourceSlice.from_dict(data)
    assert stamp_taint_times(slice_, now=now)
    taints = [t for d in slice_.devices for t in d.taints or ()]
    assert [t.time_added for t in taints] == [datetime(2026, 11, 20, 21, 20, tzinfo=UTC), now]
    assert not stamp_taint_times(slice_, now=now + timedelta(hours=1))


def test_stamp_taint_times_on_rules() -> None:
    now = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
    data = samples.device_taint_rule()
    del data["spec"]["taint"]["timeAdded"]
    rule = DeviceTaintRule.from_dict(data)
    assert stamp_taint_times(rule, now=now)
    assert rule.spec.taint.time_added == now

    old = DeviceTaintRule.from_dict(samples.device_taint_rule())
    value_changed = DeviceTaintRule.from_dict(samples.device_taint_rule())
    value_changed.spec.taint.value = "other"
    assert not stamp_taint_times(value_changed, now=now, old=old)
    effect_changed = DeviceTaintRule.from_dict(samples.device_taint_rule())
    effect_changed.spec.taint.effect = "NoSchedule"
    assert stamp_taint_times(effect_changed, now=now, old=old)
    assert effect_changed.spec.taint.time_added == now


def test_taint_rule_selection() -> None:
    rule = DeviceTaintRule.from_dict(samples.device_taint_rule())
    assert rule.spec.selects(driver="gpu.example.com", pool="node-a", device="gpu-0")
    assert not rule.spec.selects(driver="gpu.example.com", pool="node-a", device="gpu-1")
    rule.spec.device_selector = None
    assert not rule.spec.selects(driver="gpu.example.com", pool="node-a", device="gpu-0")


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (
            lambda d: d["spec"]["devices"]["requests"][0].pop("name"),
            "spec.devices.requests[0].name: Required",
        ),
        (
            lambda d: d["spec"]["devices"]["requests"][1]["exactly"].update(count="x"),
            "requests[1].exactly.count",
        ),
        (lambda d: d["status"]["reservedFor"][0].pop("uid"), "status.reservedFor[0].uid: Required"),
        (
            lambda d: d["status"]["allocation"]["devices"]["results"][1]["consumedCapacity"].update(
                bandwidth="lots"
            ),
            "consumedCapacity.bandwidth",
        ),
    ],
)
def test_malformed_objects_name_kind_object_and_field(
    mutate: Callable[[dict[str, Any]], Any], needle: str
) -> None:
    data = samples.resource_claim()
    mutate(data)
    with pytest.raises(InvalidObjectError) as info:
        load_object(data)
    message = str(info.value)
    assert "ResourceClaim ml/trainer-0-gpu-x7k2p" in message
    assert needle in message
    assert info.value.errors


def test_wrong_kind_or_version_is_rejected() -> None:
    with pytest.raises(InvalidObjectError, match="kind 'Pod' is not one of"):
        load_object({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    with pytest.raises(InvalidObjectError, match=r"apiVersion 'resource\.k8s\.io/v1beta1' is not supported"):
        load_object({**samples.device_class(), "apiVersion": "resource.k8s.io/v1beta1"})
    with pytest.raises(ValueError, match="kind must be 'DeviceClass'"):
        DeviceClass.from_dict({**samples.resource_slice()})


def test_iter_objects_reads_multi_document_yaml_and_lists() -> None:
    text = """
apiVersion: resource.draco.dev/v1
kind: DeviceClass
metadata: {name: a}
spec: {}
---
---
apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: c, namespace: ns}
  spec: {devices: {requests: [{name: r, exactly: {deviceClassName: a}}]}}
- apiVersion: v1
  kind: Node
  metadata: {name: n}
"""
    with pytest.raises(InvalidObjectError, match="kind 'Node'"):
        list(iter_objects(text))
    objects = list(iter_objects(text, ignore_unknown=True))
    assert [type(o).__name__ for o in objects] == ["DeviceClass", "ResourceClaim"]
    assert [o.api_version for o in objects] == [API_VERSION, NATIVE_API_VERSION]
    with pytest.raises(InvalidObjectError, match="v1beta2"):
        list(
            iter_objects(
                {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceClass"}, ignore_unknown=True
            )
        )
    assert set(KINDS) == {
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
        "DeviceTaintRule",
    }


def test_devices_column_is_in_natural_order() -> None:
    from draco.api.names import natural_sorted
    from draco.api.resourceclaim import summarize_claim_status

    assert natural_sorted(["dev-10", "dev-2", "dev-1604", "dev-401", "a"]) == [
        "a",
        "dev-2",
        "dev-10",
        "dev-401",
        "dev-1604",
    ]
    results = [{"pool": "n", "device": f"dev-{i}"} for i in (0, 1604, 401, 2)]
    status = summarize_claim_status({"allocation": {"devices": {"results": results}}}, deleting=False)
    assert status["allocatedDevices"] == "n/dev-0,n/dev-2,n/dev-401,n/dev-1604"


def test_one_toleration_rule_for_node_and_device_taints() -> None:
    """`draco.api.tolerations` is upstream's ToleratesTaint, used by the allocator (device
    taints), the node fit (node taints) and eviction (NoExecute device taints)."""
    from draco.api.tolerations import tolerates

    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    assert tolerates({"key": "k", "value": "v"}, **taint)
    assert tolerates({"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}, **taint)
    assert not tolerates({"key": "k", "value": "w"}, **taint)
    assert tolerates({"operator": "Exists"}, **taint)
    assert tolerates({"key": "k", "operator": "Exists"}, **taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, **taint)
    assert not tolerates({"operator": "Exists", "effect": "NoSchedule"}, **taint)
    assert not tolerates({"key": "k", "operator": "Gt", "value": "v"}, **taint)
    assert tolerates({"key": "k"}, key="k", value="", effect="NoSchedule")
