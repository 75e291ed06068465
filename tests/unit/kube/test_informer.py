"""The informer's cache: a LIST replaces its scope (deletions it never saw included), watch
events apply in order, our own writes are assumed but never revive a deleted object, a
late subscriber starts from the cache; and its loop: the watch starts at the LIST's
version, resumes after the server ends it, and lists again after a 410."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from draco.kube.client import RESOURCE_CLAIMS, Obj, Resource, WatchEvent, error_from_status
from draco.kube.informer import Informer

Changes = list[tuple[str, str, str]]


def claim(name: str, rv: int, *, uid: str | None = None, namespace: str = "ns", **status: Any) -> Obj:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "status": status,
    }


def recording(informer: Informer) -> Changes:
    """Every change the informer hands its subscribers: (type, key, resourceVersion)."""
    seen: Changes = []

    def handler(type_: str, obj: Obj) -> None:
        meta = obj["metadata"]
        seen.append((type_, f"{meta['namespace']}/{meta['name']}", meta.get("resourceVersion", "")))

    informer.subscribe(handler)
    return seen


class Script:
    """A source that answers LISTs and WATCHes from a script, then blocks (like a quiet
    watch); ``idle`` is set whenever it has nothing more to say."""

    def __init__(self, lists: list[tuple[list[Obj], str]], watches: list[list[tuple[str, Obj]]]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[tuple[str, str | None]] = []
        self.idle = asyncio.Event()

    async def list_with_version(
        self, resource: Resource, *, namespace: str | None = None, each: Callable[[Obj], Obj] | None = None
    ) -> tuple[list[Obj], str]:
        self.calls.append(("list", namespace))
        items, version = self.lists.pop(0)
        return ([each(i) for i in items] if each else items), version

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        timeout_seconds: int = 0,
    ) -> AsyncIterator[WatchEvent]:
        self.calls.append(("watch", resource_version))
        if not self.watches:
            self.idle.set()
            await asyncio.Event().wait()
        for type_, obj in self.watches.pop(0):
            if type_ == "ERROR":  # as the client does: an ERROR event raises its error
                raise error_from_status(obj, what="watch")
            yield WatchEvent(type=type_, object=obj)


def test_a_list_replaces_its_scope_and_reports_what_went_away() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    seen = recording(informer)
    informer.replace(None, [claim("a", 5), claim("b", 6)], "6")
    informer.replace(None, [claim("b", 6), claim("c", 9)], "10")
    assert seen == [
        ("ADDED", "ns/a", "5"),
        ("ADDED", "ns/b", "6"),
        ("ADDED", "ns/c", "9"),
        ("DELETED", "ns/a", "5"),
    ]
    assert sorted(o["metadata"]["name"] for o in informer.values()) == ["b", "c"]


def test_a_list_keeps_what_is_newer_than_itself() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    informer.replace(None, [claim("a", 5)], "5")
    assert informer.assume(claim("b", 12))  # our write, answered after the LIST below was taken
    informer.replace(None, [claim("a", 5)], "10")
    assert "ns/b" in informer


def test_events_apply_in_order_and_stale_ones_are_ignored() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    seen = recording(informer)
    informer.apply("ADDED", claim("a", 1))
    assert informer.assume(claim("a", 3, allocation={"x": 1}))
    informer.apply("MODIFIED", claim("a", 3, allocation={"x": 1}))  # the echo of our write
    informer.apply("MODIFIED", claim("a", 2))  # older than what we hold
    informer.apply("DELETED", claim("a", 4))
    assert seen == [("ADDED", "ns/a", "1"), ("MODIFIED", "ns/a", "3"), ("DELETED", "ns/a", "4")]
    assert not informer.assume(claim("a", 3, allocation={"x": 1})), "a deleted claim stays deleted"
    assert "ns/a" not in informer


def test_a_name_reused_by_another_object_is_a_deletion_then_an_addition() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    seen = recording(informer)
    informer.replace(None, [claim("a", 10)], "10")
    informer.replace(None, [claim("a", 12, uid="second")], "12")
    assert [(t, rv) for t, _, rv in seen] == [("ADDED", "10"), ("DELETED", "10"), ("ADDED", "12")]
    assert not informer.assume(claim("a", 11)), "an answer about the first one is stale"


def test_a_late_subscriber_starts_from_the_cache() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    informer.replace(None, [claim("a", 1), claim("b", 2)], "2")
    informer.apply("DELETED", claim("a", 3))
    seen = recording(informer)
    informer.apply("ADDED", claim("c", 4))
    assert seen == [("ADDED", "ns/b", "2"), ("ADDED", "ns/c", "4")]


def test_namespaces_filter_and_scope_lists() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS, serves=lambda ns: ns.startswith("team-"))
    assert informer.scopes == (None,)
    informer.replace(None, [claim("a", 1, namespace="team-x"), claim("b", 1, namespace="other")], "1")
    informer.apply("ADDED", claim("c", 2, namespace="other"))
    assert [o["metadata"]["name"] for o in informer.values()] == ["a"]
    plain = Informer(Script([], []), RESOURCE_CLAIMS, scopes=("one", "two"))
    assert plain.scopes == ("one", "two")
    plain.replace("one", [claim("a", 1, namespace="one")], "1")
    plain.replace("two", [claim("b", 2, namespace="two")], "2")
    plain.replace("one", [], "3")  # a LIST of one namespace says nothing about the other
    assert [o["metadata"]["name"] for o in plain.values()] == ["b"]


def owners(obj: Obj) -> list[str]:
    return [str(uid) for uid in (obj.get("status") or {}).get("owners") or []]


def test_an_index_follows_the_cache_before_handlers_hear_of_a_change() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    informer.apply("ADDED", claim("a", 1, owners=["u1"]))
    informer.add_index("owner", owners)  # added late: what the cache holds is indexed
    assert informer.keys_by("owner", "u1") == {"ns/a"}
    seen: list[tuple[str, set[str]]] = []
    informer.subscribe(lambda type_, obj: seen.append((type_, informer.keys_by("owner", "u2"))), replay=False)
    informer.apply("ADDED", claim("b", 2, owners=["u1", "u2"]))
    assert [o["metadata"]["name"] for o in informer.by_index("owner", "u1")] == ["a", "b"]
    informer.apply("MODIFIED", claim("b", 3, owners=["u2"]))
    assert informer.keys_by("owner", "u1") == {"ns/a"}, "an update moves the object"
    informer.replace(None, [claim("a", 1, owners=["u1"])], "4")  # b vanished across a re-list
    assert seen == [("ADDED", {"ns/b"}), ("MODIFIED", {"ns/b"}), ("DELETED", set())]
    assert informer.keys_by("owner", "u2") == set() and informer.by_index("owner", "nobody") == []
    assert informer.was_deleted("uid-b") and not informer.was_deleted("uid-a")


def test_an_index_function_that_fails_leaves_the_object_out_of_that_index_only() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    informer.add_index("owner", lambda obj: [str(obj["status"]["owners"][0])])
    informer.apply("ADDED", claim("a", 1))  # no owners: the function raises
    informer.apply("ADDED", claim("b", 1, owners=["u1"]))
    assert "ns/a" in informer and informer.keys_by("owner", "u1") == {"ns/b"}


async def test_the_watch_starts_where_the_list_ended_and_a_410_lists_again() -> None:
    script = Script(
        lists=[([claim("a", 5), claim("b", 6)], "10"), ([claim("c", 30)], "40")],
        watches=[
            # Changed after the LIST, before the watch connected: the watch replays it.
            [("MODIFIED", claim("a", 11)), ("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
            [],  # the server ended the watch: resume from the last version seen
            # The next resume is too old: b went away (and c came) while nobody watched.
            [("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})],
        ],
    )
    informer = Informer(script, RESOURCE_CLAIMS)
    seen = recording(informer)
    await informer.start()
    try:
        await asyncio.wait_for(script.idle.wait(), timeout=10)
    finally:
        await informer.stop()
    assert script.calls == [
        ("list", None),
        ("watch", "10"),
        ("watch", "15"),
        ("watch", "15"),
        ("list", None),
        ("watch", "40"),
    ]
    assert seen == [
        ("ADDED", "ns/a", "5"),
        ("ADDED", "ns/b", "6"),
        ("MODIFIED", "ns/a", "11"),
        ("ADDED", "ns/c", "30"),
        ("DELETED", "ns/a", "11"),
        ("DELETED", "ns/b", "6"),
    ]


async def test_a_primed_subscriber_gets_the_changes_made_while_it_primed_in_order() -> None:
    informer = Informer(Script(lists=[], watches=[]), RESOURCE_CLAIMS)
    informer.replace(None, [claim("a", 5), claim("b", 6)], "10")
    primed: list[str] = []
    seen: Changes = []

    async def prime(objs: list[Obj]) -> None:
        primed.extend(obj["metadata"]["name"] for obj in objs)
        # What happens while the consumer primes (in a thread, say) is held for it.
        informer.apply("DELETED", claim("a", 11))
        informer.apply("ADDED", claim("c", 12))
        await asyncio.sleep(0)

    def handler(type_: str, obj: Obj) -> None:
        seen.append((type_, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    await informer.subscribe_primed(handler, prime)
    informer.apply("MODIFIED", claim("b", 13))
    assert primed == ["a", "b"]
    assert seen == [("DELETED", "a", "11"), ("ADDED", "c", "12"), ("MODIFIED", "b", "13")]


async def test_a_failed_prime_leaves_no_subscriber_behind() -> None:
    informer = Informer(Script(lists=[], watches=[]), RESOURCE_CLAIMS)
    seen: Changes = []

    async def prime(objs: list[Obj]) -> None:
        raise RuntimeError("no")

    with contextlib.suppress(RuntimeError):
        await informer.subscribe_primed(lambda t, o: seen.append((t, "", "")), prime)
    informer.apply("ADDED", claim("a", 1))
    assert seen == []


async def test_a_list_is_trimmed_as_it_arrives_once_and_handlers_get_the_cached_form() -> None:
    trimmed: list[str] = []

    def trim(obj: Obj) -> Obj:
        trimmed.append(obj["metadata"]["name"])
        return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}

    def listed(name: str, rv: int) -> Obj:
        body = claim(name, rv)
        body["metadata"]["managedFields"] = [{"manager": "m"}]
        return body

    script = Script(
        lists=[([listed("a", 5), listed("b", 6)], "10")], watches=[[("MODIFIED", listed("a", 11))]]
    )
    informer = Informer(script, RESOURCE_CLAIMS, trim=trim)
    handed: list[Obj] = []
    informer.subscribe(lambda _type, obj: handed.append(obj))
    await informer.start()
    try:
        await asyncio.wait_for(script.idle.wait(), timeout=10)
    finally:
        await informer.stop()
    assert trimmed == ["a", "b", "a"]  # each listed item once (by the source), the event once
    assert [o["metadata"]["resourceVersion"] for o in handed] == ["5", "6", "11"]
    assert all("managedFields" not in o["metadata"] for o in handed)
    assert handed[-1] is informer.get("ns/a")
