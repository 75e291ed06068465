"""The view the allocation reads: devices held by written and in-flight allocations,
stale watch events, node usage, when waiting pods are woken, and its start-up path from
the claim informer (changes between the LIST and the watch, deletions never seen)."""

from __future__ import annotations

import asyncio
from typing import Any

from draco.allocator import NoPlacement, Placement, place
from draco.allocator.inventory import as_dict
from draco.api.constants import SCHEDULING_GATE
from draco.kube.client import RESOURCE_CLAIMS
from draco.kube.informer import Informer
from draco.scheduling.view import ClusterView, pinned_node
from tests.unit.kube.test_informer import Script

DRIVER = "gpu.example.com"


def device_class() -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def node_slice(node: str, devices: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-slice"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
    }


def claim(name: str, *, rv: int = 1, devices: tuple[str, ...] = (), uid: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if devices:
        status["allocation"] = {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": d} for d in devices]
            }
        }
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": status,
    }


def cluster(devices: int = 2) -> ClusterView:
    view = ClusterView()
    view.upsert_class(device_class())
    view.upsert_slice(node_slice("n1", devices))
    view.upsert_node(node("n1"))
    view.synced = True
    return view


def choose(view: ClusterView, name: str) -> Placement | NoPlacement:
    return place(inventory=view.inventory(), nodes=[view.allocator_node("n1")], claims=[claim(name)])


def test_written_allocations_hold_their_devices() -> None:
    view = cluster(devices=1)
    view.upsert_claim(claim("taken", rv=5, devices=("gpu-0",)))
    assert isinstance(choose(view, "other"), NoPlacement)
    view.upsert_claim(claim("taken", rv=6))
    assert isinstance(choose(view, "other"), Placement)


def test_in_flight_allocations_hold_devices_until_abandoned() -> None:
    view = cluster(devices=1)
    first = choose(view, "a")
    assert isinstance(first, Placement)
    view.begin({key: as_dict(result) for key, result in first.results.items()})
    assert isinstance(choose(view, "b"), NoPlacement)
    # A stale event of the claim (still unallocated) must not release the hold.
    view.upsert_claim(claim("a", rv=1))
    assert isinstance(choose(view, "b"), NoPlacement)
    view.abandon(["ns/a"])
    assert isinstance(choose(view, "b"), Placement)


def test_a_committed_write_is_not_undone_by_an_older_event() -> None:
    view = cluster(devices=1)
    view.begin(
        {
            "ns/a": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
                }
            }
        }
    )
    view.commit(claim("a", rv=10, devices=("gpu-0",)))
    assert view.in_flight() == set()
    view.upsert_claim(claim("a", rv=9))  # the watch catching up with an older version
    assert isinstance(choose(view, "b"), NoPlacement)
    view.upsert_claim(claim("a", rv=11))  # deallocated later
    assert isinstance(choose(view, "b"), Placement)


def test_a_recreated_claim_with_a_lower_version_is_still_seen() -> None:
    view = cluster(devices=1)
    view.upsert_claim(claim("a", rv=10, devices=("gpu-0",)))
    view.delete_claim("ns/a")
    view.upsert_claim(claim("a", rv=3, devices=("gpu-0",), uid="another"))
    assert isinstance(choose(view, "b"), NoPlacement)


def test_held_devices_lists_every_holder() -> None:
    view = cluster(devices=2)
    view.upsert_claim(claim("a", rv=2, devices=("gpu-0",)))
    view.begin(
        {
            "ns/b": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-1"}]
                }
            }
        }
    )
    assert view.held_devices() == {(DRIVER, "n1", "gpu-0"): ["ns/a"], (DRIVER, "n1", "gpu-1"): ["ns/b"]}


def test_slice_changes_rebuild_the_inventory_with_allocations_kept() -> None:
    view = cluster(devices=1)
    view.upsert_claim(claim("a", rv=2, devices=("gpu-0",)))
    assert isinstance(choose(view, "b"), NoPlacement)
    view.upsert_slice(node_slice("n1", 2))
    result = choose(view, "b")
    assert isinstance(result, Placement)
    devices = [r["device"] for r in as_dict(result.results["ns/b"])["devices"]["results"]]
    assert devices == ["gpu-1"]


def pod(
    name: str,
    *,
    node_name: str | None = None,
    pinned: str | None = None,
    gated: bool = False,
    phase: str = "Pending",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if pinned:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pinned]}]}
                    ]
                }
            }
        }
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec, "status": {"phase": phase}}


def test_pinned_node_of_pods() -> None:
    assert pinned_node(pod("a", node_name="n1")) == "n1"
    assert pinned_node(pod("a", pinned="n2")) == "n2"
    assert pinned_node(pod("a", pinned="n2", gated=True)) is None
    assert pinned_node(pod("a")) is None


def test_node_requests_count_placed_and_promised_pods_once() -> None:
    view = cluster()

    def used() -> tuple[int, int]:
        requested = view.requested("n1")
        return requested.get("cpu", 0), requested.get("pods", 0)

    view.upsert_pod(pod("a", node_name="n1"))
    view.promise_node("ns/b", view.pod_info(pod("b"), node="n1"))
    assert used() == (2000, 2)
    view.upsert_pod(pod("b", pinned="n1"))  # the pin landed: promise and placement are one pod
    view.withdraw_promise("ns/b")
    assert used() == (2000, 2)
    view.upsert_pod(pod("a", node_name="n1", phase="Succeeded"))
    assert used() == (1000, 1)
    view.delete_pod("ns/b")
    assert used() == (0, 0)


def test_waiting_pods_are_woken_by_more_room_only() -> None:
    view = cluster()
    woken: list[int] = []
    view.on_capacity(lambda: woken.append(1))
    view.upsert_claim(claim("a", rv=2, devices=("gpu-0",)))
    view.begin({"ns/b": {"devices": {"results": []}}})
    view.commit(claim("b", rv=3, devices=("gpu-1",)))
    assert woken == [], "allocations growing never wake anyone"
    view.upsert_claim(claim("a", rv=4))
    assert len(woken) == 1
    view.upsert_slice(node_slice("n1", 3))
    view.upsert_node(node("n2"))
    assert len(woken) == 3
    view.upsert_slice(node_slice("n1", 3))  # unchanged
    assert len(woken) == 3


def test_an_attempt_can_tell_that_room_was_freed_while_it_ran() -> None:
    """A pod on its first attempt is not among the waiting pods a release wakes: the
    attempt compares ``capacity_changes`` from before its search with the count after."""
    view = cluster(devices=1)
    view.upsert_claim(claim("a", rv=2, devices=("gpu-0",)))
    seen = view.capacity_changes
    view.freeze()  # the attempt's search
    assert isinstance(choose(view, "b"), NoPlacement)
    view.upsert_claim(claim("a", rv=3))  # deallocated meanwhile: queued
    assert view.capacity_changes == seen, "nothing changes under the search"
    view.thaw()
    assert view.capacity_changes == seen + 1
    seen = view.capacity_changes
    view.begin({"ns/b": {"devices": {"results": []}}})
    view.commit(claim("b", rv=4, devices=("gpu-0",)))
    assert view.capacity_changes == seen, "an allocation growing is no room freed"
    view.delete_claim("ns/b")
    assert view.capacity_changes == seen + 1


def test_a_frozen_view_queues_changes_and_applies_them_in_order_on_thaw() -> None:
    view = cluster(devices=1)
    inventory = view.inventory()
    view.freeze()
    view.upsert_claim(claim("taken", rv=5, devices=("gpu-0",)))
    view.upsert_slice(node_slice("n2", 1))
    view.freeze()  # nested: only the outermost thaw applies
    view.upsert_claim(claim("taken", rv=6))
    view.thaw()
    # Nothing changed under a search reading the view.
    assert view.frozen
    assert view.current_inventory() is inventory
    assert "ns/taken" not in view.claims
    assert isinstance(choose(view, "other"), Placement)
    view.thaw()
    assert not view.frozen
    # Applied in order: allocated at rv 5, then released at rv 6; the slice is new.
    assert "ns/taken" not in view.claims
    assert "n2-slice" in view.slices
    assert view.current_inventory() is None
    assert isinstance(choose(view, "other"), Placement)


def test_a_choice_marked_right_after_thawing_holds_its_devices() -> None:
    view = cluster(devices=1)
    view.freeze()
    chosen = choose(view, "a")
    view.upsert_claim(claim("b", rv=3))  # an event during the search: queued
    view.thaw()
    assert isinstance(chosen, Placement)
    view.begin({key: as_dict(result) for key, result in chosen.results.items()})
    assert isinstance(choose(view, "b"), NoPlacement)


def fed_by(informer: Informer, view: ClusterView) -> None:
    """Subscribe ``view`` the way the scheduler does (``Scheduling.on_claim``)."""

    def handler(type_: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if type_ == "DELETED":
            view.delete_claim(f"{meta['namespace']}/{meta['name']}")
        else:
            view.upsert_claim(obj)

    informer.subscribe(handler)


async def test_start_up_converges_through_changes_between_list_and_watch_and_unseen_deletions() -> None:
    script = Script(
        # What the operator lists as it starts: both devices held.
        lists=[
            ([claim("a", rv=5, devices=("gpu-0",)), claim("b", rv=6, devices=("gpu-1",))], "10"),
            ([], "40"),
        ],
        watches=[
            # a was deallocated and deleted after the LIST, before the watch connected: the
            # watch starts at the LIST's version, so the API replays both changes.
            [("MODIFIED", claim("a", rv=11)), ("DELETED", claim("a", rv=12))],
            # Then the watch is too old to resume: b was deallocated and deleted meanwhile
            # and no event of it will ever come; the LIST after the 410 no longer has it.
            [("ERROR", {"kind": "Status", "code": 410})],
        ],
    )
    informer = Informer(script, RESOURCE_CLAIMS)
    view = cluster(devices=2)
    view.claim_cache = informer
    woken: list[int] = []
    view.on_capacity(lambda: woken.append(1))
    await informer.start()
    # The scheduler subscribes after the lifecycle started the informer: the cache now,
    # then every change.
    fed_by(informer, view)
    try:
        await asyncio.wait_for(script.idle.wait(), timeout=10)
    finally:
        await informer.stop()
    assert script.calls[:2] == [("list", None), ("watch", "10")]
    assert view.held_devices() == {}
    assert view.claims == {}
    assert len(woken) == 2, "each freed device wakes the waiting pods"
    assert isinstance(choose(view, "c"), Placement)


def test_a_late_answer_to_our_write_does_not_revive_a_deleted_claim() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    view = cluster(devices=1)
    view.claim_cache = informer
    fed_by(informer, view)
    informer.replace(None, [claim("a", rv=5)], "5")
    view.begin(
        {
            "ns/a": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
                }
            }
        }
    )
    assert isinstance(choose(view, "b"), NoPlacement)
    # The claim is deallocated and deleted by the lifecycle before our write's answer is
    # handled (the write itself landed in between).
    informer.apply("MODIFIED", claim("a", rv=7))
    informer.apply("DELETED", claim("a", rv=8))
    view.commit(claim("a", rv=6, devices=("gpu-0",)))
    assert view.in_flight() == set()
    assert view.held_devices() == {}
    assert isinstance(choose(view, "b"), Placement)


def test_our_write_counts_at_once_and_reaches_every_subscriber() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    view = cluster(devices=1)
    view.claim_cache = informer
    fed_by(informer, view)
    others: list[str] = []
    informer.subscribe(lambda type_, obj: others.append(obj["metadata"]["resourceVersion"]))
    informer.replace(None, [claim("a", rv=5)], "5")
    view.commit(claim("a", rv=6, devices=("gpu-0",)))
    assert others == ["5", "6"]
    assert view.held_devices() == {(DRIVER, "n1", "gpu-0"): ["ns/a"]}
    informer.apply("MODIFIED", claim("a", rv=6, devices=("gpu-0",)))  # the echo changes nothing
    assert others == ["5", "6"]


def test_a_commit_deferred_by_a_frozen_view_counts_what_the_cache_says_on_thaw() -> None:
    informer = Informer(Script([], []), RESOURCE_CLAIMS)
    view = cluster(devices=1)
    view.claim_cache = informer
    fed_by(informer, view)
    informer.replace(None, [claim("a", rv=5)], "5")
    chosen = choose(view, "a")
    assert isinstance(chosen, Placement)
    view.begin({key: as_dict(result) for key, result in chosen.results.items()})
    view.freeze()  # another pod's search runs
    view.commit(claim("a", rv=6, devices=("gpu-0",)))  # our write's answer: queued
    informer.apply("MODIFIED", claim("a", rv=7))  # deallocated and deleted meanwhile
    informer.apply("DELETED", claim("a", rv=8))
    assert isinstance(choose(view, "b"), NoPlacement), "nothing changes under the search"
    view.thaw()
    assert view.in_flight() == set()
    assert view.held_devices() == {}
    assert isinstance(choose(view, "b"), Placement)


def test_the_view_sums_scoring_requests_per_node() -> None:
    """LeastAllocated's non-zero requests (a container without requests counts 100m, 200Mi)."""
    view = cluster()
    view.upsert_pod(pod("a", node_name="n1"))
    bare = pod("b", node_name="n1")
    bare["spec"]["containers"] = [{"name": "c", "image": "x"}]
    view.upsert_pod(bare)
    # a asks for 1 cpu and no memory; b for nothing.
    assert view.requested_nonzero("n1") == (1000 + 100, 2 * 200 * 1024 * 1024)
    view.delete_pod("ns/a")
    view.delete_pod("ns/b")
    assert view.requested_nonzero("n1") == (0, 0)


def test_the_view_counts_the_nodes_holding_each_image() -> None:
    view = ClusterView()
    with_images = node("n1")
    with_images["status"]["images"] = [{"names": ["app:1", "app@sha256:x"], "sizeBytes": 500}]
    view.upsert_node(with_images)  # type: ignore[arg-type]
    other = node("n2")
    other["status"]["images"] = [{"names": ["app:1"], "sizeBytes": 700}]
    view.upsert_node(other)  # type: ignore[arg-type]
    assert view.image_state("app:1") == (500, 2)  # the size first listed
    assert view.image_state("app@sha256:x") == (500, 1)
    view.upsert_node(node("n1"))  # type: ignore[arg-type]  # the image was removed from n1
    assert view.image_state("app:1") == (500, 1)
    assert view.image_state("app@sha256:x") is None
    view.delete_node("n2")
    assert view.image_state("app:1") is None


def test_the_view_answers_volume_attachments_per_node() -> None:
    view = ClusterView()
    attachment = {"metadata": {"name": "va"}, "spec": {"nodeName": "n1", "attacher": "d"}}
    view.upsert_storage("volumeattachments", "va", attachment)
    assert list(view.volume_attachments("n1")) == [attachment]
    assert list(view.volume_attachments("n2")) == []
    view.delete_storage("volumeattachments", "va")
    assert list(view.volume_attachments("n1")) == []
    capacity = {"metadata": {"name": "c", "namespace": "kube-system"}, "storageClassName": "local"}
    view.upsert_storage("csistoragecapacities", "kube-system/c", capacity)
    assert list(view.csi_storage_capacities()) == [capacity]
