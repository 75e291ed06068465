"""The webhook handlers' pure parts: the verdict text, defaulting patches, timeAdded
stamping and the self-signed certificate. (The served webhooks are tested end to end in
tests/e2e/test_webhooks.py.)"""

from __future__ import annotations

import ipaddress
import ssl
from typing import Any

import pytest
from cryptography import x509

from draco.runtime.tls import write_self_signed
from draco.webhook import admission_verdict, defaulted_spec

V = "resource.draco.dev/v1"


def _claim(**exactly: Any) -> dict[str, Any]:
    return {
        "apiVersion": V,
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", **exactly}}]}
        },
    }


async def test_verdict_names_the_object_the_field_and_the_error() -> None:
    broken = {
        "apiVersion": V,
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]},
    }
    message = await admission_verdict(broken, old=None, subresource=None)
    assert message is not None
    assert message.startswith(
        'DeviceClass gpu is invalid: spec.selectors[0].cel.expression: Invalid value: "device.driver ==": compilation failed:'
    )
    fine = {**broken, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    assert await admission_verdict(fine, old=None, subresource=None) is None


async def test_verdict_without_a_namespace_skips_the_label_lookup() -> None:
    claim = _claim(adminAccess=True)
    del claim["metadata"]["namespace"]
    assert await admission_verdict(claim, old=None, subresource=None) is None


def test_claims_get_upstream_defaults_on_create_only() -> None:
    patch = defaulted_spec(_claim(tolerations=[{"key": "k"}]), old=None)
    exactly = patch["devices"]["requests"][0]["exactly"]
    assert (exactly["allocationMode"], exactly["count"]) == ("ExactCount", 1)
    assert exactly["tolerations"] == [{"key": "k", "operator": "Equal"}]
    assert defaulted_spec(_claim(), old=_claim()) == {}
    done = _claim(allocationMode="ExactCount", count=1)
    assert defaulted_spec(done, old=None) == {}


def test_structurally_broken_objects_are_not_mutated() -> None:
    assert defaulted_spec(_claim(count="two"), old=None) == {}


def _rule(**taint: Any) -> dict[str, Any]:
    return {
        "apiVersion": V,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r"},
        "spec": {"taint": {"key": "k", "effect": "NoSchedule", **taint}},
    }


def test_taint_rules_get_time_added_and_a_new_one_when_the_effect_changes() -> None:
    stamped = defaulted_spec(_rule(), old=None)["taint"]["timeAdded"]
    assert stamped.endswith("Z")
    then = "2026-01-02T03:04:05Z"
    assert defaulted_spec(_rule(timeAdded=then), old=None) == {}
    assert defaulted_spec(_rule(timeAdded=then, value="v"), old=_rule(timeAdded=then)) == {}
    changed = defaulted_spec(_rule(timeAdded=then, effect="NoExecute"), old=_rule(timeAdded=then))
    assert changed["taint"]["timeAdded"] != then


def test_slice_taints_get_time_added() -> None:
    body = {
        "apiVersion": V,
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
            "nodeName": "n",
            "devices": [{"name": "a", "taints": [{"key": "k", "effect": "None"}]}, {"name": "b"}],
        },
    }
    devices = defaulted_spec(body, old=None)["devices"]
    assert devices[0]["taints"][0]["timeAdded"].endswith("Z")
    assert devices[1] == {"name": "b"}


@pytest.mark.parametrize("host", ["127.0.0.1", "draco-webhook.draco-system.svc"])
def test_self_signed_certificate_names_the_host(host: str, tmp_path: Any) -> None:
    cert = write_self_signed([host, "localhost"], directory=tmp_path)
    parsed = x509.load_pem_x509_certificate(cert.certfile.read_bytes())
    sans = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    try:
        expected: object = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        expected = x509.DNSName(host)
    assert expected in sans
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert.certfile, cert.pkeyfile)
    assert oct(cert.pkeyfile.stat().st_mode & 0o777) == "0o600"
