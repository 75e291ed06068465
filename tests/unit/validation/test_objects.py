"""Whole-object rules on create: kind and apiVersion, structure (unknown fields, types,
null), metadata, defaults, and one test per rule of each kind, valid and invalid."""

from __future__ import annotations

from typing import Any

import pytest

from draco.errors import InvalidObjectError
from draco.validation import render_all, validate, validate_object
from tests.unit.validation.kit import (
    NATIVE,
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

# --- dispatch, structure, metadata ---------------------------------------------------------------


def test_unknown_kind_and_api_version() -> None:
    assert one_error({"apiVersion": NATIVE, "kind": "Pod"}).path == "kind"
    assert one_error({**device_class(), "apiVersion": "resource.k8s.io/v1beta1"}).path == "apiVersion"


def test_both_api_versions_are_accepted() -> None:
    assert errors(device_class()) == []
    assert errors({**device_class(), "apiVersion": NATIVE}) == []


def test_unknown_fields_are_reported_with_their_path() -> None:
    err = one_error(claim(request(deviceClass="x")))
    assert err.path == "spec.devices.requests[0].exactly.deviceClass"
    assert err.type == "Invalid"
    assert "unknown field" in err.detail


def test_wrong_types_are_reported_before_any_rule() -> None:
    assert paths(claim(request(count="two"))) == ["spec.devices.requests[0].exactly.count"]
    assert paths(claim(request(adminAccess="yes"))) == ["spec.devices.requests[0].exactly.adminAccess"]
    assert paths(device_class(selectors="x")) == ["spec.selectors"]
    assert paths(claim(request(count=2**63))) == ["spec.devices.requests[0].exactly.count"]
    assert paths(resource_slice(device(capacity={"m": {"value": "lots"}}))) == [
        "spec.devices[0].capacity[m].value"
    ]
    assert paths(
        resource_slice(device(taints=[{"key": "k", "effect": "None", "timeAdded": "yesterday"}]))
    ) == ["spec.devices[0].taints[0].timeAdded"]


def test_null_means_unset() -> None:
    assert errors(device_class(selectors=None, extendedResourceName=None)) == []


def test_draco_device_class_may_carry_a_status_but_the_native_one_not() -> None:
    assert errors({**device_class(), "status": {"devices": 3}}) == []
    assert paths({**device_class(), "apiVersion": NATIVE, "status": {}}) == ["status"]


def test_metadata_name_and_labels() -> None:
    unnamed = device_class()
    unnamed["metadata"] = {}
    assert one_error(unnamed).type == "Required"
    assert errors({**unnamed, "metadata": {"generateName": "gpu-"}}) == []
    assert paths({**unnamed, "metadata": {"name": "Bad_Name"}}) == ["metadata.name"]
    assert paths({**unnamed, "metadata": {"name": "ok", "labels": {"a": "b c"}}}) == ["metadata.labels"]
    assert paths({**unnamed, "metadata": {"name": "ok", "annotations": {"bad key!": "x"}}}) == [
        "metadata.annotations"
    ]
    assert paths({**unnamed, "metadata": {"name": "ok", "finalizers": ["nodomain"]}}) == [
        "metadata.finalizers[0]"
    ]


def test_validate_raises_with_every_error_named() -> None:
    with pytest.raises(InvalidObjectError) as caught:
        validate(claim(request("A"), request("A")))
    assert "ResourceClaim ns/c is invalid" in str(caught.value)
    assert len(caught.value.errors) == 3
    validate(claim(request()))


# --- DeviceClass -----------------------------------------------------------------------------------


def test_selector_needs_cel() -> None:
    assert paths(device_class(selectors=[{}])) == ["spec.selectors[0].cel"]


def test_cel_compile_error_names_the_selector_and_the_error() -> None:
    err = one_error(device_class(selectors=[{"cel": {"expression": "device.driver =="}}]))
    assert err.path == "spec.selectors[0].cel.expression"
    assert err.type == "Invalid"
    assert err.detail.startswith("compilation failed:")
    assert "spec.selectors[0].cel.expression: Invalid value: " in render_all([err])


def test_cel_too_long_is_not_compiled() -> None:
    err = one_error(device_class(selectors=[{"cel": {"expression": "true || " * 1300 + "true"}}]))
    assert err.type == "TooLong"


def test_cel_cost_limit() -> None:
    nested = 'device.attributes["a.com"].all(k, device.attributes["b.com"].all(j, device.attributes["c.com"].all(m, {})))'
    assert errors(device_class(selectors=[{"cel": {"expression": nested.format("k == j")}}])) == []
    deeper = nested.format('device.attributes["d.com"].all(n, k == j)')
    err = one_error(device_class(selectors=[{"cel": {"expression": deeper}}]))
    assert (err.type, err.detail) == ("Forbidden", "too complex, exceeds cost limit")


def test_selector_and_config_limits() -> None:
    ok = {"cel": {"expression": "true"}}
    assert errors(device_class(selectors=[ok] * 32)) == []
    assert one_error(device_class(selectors=[ok] * 33)).type == "TooMany"
    config = {"opaque": {"driver": "gpu.example.com", "parameters": {}}}
    assert errors(device_class(config=[config] * 32)) == []
    assert one_error(device_class(config=[config] * 33)).type == "TooMany"


@pytest.mark.parametrize(
    ("parameters", "error_type"),
    [
        ({"a": 1}, None),
        ([1], "Invalid"),
        ("text", "Invalid"),
        (None, "Required"),
        ({"blob": "x" * 10240}, "TooLong"),
        ({"blob": "x" * 10000}, None),
    ],
)
def test_opaque_parameters_are_a_json_object_of_at_most_10_kib(
    parameters: Any, error_type: str | None
) -> None:
    obj = device_class(config=[{"opaque": {"driver": "gpu.example.com", "parameters": parameters}}])
    found = errors(obj)
    assert [e.type for e in found] == ([error_type] if error_type else [])


def test_opaque_needs_a_driver() -> None:
    assert paths(device_class(config=[{"opaque": {"parameters": {}}}])) == ["spec.config[0].opaque.driver"]


def test_extended_resource_name() -> None:
    assert errors(device_class(extendedResourceName="example.com/gpu")) == []
    assert paths(device_class(extendedResourceName="gpu")) == ["spec.extendedResourceName"]


# --- ResourceClaim / template spec -----------------------------------------------------------------


def test_defaults_before_validation() -> None:
    assert errors(claim(request())) == []
    assert errors(claim(request(count=0))) == []
    assert errors(claim(request(allocationMode="All"))) == []
    assert errors(claim(request(tolerations=[{"key": "k", "value": "v"}]))) == []


def test_allocation_mode_and_count() -> None:
    assert one_error(claim(request(count=-2))).detail == "must be greater than zero"
    assert one_error(claim(request(allocationMode="All", count=1))).path.endswith("exactly.count")
    assert one_error(claim(request(allocationMode="Most"))).type == "NotSupported"


def test_exactly_one_of_exactly_or_first_available() -> None:
    assert one_error(claim({"name": "gpu"})).type == "Required"
    both = {
        "name": "gpu",
        "exactly": {"deviceClassName": "c"},
        "firstAvailable": [{"name": "s", "deviceClassName": "c"}],
    }
    assert "multiple fields are set" in one_error(claim(both)).detail


def test_request_names_are_unique_dns_labels() -> None:
    assert paths(claim(request("gpu"), request("gpu"))) == ["spec.devices.requests[1]"]
    assert paths(claim(request("GPU"))) == ["spec.devices.requests[0].name"]
    assert one_error(claim(*[request(f"r{i}") for i in range(33)])).type == "TooMany"
    assert errors(claim(*[request(f"r{i}") for i in range(32)])) == []


def test_device_class_name_required_and_a_subdomain() -> None:
    assert paths(claim({"name": "gpu", "exactly": {}})) == [
        "spec.devices.requests[0].exactly.deviceClassName"
    ]
    assert paths(claim(request(deviceClassName="Bad_Class"))) == [
        "spec.devices.requests[0].exactly.deviceClassName"
    ]


def test_subrequests() -> None:
    subs = [{"name": f"s{i}", "deviceClassName": "gpu.example.com"} for i in range(8)]
    assert errors(claim({"name": "gpu", "firstAvailable": subs})) == []
    nine = [*subs, {"name": "s9", "deviceClassName": "gpu.example.com"}]
    assert one_error(claim({"name": "gpu", "firstAvailable": nine})).type == "TooMany"
    dupes = [subs[0], subs[0]]
    assert one_error(claim({"name": "gpu", "firstAvailable": dupes})).type == "Duplicate"
    bad = [{"name": "s", "deviceClassName": "gpu.example.com", "count": -1}]
    assert paths(claim({"name": "gpu", "firstAvailable": bad})) == [
        "spec.devices.requests[0].firstAvailable[0].count"
    ]


def test_capacity_request_keys_are_qualified_names() -> None:
    """Kubernetes 1.38's ResourceClaim cases capacity-requests-bad-key,
    capacity-requests-bad-key-in-subrequest and capacity-requests-valid (1.37 checked
    nothing of these keys): the error is the key's, on the `requests` map."""
    bad = {"requests": {"1bad": "1"}}
    err = one_error(claim(request(capacity=bad)))
    assert (err.path, err.value) == ("spec.devices.requests[0].exactly.capacity.requests", "1bad")
    assert err.detail.startswith("a valid C identifier must start with alphabetic character")
    sub = {"name": "s", "deviceClassName": "gpu.example.com", "capacity": bad}
    assert paths(claim({"name": "gpu", "firstAvailable": [sub]})) == [
        "spec.devices.requests[0].firstAvailable[0].capacity.requests"
    ]
    assert errors(claim(request(capacity={"requests": {"dra.example.com/cores": "4"}}))) == []


def test_tolerations() -> None:
    ok = [{"key": "example.com/k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    assert errors(claim(request(tolerations=ok))) == []
    assert errors(claim(request(tolerations=[{"operator": "Exists"}]))) == []
    assert one_error(
        claim(request(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]))
    ).path.endswith(".value")
    assert one_error(claim(request(tolerations=[{"key": "k", "value": "bad value!"}]))).path.endswith(
        ".value"
    )
    assert one_error(claim(request(tolerations=[{"key": "k", "operator": "In"}]))).type == "NotSupported"
    assert one_error(claim(request(tolerations=[{"key": "k", "effect": "Evict"}]))).type == "NotSupported"
    assert one_error(claim(request(tolerations=[{"key": "bad key", "operator": "Exists"}]))).path.endswith(
        ".key"
    )


def test_constraints_reference_requests_and_subrequests() -> None:
    sub = {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "c"}]}
    good = claim(
        request("a"), sub, constraints=[{"requests": ["a", "b", "b/x"], "matchAttribute": "d.com/numa"}]
    )
    assert errors(good) == []
    for ref in ("c", "a/x", "b/y", "b/x/z"):
        bad = claim(request("a"), sub, constraints=[{"requests": [ref], "matchAttribute": "d.com/numa"}])
        assert paths(bad) == ["spec.devices.constraints[0].requests[0]"], ref
    dup = claim(request("a"), constraints=[{"requests": ["a", "a"], "matchAttribute": "d.com/numa"}])
    assert one_error(dup).type == "Duplicate"


def test_constraints_need_exactly_one_fully_qualified_attribute() -> None:
    assert errors(claim(request("a"), constraints=[{"distinctAttribute": "d.com/uuid"}])) == []
    # Both set: upstream checks matchAttribute only and accepts.
    assert (
        errors(
            claim(request("a"), constraints=[{"matchAttribute": "d.com/a", "distinctAttribute": "d.com/b"}])
        )
        == []
    )
    assert one_error(claim(request("a"), constraints=[{}])).type == "Required"
    assert paths(claim(request("a"), constraints=[{"matchAttribute": "numa"}])) == [
        "spec.devices.constraints[0].matchAttribute"
    ]
    too_many = claim(request("a"), constraints=[{"matchAttribute": "d.com/n"}] * 33)
    assert one_error(too_many).type == "TooMany"


def test_claim_configs_reference_requests() -> None:
    opaque = {"driver": "gpu.example.com", "parameters": {"x": 1}}
    assert errors(claim(request("a"), config=[{"requests": ["a"], "opaque": opaque}])) == []
    assert errors(claim(request("a"), config=[{"opaque": opaque}])) == []
    assert paths(claim(request("a"), config=[{"requests": ["b"], "opaque": opaque}])) == [
        "spec.devices.config[0].requests[0]"
    ]
    assert paths(claim(request("a"), config=[{"requests": ["a"]}])) == ["spec.devices.config[0].opaque"]
    assert one_error(claim(request("a"), config=[{"opaque": opaque}] * 33)).type == "TooMany"


def test_selectors_in_requests_are_compiled() -> None:
    assert errors(claim(request(selectors=[{"cel": {"expression": 'device.driver == "x"'}}]))) == []
    assert paths(claim(request(selectors=[{"cel": {"expression": "device.driver"}}]))) == [
        "spec.devices.requests[0].exactly.selectors[0].cel.expression"
    ]


def test_template_metadata_allows_only_labels_and_annotations() -> None:
    tpl = template(request())
    assert errors(tpl) == []
    tpl["spec"]["metadata"] = {"labels": {"a": "b"}, "annotations": {"x.com/y": "z"}}
    assert errors(tpl) == []
    tpl["spec"]["metadata"] = {"name": "x"}
    assert paths(tpl) == ["spec.metadata.name"]


def test_template_spec_is_a_claim_spec() -> None:
    assert paths(template(request("a"), request("a"))) == ["spec.spec.devices.requests[1]"]


# --- admin access ----------------------------------------------------------------------------------


def test_admin_access_needs_the_draco_label_on_the_namespace() -> None:
    admin = claim(request(adminAccess=True))
    err = one_error(admin, namespace_labels={})
    assert (err.path, err.type) == ("spec.devices.requests[0].adminAccess", "Forbidden")
    assert "resource.draco.dev/admin-access: true" in err.detail
    assert "kubectl label namespace ns resource.draco.dev/admin-access=true" in err.detail
    assert errors(admin, namespace_labels={"resource.draco.dev/admin-access": "true"}) == []
    assert errors(admin, namespace_labels={"resource.draco.dev/admin-access": "yes"})
    assert errors(admin) == []  # no labels given: the caller could not look


def test_draco_objects_accept_the_upstream_admin_access_label_too() -> None:
    admin = claim(request(adminAccess=True))
    assert errors(admin, namespace_labels={"resource.kubernetes.io/admin-access": "true"}) == []
    assert errors(admin, namespace_labels={"resource.kubernetes.io/admin-access": "false"})


def test_native_objects_are_judged_by_the_native_label() -> None:
    admin = claim(request(adminAccess=True), api_version=NATIVE)
    assert errors(admin, namespace_labels={"resource.draco.dev/admin-access": "true"})
    assert errors(admin, namespace_labels={"resource.kubernetes.io/admin-access": "true"}) == []


def test_admin_access_false_needs_no_label() -> None:
    assert errors(claim(request(adminAccess=False)), namespace_labels={}) == []


def test_templates_are_checked_for_admin_access_too() -> None:
    assert paths(template(request(adminAccess=True)), namespace_labels={}) == [
        "spec.spec.devices.requests[0].adminAccess"
    ]


# --- ResourceSlice ---------------------------------------------------------------------------------


def test_slice_driver_and_pool() -> None:
    assert errors(resource_slice(device())) == []
    assert paths(resource_slice(driver="")) == ["spec.driver"]
    assert paths(resource_slice(pool={"name": "", "generation": 0, "resourceSliceCount": 1})) == [
        "spec.pool.name"
    ]
    assert paths(resource_slice(pool={"name": "p", "generation": 0, "resourceSliceCount": 0})) == [
        "spec.pool.resourceSliceCount"
    ]
    assert paths(resource_slice(pool={"name": "p", "generation": -1, "resourceSliceCount": 1})) == [
        "spec.pool.generation"
    ]


def test_slice_exactly_one_node_selection() -> None:
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]
    }
    assert errors(resource_slice(nodeName=None, nodeSelector=selector)) == []
    assert errors(resource_slice(nodeName=None, allNodes=True)) == []
    assert one_error(resource_slice(nodeName=None)).type == "Required"
    assert "multiple fields" in one_error(resource_slice(allNodes=True)).detail
    assert paths(resource_slice(nodeName="")) == ["spec.nodeName", "spec"]
    assert paths(resource_slice(nodeName=None, perDeviceNodeSelection=False)) == [
        "spec.perDeviceNodeSelection",
        "spec",
    ]
    assert paths(resource_slice(nodeName="Node_1")) == ["spec.nodeName"]


def test_slice_node_selector_rules() -> None:
    def sel(*reqs: dict[str, Any], fields: bool = False) -> dict[str, Any]:
        key = "matchFields" if fields else "matchExpressions"
        return resource_slice(nodeName=None, nodeSelector={"nodeSelectorTerms": [{key: list(reqs)}]})

    assert errors(sel({"key": "a", "operator": "Gt", "values": ["1"]})) == []
    assert paths(sel({"key": "a", "operator": "In"})) == [
        "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values"
    ]
    assert paths(sel({"key": "a", "operator": "Exists", "values": ["x"]}))
    assert paths(sel({"key": "a", "operator": "Lt", "values": ["1", "2"]}))
    assert paths(sel({"key": "spec.x", "operator": "In", "values": ["n"]}, fields=True))
    assert paths(sel({"key": "metadata.name", "operator": "Exists"}, fields=True))
    assert paths(resource_slice(nodeName=None, nodeSelector={"nodeSelectorTerms": []}))
    assert errors(resource_slice(nodeName=None, nodeSelector={"nodeSelectorTerms": [{}]})) == []
    assert paths(sel({"key": "a", "operator": "In", "values": ["not a label"]})) == [
        "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values[0]"
    ]


def test_slice_device_limits() -> None:
    assert errors(resource_slice(*[device(f"d{i}") for i in range(128)])) == []
    assert one_error(resource_slice(*[device(f"d{i}") for i in range(129)])).type == "TooMany"
    tainted = [device(f"d{i}", taints=[{"key": "k", "effect": "None"}]) for i in range(65)]
    assert one_error(resource_slice(*tainted)).type == "TooMany"
    consuming = [
        device(f"d{i}", consumesCounters=[{"counterSet": "c", "counters": {"m": {"value": "1"}}}])
        for i in range(65)
    ]
    assert one_error(resource_slice(*consuming)).type == "TooMany"
    listed = [device(f"d{i}", attributes={"l": {"ints": [1]}}) for i in range(65)]
    assert one_error(resource_slice(*listed)).type == "TooMany"
    assert errors(resource_slice(*listed[:64])) == []


def test_attributes() -> None:
    ok = {
        "i": {"int": 1},
        "b": {"bool": False},
        "s": {"string": "x"},
        "v": {"version": "1.0.0"},
        "d.com/l": {"strings": ["a"]},
    }
    assert errors(resource_slice(device(attributes=ok))) == []
    assert paths(resource_slice(device(attributes={"x": {}}))) == ["spec.devices[0].attributes[x]"]
    assert paths(resource_slice(device(attributes={"x": {"int": 1, "bool": True}}))) == [
        "spec.devices[0].attributes[x]"
    ]
    assert paths(resource_slice(device(attributes={"x": {"version": "v1"}}))) == [
        "spec.devices[0].attributes[x].version"
    ]
    assert paths(resource_slice(device(attributes={"x": {"versions": ["1.0.0", "1.0"]}}))) == [
        "spec.devices[0].attributes[x].versions[1]"
    ]
    assert paths(resource_slice(device(attributes={"x": {"strings": ["y" * 65]}}))) == [
        "spec.devices[0].attributes[x].strings[0]"
    ]
    assert paths(resource_slice(device(attributes={"a-b": {"int": 1}}))) == ["spec.devices[0].attributes"]


def test_attribute_and_capacity_totals() -> None:
    attrs = {f"a{i}": {"int": i} for i in range(16)}
    caps = {f"c{i}": {"value": "1"} for i in range(16)}
    assert errors(resource_slice(device(attributes=attrs, capacity=caps))) == []
    caps["extra"] = {"value": "1"}
    assert paths(resource_slice(device(attributes=attrs, capacity=caps))) == ["spec.devices[0]"]
    many_values = {"l": {"ints": list(range(49))}}
    assert "attribute values" in one_error(resource_slice(device(attributes=many_values))).detail


def _policy(policy: dict[str, Any], value: str = "40Gi") -> dict[str, Any]:
    return resource_slice(
        device(allowMultipleAllocations=True, capacity={"m": {"value": value, "requestPolicy": policy}})
    )


def test_request_policies() -> None:
    assert errors(_policy({"default": "1Gi", "validValues": ["1Gi", "2Gi"]})) == []
    assert (
        errors(_policy({"default": "2Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}})) == []
    )
    assert errors(_policy({"default": "500m", "validRange": {"min": "0", "step": "250m"}}, value="1")) == []
    assert (
        one_error(_policy({"default": "1Gi", "validValues": ["1Gi"], "validRange": {"min": "1Gi"}})).type
        == "Forbidden"
    )
    assert one_error(_policy({"validValues": ["1Gi"]})).path.endswith("requestPolicy.default")
    assert one_error(_policy({"validRange": {"min": "1Gi"}})).path.endswith("requestPolicy.default")
    assert one_error(_policy({"default": "3Gi", "validValues": ["1Gi", "2Gi"]})).detail == (
        "default value is not valid according to the requestPolicy"
    )
    assert (
        "larger than capacity"
        in one_error(_policy({"default": "1Gi", "validValues": ["1Gi", "80Gi"]})).detail
    )
    assert errors(_policy({"default": "1", "validValues": [str(i) for i in range(1, 12)]}))
    assert "duplicate" in one_error(_policy({"default": "1Gi", "validValues": ["1Gi", "1Gi"]})).detail
    assert one_error(_policy({"default": "1Gi", "validRange": {}})).path.endswith("validRange.min")
    assert (
        "min is larger than capacity"
        in one_error(_policy({"default": "50Gi", "validRange": {"min": "50Gi"}})).detail
    )
    assert "less than min" in one_error(_policy({"default": "1Gi", "validRange": {"min": "2Gi"}})).detail
    assert (
        "more than max"
        in one_error(_policy({"default": "4Gi", "validRange": {"min": "1Gi", "max": "2Gi"}})).detail
    )
    assert errors(_policy({"default": "1Gi", "validRange": {"min": "1Gi", "max": "80Gi"}}))
    assert (
        "greater than zero"
        in one_error(_policy({"default": "1Gi", "validRange": {"min": "1Gi", "step": "0"}})).detail
    )
    assert (
        "one step"
        in one_error(_policy({"default": "1Gi", "validRange": {"min": "1Gi", "step": "40Gi"}})).detail
    )
    assert (
        "milli"
        in one_error(
            _policy({"default": "1", "validRange": {"min": "0.0001", "step": "1"}}, value="4")
        ).detail
    )


def test_request_policy_needs_multiple_allocations() -> None:
    obj = resource_slice(device(capacity={"m": {"value": "1", "requestPolicy": {"default": "1"}}}))
    assert one_error(obj).detail == "allowMultipleAllocations must be true"


def test_counters() -> None:
    ok = [{"name": "set-a", "counters": {"mem": {"value": "40Gi"}}}]
    assert errors(resource_slice(sharedCounters=ok)) == []
    assert paths(resource_slice(sharedCounters=[{"name": "Set", "counters": {"mem": {"value": "1"}}}])) == [
        "spec.sharedCounters[0].name"
    ]
    assert one_error(resource_slice(sharedCounters=ok * 2)).type == "Duplicate"
    assert (
        one_error(
            resource_slice(
                sharedCounters=[{"name": f"s{i}", "counters": {"m": {"value": "1"}}} for i in range(9)]
            )
        ).type
        == "TooMany"
    )
    big = {f"c{i}": {"value": "1"} for i in range(33)}
    assert one_error(resource_slice(sharedCounters=[{"name": "s", "counters": big}])).type == "TooMany"
    assert paths(resource_slice(device(), sharedCounters=ok)) == ["spec"]
    consume = [{"counterSet": "a", "counters": {"m": {"value": "1"}}}]
    assert errors(resource_slice(device(consumesCounters=consume))) == []
    assert one_error(resource_slice(device(consumesCounters=consume * 2))).type == "Duplicate"
    assert paths(resource_slice(device(consumesCounters=[{"counterSet": "a", "counters": {}}]))) == [
        "spec.devices[0].consumesCounters[0].counters"
    ]


def test_per_device_node_selection() -> None:
    assert errors(resource_slice(device(nodeName="n1"), nodeName=None, perDeviceNodeSelection=True)) == []
    assert errors(resource_slice(device(allNodes=True), nodeName=None, perDeviceNodeSelection=True)) == []
    assert one_error(resource_slice(device(), nodeName=None, perDeviceNodeSelection=True)).type == "Required"
    two = device(nodeName="n1", allNodes=True)
    assert (
        one_error(resource_slice(two, nodeName=None, perDeviceNodeSelection=True)).value
        == "{`nodeName`, `allNodes`}"
    )
    assert paths(resource_slice(device(allNodes=True))) == ["spec.devices[0]"]


def test_device_taints_and_binding_conditions() -> None:
    taint = {"key": "example.com/k", "value": "v", "effect": "NoExecute", "timeAdded": "2026-01-02T03:04:05Z"}
    assert errors(resource_slice(device(taints=[taint]))) == []
    assert one_error(resource_slice(device(taints=[{"key": "k"}]))).type == "Required"
    assert one_error(resource_slice(device(taints=[taint] * 17))).type == "TooMany"
    ok = device(bindingConditions=["a"], bindingFailureConditions=["b"])
    assert errors(resource_slice(ok)) == []
    assert paths(resource_slice(device(bindingConditions=["a"]))) == [
        "spec.devices[0].bindingFailureConditions"
    ]
    assert paths(resource_slice(device(bindingFailureConditions=["a"]))) == [
        "spec.devices[0].bindingConditions"
    ]
    assert (
        one_error(resource_slice(device(bindingConditions=["a", "a"], bindingFailureConditions=["b"]))).type
        == "Duplicate"
    )
    assert (
        "overlap"
        in one_error(resource_slice(device(bindingConditions=["a"], bindingFailureConditions=["a"]))).detail
    )
    five = [f"c{i}" for i in range(5)]
    assert (
        one_error(resource_slice(device(bindingConditions=five, bindingFailureConditions=["x"]))).type
        == "TooMany"
    )


# --- DeviceTaintRule -------------------------------------------------------------------------------


def test_taint_rules() -> None:
    assert errors(taint_rule()) == []
    assert (
        errors(taint_rule(deviceSelector={"driver": "gpu.example.com", "pool": "p/q", "device": "gpu-0"}))
        == []
    )
    assert paths(taint_rule(deviceSelector={"driver": "bad_driver"})) == ["spec.deviceSelector.driver"]
    assert paths(taint_rule(deviceSelector={"pool": ""})) == ["spec.deviceSelector.pool"]
    assert paths(taint_rule(deviceSelector={"device": "Dev"})) == ["spec.deviceSelector.device"]
    assert paths(taint_rule(taint={"key": "k", "effect": "Sometimes"})) == ["spec.taint.effect"]
    assert paths(taint_rule(taint={"key": "k", "effect": "None", "value": "no spaces please"})) == [
        "spec.taint.value"
    ]
    assert paths(taint_rule(taint={"effect": "None"})) == ["spec.taint.key"]
    no_taint = taint_rule()
    del no_taint["spec"]["taint"]
    assert paths(no_taint) == ["spec.taint.key", "spec.taint.effect"]


def test_render_of_the_whole_list() -> None:
    text = render_all(validate_object(claim(request("A"))))
    assert text.startswith('spec.devices.requests[0].name: Invalid value: "A": a lowercase RFC 1123 label')


def test_alpha_fields_of_gates_off_in_1_37_are_accepted_and_ignored() -> None:
    derived = [{"name": "d.com/x", "expression": "not even cel ("}]
    assert errors(claim(request(derivedAttributes=derived))) == []
    consumption = [{"counterSet": "a", "counters": {"m": {"value": "1"}}, "compatibilityGroups": ["?"]}]
    assert errors(resource_slice(device(consumesCounters=consumption))) == []
    assert (
        errors(
            resource_slice(device(), skipNodeOperations=["NodePrepareResources"], partitionTypeAttribute="x")
        )
        == []
    )
    allocatable = {"cpu": {"mapping": {"capacityKey": "missing"}}}
    assert errors(resource_slice(device(nodeAllocatableResources=allocatable))) == []
