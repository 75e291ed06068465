"""The one key of an object (`draco.api.bodies.key_of`): every cache, queue and log of the
package keys objects by it."""

from __future__ import annotations

from draco.api import ResourceClaim
from draco.api.bodies import key_of, object_key


def test_a_namespaced_object_is_keyed_namespace_slash_name() -> None:
    assert key_of({"metadata": {"namespace": "ns", "name": "c"}}) == "ns/c"
    assert object_key("ns", "c") == "ns/c"


def test_a_cluster_scoped_object_is_keyed_by_its_name() -> None:
    assert key_of({"metadata": {"name": "gpu"}}) == "gpu"
    assert key_of({"metadata": {"namespace": "", "name": "gpu"}}) == "gpu"
    assert object_key(None, "gpu") == "gpu"
    assert key_of({}) == ""


def test_a_model_has_the_same_key_as_its_body() -> None:
    body = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ns", "name": "c"},
        "spec": {},
    }
    assert ResourceClaim.model_validate(body).key == key_of(body) == "ns/c"
