"""Qualified attribute names and request references split the upstream way."""

from __future__ import annotations

import pytest

from draco.api import (
    RequestReference,
    format_request_reference,
    parse_request_reference,
    qualify_name,
    split_qualified_name,
)


def test_unqualified_names_belong_to_the_driver_domain() -> None:
    assert split_qualified_name("model", default_domain="gpu.example.com") == ("gpu.example.com", "model")
    assert split_qualified_name("example.com/numa", default_domain="gpu.example.com") == (
        "example.com",
        "numa",
    )
    # Upstream splits at the first slash and does not reject further ones.
    assert split_qualified_name("a.com/b/c", default_domain="d") == ("a.com", "b/c")
    assert qualify_name("model", default_domain="gpu.example.com") == "gpu.example.com/model"


def test_request_references() -> None:
    assert parse_request_reference("gpu") == RequestReference("gpu", None)
    assert parse_request_reference("gpu/big") == RequestReference("gpu", "big")
    assert str(RequestReference("gpu", "big")) == "gpu/big"
    assert format_request_reference("gpu") == "gpu"


@pytest.mark.parametrize("reference", ["", "a/b/c", "/b", "a/"])
def test_malformed_request_references(reference: str) -> None:
    with pytest.raises(ValueError, match="must be the name of a request"):
        parse_request_reference(reference)
