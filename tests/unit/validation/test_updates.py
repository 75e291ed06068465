"""Rules on update: immutable specs and fields, ratcheting of stored values, and the
DeviceTaintRule status."""

from __future__ import annotations

import copy

from tests.unit.validation.kit import (
    changed,
    claim,
    device,
    device_class,
    errors,
    one_error,
    paths,
    request,
    resource_slice,
    taint_rule,
    template,
)

BROKEN_CEL = {"cel": {"expression": "device.driver =="}}


def test_claim_spec_is_immutable() -> None:
    old = claim(request())
    assert errors(copy.deepcopy(old), old=old) == []
    new = changed(old, "spec.devices.requests.0.exactly.count", 2)
    err = one_error(new, old=old)
    assert (err.path, err.detail) == ("spec", "field is immutable")


def test_claim_update_ignores_the_status() -> None:
    old = claim(request())
    new = {**copy.deepcopy(old), "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}
    assert errors(new, old=old) == []


def test_claim_update_still_checks_metadata() -> None:
    old = claim(request())
    assert paths(changed(old, "metadata.labels", {"a": "not ok!"}), old=old) == ["metadata.labels"]


def test_template_spec_is_immutable() -> None:
    old = template(request())
    assert errors(copy.deepcopy(old), old=old) == []
    assert paths(changed(old, "spec.spec.devices.requests.0.name", "other"), old=old) == ["spec"]


def test_unchanged_stored_cel_is_not_compiled_again() -> None:
    old = device_class(selectors=[BROKEN_CEL])
    assert errors(copy.deepcopy(old), old=old) == []
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"a": "b"}
    assert errors(new, old=old) == []


def test_changed_or_reordered_selectors_are_new() -> None:
    good = {"cel": {"expression": "true"}}
    old = device_class(selectors=[BROKEN_CEL, good])
    reordered = device_class(selectors=[good, BROKEN_CEL])
    assert paths(reordered, old=old) == ["spec.selectors[1].cel.expression"]


def test_stored_large_parameters_are_grandfathered() -> None:
    large = {"opaque": {"driver": "gpu.example.com", "parameters": {"blob": "x" * 11000}}}
    old = device_class(config=[large])
    assert one_error(old).type == "TooLong"
    assert errors(copy.deepcopy(old), old=old) == []
    small = {"opaque": {"driver": "gpu.example.com", "parameters": {}}}
    assert one_error(device_class(config=[large, small]), old=old).type == "TooLong"


def test_slice_driver_pool_and_node_are_immutable() -> None:
    old = resource_slice(device())
    assert errors(copy.deepcopy(old), old=old) == []
    assert paths(changed(old, "spec.driver", "other.example.com"), old=old) == ["spec.driver"]
    assert paths(changed(old, "spec.pool.name", "other"), old=old) == ["spec.pool.name"]
    assert paths(changed(old, "spec.nodeName", "node-2"), old=old) == ["spec.nodeName"]
    assert errors(changed(old, "spec.pool.generation", 5), old=old) == []


def test_stored_taints_and_capacities_are_kept_until_the_devices_change() -> None:
    """Written when (say) a newer effect existed; kept while the device list is unchanged
    (upstream's valid-old-effect, invalid-old-effect-with-changed-spec,
    invalid-new-effect-in-new-device, Kubernetes 1.38)."""
    old = resource_slice(device(taints=[{"key": "k", "effect": "NoExecuteWithPDB"}]))
    assert errors(copy.deepcopy(old), old=old) == []
    assert errors(changed(old, "spec.pool.generation", 1), old=old) == []
    new = changed(old, "spec.devices.0.taints", [{"key": "k", "effect": "Other"}])
    assert paths(new, old=old) == ["spec.devices[0].taints[0].effect"]
    grown = resource_slice(device(taints=[{"key": "k", "effect": "NoExecuteWithPDB"}]), device("gpu-1"))
    assert paths(grown, old=old) == ["spec.devices[0].taints[0].effect"]
    capacity = {"m": {"value": "1", "requestPolicy": {"default": "1"}}}
    old = resource_slice(device(capacity=capacity))
    assert errors(copy.deepcopy(old), old=old) == []
    assert errors(resource_slice(device("gpu-1", capacity=capacity)), old=old)


def test_taint_rule_effect_ratchets() -> None:
    old = taint_rule(taint={"key": "k", "effect": "Unknown"})
    assert errors(changed(old, "spec.taint.value", "v"), old=old) == []
    assert paths(changed(old, "spec.taint.effect", "Other"), old=old) == ["spec.taint.effect"]
    assert errors(changed(old, "spec.taint.effect", "NoSchedule"), old=old) == []


def test_taint_rule_status_conditions() -> None:
    old = taint_rule()
    condition = {
        "type": "EvictionInProgress",
        "status": "False",
        "reason": "NotStarted",
        "message": "",
        "lastTransitionTime": "2026-01-02T03:04:05Z",
        "observedGeneration": 1,
    }
    new = {**copy.deepcopy(old), "status": {"conditions": [condition]}}
    assert errors(new, old=old, subresource="status") == []
    bad = {**condition, "status": "Maybe", "reason": "not a reason"}
    found = paths({**old, "status": {"conditions": [bad]}}, old=old, subresource="status")
    assert found == ["status.conditions[0].status", "status.conditions[0].reason"]
    missing = {"type": "X", "status": "True"}
    assert paths({**old, "status": {"conditions": [missing]}}, old=old, subresource="status") == [
        "status.conditions[0].lastTransitionTime",
        "status.conditions[0].reason",
    ]
    nine = [{**condition, "type": f"T{i}"} for i in range(9)]
    assert paths({**old, "status": {"conditions": nine}}, old=old, subresource="status") == [
        "status.conditions"
    ]
    twice = [condition, condition]
    assert (
        one_error({**old, "status": {"conditions": twice}}, old=old, subresource="status").type == "Duplicate"
    )


def test_draco_claims_may_carry_the_printer_status_fields() -> None:
    old = claim(request())
    new = {**copy.deepcopy(old), "status": {"state": "pending", "allocatedDevices": ""}}
    assert errors(new, old=old) == []
    assert errors(new, old=old, subresource="status") == []
    native = {**new, "apiVersion": "resource.k8s.io/v1"}
    assert paths(native, old=old, subresource="status") == ["status.state", "status.allocatedDevices"]


TWO_TERMS = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "x", "operator": "Exists"}]},
        {"matchExpressions": [{"key": "z", "operator": "Exists"}]},
    ]
}


def _per_device_slice(*devices: dict[str, object]) -> dict[str, object]:
    body = resource_slice(*devices, perDeviceNodeSelection=True)
    del body["spec"]["nodeName"]  # type: ignore[index]
    return body


def test_a_device_node_selector_needs_exactly_one_term() -> None:
    """kubernetes/kubernetes#141213 ("DRA ResourceSlice: reject multi-term per-device
    nodeSelector"): a device's own selector is held to the slice-level rule, with the same
    words; kube-apiserver 1.37 accepted two terms."""
    new = _per_device_slice(device(nodeSelector=TWO_TERMS))
    assert [(e.path, e.detail) for e in errors(new)] == [
        ("spec.devices[0].nodeSelector.nodeSelectorTerms", "must have exactly one node selector term")
    ]
    one = {"nodeSelectorTerms": TWO_TERMS["nodeSelectorTerms"][:1]}
    assert errors(_per_device_slice(device(nodeSelector=one))) == []


def test_a_stored_two_term_device_selector_is_kept_until_the_devices_change() -> None:
    """Ported from upstream's ResourceSlice update cases (Kubernetes 1.38):
    valid-update-keeps-stored-device-node-selector-with-two-terms-while-bumping-generation,
    invalid-update-touches-stored-device-node-selector-with-two-terms,
    invalid-update-adds-device-next-to-stored-device-node-selector-with-two-terms,
    valid-update-repairs-stored-device-node-selector-with-two-terms."""
    old = _per_device_slice(device(nodeSelector=TWO_TERMS))
    assert errors(changed(old, "spec.pool.generation", 1), old=old) == []
    terms = "spec.devices[0].nodeSelector.nodeSelectorTerms"
    touched = _per_device_slice(device(nodeSelector=TWO_TERMS, attributes={"foo": {"string": "bar"}}))
    assert paths(touched, old=old) == [terms]
    grown = _per_device_slice(device(nodeSelector=TWO_TERMS), device("gpu-1", allNodes=True))
    assert paths(grown, old=old) == [terms]
    one = {"nodeSelectorTerms": TWO_TERMS["nodeSelectorTerms"][:1]}
    assert errors(_per_device_slice(device(nodeSelector=one)), old=old) == []


def test_a_stored_name_with_two_slashes_is_kept_until_the_devices_change() -> None:
    """Ported from upstream's ResourceSlice update cases (Kubernetes 1.38):
    valid-update-keeps-stored-attribute-name-with-extra-slash(-while-bumping-generation),
    invalid-update-touches-stored-attribute-name-with-extra-slash,
    invalid-update-adds-device-next-to-stored-attribute-name-with-extra-slash: "An unchanged
    device list is accepted as it is stored ... any change to it, including merely
    reordering devices, validates every device in it"."""
    stored = device(attributes={"x.example.com/y/z": {"string": "v"}})
    old = resource_slice(stored, device("gpu-1"))
    assert errors(copy.deepcopy(old), old=old) == []
    assert errors(changed(old, "spec.pool.generation", 1), old=old) == []
    touched = device(attributes={"x.example.com/y/z": {"string": "w"}})
    assert paths(resource_slice(touched, device("gpu-1")), old=old) == ["spec.devices[0].attributes"]
    grown = resource_slice(stored, device("gpu-1"), device("gpu-2"))
    assert paths(grown, old=old) == ["spec.devices[0].attributes"]
    assert paths(resource_slice(device("gpu-1"), stored), old=old) == ["spec.devices[1].attributes"]


def test_changing_per_device_node_selection_revalidates_only_the_node_selection() -> None:
    """Upstream's invalid-update-sets-per-device-node-selection-keeps-stored-attribute-name-with-extra-slash:
    "Changing perDeviceNodeSelection revalidates only the node selection of the unchanged
    devices, not the rest of them"."""
    stored = device(attributes={"x.example.com/y/z": {"string": "v"}})
    old = resource_slice(stored, allNodes=True)
    del old["spec"]["nodeName"]
    new = copy.deepcopy(old)
    del new["spec"]["allNodes"]
    new["spec"]["perDeviceNodeSelection"] = True
    assert paths(new, old=old) == ["spec.devices[0]"]
