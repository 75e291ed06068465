"""Errors print the way kube-apiserver prints them."""

from __future__ import annotations

from draco.validation import render, render_all
from draco.validation.fielderrors import (
    FieldPath,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)

P = FieldPath("spec").child("devices", "requests").index(0).child("name")


def test_paths() -> None:
    assert str(P) == "spec.devices.requests[0].name"
    assert str(FieldPath("spec").child("devices").index(1).child("attributes").key("model")) == (
        "spec.devices[1].attributes[model]"
    )


def test_each_type_renders_like_the_api_server() -> None:
    assert render(required(P)) == "spec.devices.requests[0].name: Required value"
    assert render(invalid(P, "GPU", "must be a DNS label")) == (
        'spec.devices.requests[0].name: Invalid value: "GPU": must be a DNS label'
    )
    assert render(invalid(P, 2, "x")) == "spec.devices.requests[0].name: Invalid value: 2: x"
    assert render(too_long(P, 63)) == "spec.devices.requests[0].name: Too long: may not be more than 63 bytes"
    assert (
        render(too_many(P, 33, 32))
        == "spec.devices.requests[0].name: Too many: 33: must have at most 32 items"
    )
    assert render(duplicate(P, "gpu")) == 'spec.devices.requests[0].name: Duplicate value: "gpu"'
    assert render(not_supported(P, "Some", ["All", "ExactCount"])) == (
        'spec.devices.requests[0].name: Unsupported value: "Some": supported values: "All", "ExactCount"'
    )
    assert render(forbidden(P, "no")) == "spec.devices.requests[0].name: Forbidden: no"


def test_several_errors_are_bracketed() -> None:
    assert render_all([required(P)]) == "spec.devices.requests[0].name: Required value"
    assert render_all([required(P), forbidden(P, "x")]).startswith("[spec.devices")
