"""Compacting cached objects: equal parts shared, strings interned, nothing changed."""

from __future__ import annotations

import copy

from draco.kube.compact import Compactor


def test_share_gives_one_object_per_distinct_value() -> None:
    compactor = Compactor()
    first = compactor.share({"b": [1, {"c": "x"}], "a": True})
    second = compactor.share({"a": True, "b": [1, {"c": "x"}]})  # the same, keys in another order
    other = compactor.share({"a": 1, "b": [1, {"c": "x"}]})  # 1 is not true in JSON
    assert first is second
    assert other is not first
    assert first == {"a": True, "b": [1, {"c": "x"}]}


def test_intern_copies_and_interns_strings() -> None:
    compactor = Compactor()
    one = compactor.intern({"image": "".join(["registry/", "a"]), "n": [1, None]})
    two = compactor.intern({"image": "".join(["registry/", "a"]), "n": [1, None]})
    assert one == two == {"image": "registry/a", "n": [1, None]}
    assert one is not two
    assert one["image"] is two["image"]


def test_share_items_shares_the_parts_and_copies_the_whole() -> None:
    compactor = Compactor()
    spec = {"containers": [{"name": "main"}], "nodeName": "n1"}
    one = compactor.share_items(copy.deepcopy(spec))
    two = compactor.share_items(copy.deepcopy(spec) | {"nodeName": "n2"})
    assert one == spec
    assert one is not two
    assert one["containers"] is two["containers"]


def test_the_table_starts_over_at_its_limit() -> None:
    compactor = Compactor(limit=2)
    a = compactor.share(["a"])
    compactor.share(["b"])
    assert len(compactor) == 2
    compactor.share(["c"])  # full: starts over
    assert len(compactor) == 1
    assert compactor.share(["a"]) is not a
    assert compactor.share(["a"]) == a
