"""ResourceClaim status writes: the allocation is immutable once set and validated strictly
when new, reservedFor needs an allocation and at most 256 unique entries, status.devices
must name allocated devices, and newly allocated admin access needs the namespace label."""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.validation.kit import claim, errors, one_error, paths, request

SHARE = "0b7f7c34-8d0e-4a1f-9d4e-3c2b1a0f9e8d"
ADMIN_OK = {"resource.draco.dev/admin-access": "true"}


def _result(**fields: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0", **fields}


def _allocated(*results: dict[str, Any], **status: Any) -> dict[str, Any]:
    obj = claim(request())
    obj["status"] = {"allocation": {"devices": {"results": list(results or [_result()])}}, **status}
    return obj


def _status_errors(new: dict[str, Any], old: dict[str, Any] | None = None, **kwargs: Any) -> list[str]:
    return paths(new, old=old or claim(request()), subresource="status", **kwargs)


def test_a_new_allocation_is_accepted() -> None:
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    }
    new = _allocated()
    new["status"]["allocation"]["nodeSelector"] = selector
    new["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClass",
            "requests": ["gpu"],
            "opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}},
        }
    ]
    assert _status_errors(new) == []


def test_new_allocation_results_are_validated() -> None:
    assert _status_errors(_allocated(_result(request="other"))) == [
        "status.allocation.devices.results[0].request"
    ]
    assert _status_errors(_allocated(_result(driver=""))) == ["status.allocation.devices.results[0].driver"]
    assert _status_errors(_allocated(_result(pool="a//b"))) == ["status.allocation.devices.results[0].pool"]
    assert _status_errors(_allocated(_result(device="GPU"))) == [
        "status.allocation.devices.results[0].device"
    ]
    assert _status_errors(_allocated(_result(shareID="nope"))) == [
        "status.allocation.devices.results[0].shareID"
    ]
    assert _status_errors(_allocated(_result(bindingConditions=["a"]))) == [
        "status.allocation.devices.results[0].bindingFailureConditions"
    ]
    assert _status_errors(_allocated(*[_result(device=f"d{i}") for i in range(33)])) == [
        "status.allocation.devices.results"
    ]
    new = _allocated()
    new["status"]["allocation"]["devices"]["config"] = [
        {"source": "FromElsewhere", "opaque": {"driver": "d", "parameters": {}}}
    ]
    assert _status_errors(new) == ["status.allocation.devices.config[0].source"]


def test_allocation_is_immutable_once_set() -> None:
    old = _allocated()
    assert _status_errors(copy.deepcopy(old), old) == []
    other = _allocated(_result(device="gpu-1"))
    err = one_error(other, old=old, subresource="status")
    assert (err.path, err.detail) == ("status.allocation", "field is immutable")
    cleared = claim(request())
    cleared["status"] = {}
    assert _status_errors(cleared, old) == []


def test_stored_allocations_are_not_validated_again() -> None:
    # Valid when written under older, looser rules: only immutability applies now.
    old = _allocated(_result(device="Old_Name"))
    assert _status_errors(copy.deepcopy(old), old) == []


def test_reserved_for_needs_an_allocation() -> None:
    entry = {"resource": "pods", "name": "p", "uid": "u1"}
    unallocated = claim(request())
    unallocated["status"] = {"reservedFor": [entry]}
    err = one_error(unallocated, old=claim(request()), subresource="status")
    assert (err.path, err.type) == ("status.reservedFor", "Forbidden")
    assert _status_errors(_allocated(reservedFor=[entry])) == []


def test_reserved_for_entries() -> None:
    entries = [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(256)]
    assert _status_errors(_allocated(reservedFor=entries)) == []
    more = [*entries, {"resource": "pods", "name": "x", "uid": "x"}]
    assert _status_errors(_allocated(reservedFor=more)) == ["status.reservedFor"]
    assert _status_errors(_allocated(reservedFor=[entries[0], entries[0]])) == ["status.reservedFor[1]"]
    assert _status_errors(_allocated(reservedFor=[{"resource": "pods"}])) == [
        "status.reservedFor[0].name",
        "status.reservedFor[0].uid",
    ]


def test_no_new_reservations_while_deleting() -> None:
    first = {"resource": "pods", "name": "a", "uid": "a"}
    second = {"resource": "pods", "name": "b", "uid": "b"}
    old = _allocated(reservedFor=[first, second])
    old["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"
    fewer = copy.deepcopy(old)
    fewer["status"]["reservedFor"] = [first]
    assert _status_errors(fewer, old) == []
    more = copy.deepcopy(old)
    more["status"]["reservedFor"] = [first, second, {"resource": "pods", "name": "c", "uid": "c"}]
    assert _status_errors(more, old) == ["status.reservedFor"]


def test_device_status_must_name_allocated_devices() -> None:
    entry = {"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}
    old = _allocated()
    ok = _allocated(
        devices=[
            {**entry, "data": {"x": 1}, "networkData": {"interfaceName": "eth0", "ips": ["192.0.2.5/24"]}}
        ]
    )
    assert _status_errors(ok, old) == []
    other = _allocated(devices=[{**entry, "device": "gpu-9"}])
    assert _status_errors(other, old) == ["status.devices[0]"]
    shared = _allocated(devices=[{**entry, "shareID": SHARE}])
    assert _status_errors(shared, old) == ["status.devices[0]"]
    assert _status_errors(_allocated(devices=[entry, entry]), old) == ["status.devices[1]"]
    bad_data = _allocated(devices=[{**entry, "data": [1]}])
    assert _status_errors(bad_data, old) == ["status.devices[0].data"]
    bad_ips = _allocated(devices=[{**entry, "networkData": {"ips": ["192.0.2.5", "192.0.2.5"]}}])
    assert _status_errors(bad_ips, old) == [
        "status.devices[0].networkData.ips[0]",
        "status.devices[0].networkData.ips[1]",
        "status.devices[0].networkData.ips[1]",
    ]
    long_name = _allocated(
        devices=[{**entry, "networkData": {"interfaceName": "x" * 257, "hardwareAddress": "y" * 129}}]
    )
    assert _status_errors(long_name, old) == [
        "status.devices[0].networkData.interfaceName",
        "status.devices[0].networkData.hardwareAddress",
    ]
    conditions = [
        {"type": f"T{i}", "status": "True", "reason": "R", "lastTransitionTime": "2026-01-02T03:04:05Z"}
        for i in range(9)
    ]
    assert _status_errors(_allocated(devices=[{**entry, "conditions": conditions}]), old) == [
        "status.devices[0].conditions"
    ]


def test_newly_allocated_admin_access_needs_the_label() -> None:
    new = _allocated(_result(adminAccess=True))
    assert _status_errors(new, namespace_labels=ADMIN_OK) == []
    assert _status_errors(new, namespace_labels={}) == ["status.allocation.devices.results[0].adminAccess"]
    # Already granted before: the allocation is immutable, the label is not re-checked.
    assert _status_errors(copy.deepcopy(new), new, namespace_labels={}) == []
    assert errors(new, old=claim(request()), subresource="status") == []
