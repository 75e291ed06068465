"""ResourcePoolStatusRequest is judged by upstream's rules for `resource.k8s.io/v1alpha3`
(KEP-5677): a driver is required, the limit is 1 to 1000, the spec never changes and the
status is written once."""

from __future__ import annotations

from typing import Any

from draco.validation.objects import validate_object
from draco.validation.versions import validate_as_written


def _request(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.draco.dev/v1alpha3",
        "kind": "ResourcePoolStatusRequest",
        "metadata": {"name": "check-gpus"},
        "spec": {"driver": "gpu.example.com", **spec},
    }


def _errors(obj: dict[str, Any], **kwargs: Any) -> list[str]:
    return [f"{e.path}: {e.type}" for e in validate_as_written(obj, **kwargs)]


def test_a_request_in_either_api_version_passes() -> None:
    assert (
        _errors(_request(poolName="node-1", limit=5, defaultPartitionTypeAttribute="gpu.example.com/profile"))
        == []
    )
    assert _errors({**_request(), "apiVersion": "resource.k8s.io/v1alpha3"}) == []
    assert _errors({**_request(), "apiVersion": "resource.draco.dev/v1"}) == ["apiVersion: NotSupported"]


def test_the_spec_is_checked_field_by_field() -> None:
    assert _errors(_request(driver="")) == ["spec.driver: Required"]
    assert _errors(_request(driver="Not_A_Driver")) == ["spec.driver: Invalid"]
    assert _errors(_request(poolName="a/B")) == ["spec.poolName: Invalid"]
    assert _errors(_request(limit=0)) == ["spec.limit: Invalid"]
    assert _errors(_request(limit=1001)) == ["spec.limit: Invalid"]
    assert _errors(_request(defaultPartitionTypeAttribute="profile")) == [
        "spec.defaultPartitionTypeAttribute: Invalid"
    ]
    assert _errors(_request(unknown=1)) == ["spec.unknown: Invalid"]


def test_the_spec_is_immutable() -> None:
    old = _request()
    assert _errors(_request(), old=old) == []
    assert _errors(_request(poolName="node-2"), old=old) == ["spec: Invalid"]


def test_the_status_is_written_once() -> None:
    status = {
        "poolCount": 1,
        "pools": [{"driver": "gpu.example.com", "poolName": "node-1", "generation": 1, "totalDevices": 4}],
        "conditions": [
            {
                "type": "Complete",
                "status": "True",
                "reason": "CalculationComplete",
                "message": "Calculated status for 1 pools",
                "lastTransitionTime": "2026-02-07T10:30:00Z",
            }
        ],
    }
    pending, answered = _request(), {**_request(), "status": status}
    assert _errors(answered, old=pending, subresource="status") == []
    assert _errors(answered, old=answered, subresource="status") == []
    changed = {**answered, "status": {**status, "poolCount": 2}}
    assert _errors(changed, old=answered, subresource="status") == ["status: Invalid"]
    broken = {**_request(), "status": {"pools": [{"driver": "d.example.com"}]}}
    assert _errors(broken, old=pending, subresource="status") == [
        "status.poolCount: Required",
        "status.pools[0].poolName: Required",
        "status.pools[0].generation: Required",
    ]
    long = {
        **_request(),
        "status": {"poolCount": 1, "pools": [{**status["pools"][0], "validationError": "x" * 257}]},
    }
    assert _errors(long, old=pending, subresource="status") == ["status.pools[0].validationError: TooLong"]


def test_validate_object_answers_the_same() -> None:
    assert [e.path for e in validate_object(_request(driver=""))] == ["spec.driver"]
