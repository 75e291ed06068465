"""The string formats, valid and invalid, with upstream's wording."""

from __future__ import annotations

import pytest

from draco.validation.fielderrors import FieldPath
from draco.validation.formats import (
    MORE_THAN_ONE_SLASH,
    check_driver_name,
    check_fully_qualified_name,
    check_interface_address,
    check_pool_name,
    check_qualified_name,
    check_uuid,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_extended_resource_name,
    is_label_value,
    is_qualified_name,
)

P = FieldPath("f")


@pytest.mark.parametrize("value", ["a", "gpu-0", "0", "a" * 63])
def test_dns_labels(value: str) -> None:
    assert is_dns1123_label(value) == []


@pytest.mark.parametrize("value", ["", "A", "a_b", "-a", "a-", "a" * 64, "a.b", "a\n"])
def test_not_dns_labels(value: str) -> None:
    assert is_dns1123_label(value)


def test_subdomains() -> None:
    assert is_dns1123_subdomain("gpu.example.com") == []
    assert is_dns1123_subdomain("a." * 127 + "a")  # 255 characters
    assert is_dns1123_subdomain("Example.com")


def test_qualified_names() -> None:
    assert is_qualified_name("example.com/ready") == []
    assert is_qualified_name("Ready") == []
    assert is_qualified_name("a/b/c")
    assert is_qualified_name("/ready") == ["prefix part must be non-empty"]
    assert is_qualified_name("bad key!")
    assert is_qualified_name("")


def test_label_values() -> None:
    assert is_label_value("") == []
    assert is_label_value("v1.2_x") == []
    assert is_label_value("not valid!")
    assert is_label_value("x" * 64) == ["must be no more than 63 characters"]


def test_driver_names_are_case_insensitive_subdomains_of_at_most_63() -> None:
    assert check_driver_name("gpu.example.com", P) == []
    assert check_driver_name("GPU.example.com", P) == []
    assert [e.type for e in check_driver_name("", P)] == ["Required"]
    assert [e.type for e in check_driver_name("a" * 64, P)] == ["TooLong"]
    assert [e.type for e in check_driver_name("not_a_driver", P)] == ["Invalid"]


def test_pool_names_are_subdomains_joined_by_slashes() -> None:
    assert check_pool_name("node-1", P) == []
    assert check_pool_name("region/zone.a/node-1", P) == []
    assert check_pool_name("a//b", P)
    assert next(e.type for e in check_pool_name("a" * 254, P)) == "TooLong"


def test_attribute_names() -> None:
    assert check_qualified_name("model", P) == []
    assert check_qualified_name("gpu.example.com/model", P) == []
    assert [e.detail for e in check_qualified_name("/model", P)] == ["the domain must not be empty"]
    assert [e.detail for e in check_qualified_name("gpu.example.com/", P)] == ["the name must not be empty"]
    assert [e.type for e in check_qualified_name("a" * 33, P)] == ["TooLong"]
    assert check_qualified_name("9lives", P)


@pytest.mark.parametrize("name", ["a/b/c", "a/b/c/d", "/a/b", "a//b", "gpu.example.com/model/x"])
def test_qualified_names_with_more_than_one_slash(name: str) -> None:
    """Ported from kubernetes/kubernetes#141644's table ("errors before 0, errors after 1"
    for `a/b/c`, `a/b/c/d`, `/a/b`, `a//b`): Kubernetes 1.38 refuses them with one error
    (its words: "must not contain more than one slash"), 1.37 accepted them unchecked."""
    assert [(e.type, e.detail) for e in check_qualified_name(name, P)] == [("Invalid", MORE_THAN_ONE_SLASH)]


def test_fully_qualified_names_need_a_domain() -> None:
    assert check_fully_qualified_name("gpu.example.com/numa", P) == []
    assert [e.detail for e in check_fully_qualified_name("numa", P)] == [
        "a fully qualified name must be a domain and a name separated by a slash"
    ]


def test_extended_resource_names() -> None:
    assert is_extended_resource_name("example.com/gpu")
    assert not is_extended_resource_name("gpu")
    assert not is_extended_resource_name("kubernetes.io/gpu")
    assert not is_extended_resource_name("requests.example.com/gpu")
    assert not is_extended_resource_name("example.com/bad name")


def test_share_ids_are_lower_case_uuids() -> None:
    assert check_uuid("0b7f7c34-8d0e-4a1f-9d4e-3c2b1a0f9e8d", P) == []
    assert "lowercase" in check_uuid("0B7F7C34-8D0E-4A1F-9D4E-3C2B1A0F9E8D", P)[0].detail
    assert check_uuid("not-a-uuid", P)


def test_interface_addresses_keep_host_bits_in_canonical_form() -> None:
    assert check_interface_address("192.0.2.5/24", P) == []
    assert check_interface_address("2001:db8::1/64", P) == []
    assert check_interface_address("192.0.2.5", P)
    assert "canonical" in check_interface_address("2001:DB8::1/64", P)[0].detail
