"""The operator's view aggregates placed pods' affinity terms by term
(`ClusterView.affinity_terms`); the inter-pod rules over it must answer exactly as over
the pods one by one (a `Snapshot`, which has no such index)."""

from __future__ import annotations

import random
from typing import Any

from draco.scheduling import interpodaffinity
from draco.scheduling.cluster import AffinityTermIndex, Snapshot
from draco.scheduling.nodefit import NodeInfo
from draco.scheduling.podinfo import pod_info
from draco.scheduling.view import ClusterView

KEYS = ("kubernetes.io/hostname", "zone")


def node_body(index: int) -> dict[str, Any]:
    name = f"n{index}"
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": f"z{index % 3}"}},
        "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}},
    }


def term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def affinity(rng: random.Random, templates: dict[int, Any]) -> dict[str, Any] | None:
    """One of a few shared affinity objects (as pods of one template share them)."""
    choice = rng.randrange(6)
    if choice == 0:
        return None
    if choice not in templates:
        app, key = f"a{choice % 3}", KEYS[choice % 2]
        templates[choice] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(app, key)]},
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term(f"a{(choice + 1) % 3}", key)]
                if choice % 2
                else [],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": choice * 10, "podAffinityTerm": term(f"a{(choice + 2) % 3}", KEYS[0])}
                ],
            },
        }
    found: dict[str, Any] = templates[choice]
    return found


def test_the_term_index_answers_as_the_pods_do() -> None:
    compared: list[str] = []
    for seed in range(20):
        compare(seed, compared)
    # The random cases must reach filters and scores that say something.
    assert compared.count("filter") > 10 and compared.count("score") > 10, compared


def compare(seed: int, compared: list[str]) -> None:
    rng = random.Random(seed)
    view = ClusterView()
    nodes = [node_body(i) for i in range(6)]
    for body in nodes:
        view.upsert_node(body)  # type: ignore[arg-type]
    templates: dict[int, Any] = {}
    labels = {f"a{i}": {"app": f"a{i}"} for i in range(3)}
    placed = []
    for index in range(40):
        spec: dict[str, Any] = {"nodeName": f"n{rng.randrange(7)}", "containers": [{"name": "c"}]}  # n6: gone
        chosen = affinity(rng, templates)
        if chosen is not None:
            spec["affinity"] = chosen
        body = {
            "metadata": {
                "name": f"p{index}",
                "namespace": "ns",
                "uid": f"u{index}",
                "labels": labels[f"a{index % 3}"],
            },
            "spec": spec,
            "status": {"phase": "Running"},
        }
        view.upsert_pod(body)  # type: ignore[arg-type]
        if index % 7 == 0:
            view.delete_pod(f"ns/p{index}")
        else:
            placed.append(pod_info(body, node=spec["nodeName"]))
    assert isinstance(view, AffinityTermIndex)
    snapshot = Snapshot(
        nodes={n["metadata"]["name"]: view.nodes[n["metadata"]["name"]] for n in nodes}, pods=placed
    )
    infos: list[NodeInfo] = [view.nodes[f"n{i}"] for i in range(6)]
    for index in range(6):
        incoming = {
            "metadata": {
                "name": f"new{index}",
                "namespace": "ns",
                "uid": f"new{index}",
                "labels": labels[f"a{index % 3}"],
            },
            "spec": {
                "containers": [{"name": "c"}],
                **({"affinity": a} if (a := affinity(rng, templates)) else {}),
            },
        }
        pod = pod_info(incoming)
        indexed = interpodaffinity.prepare_filter(pod, view)
        walked = interpodaffinity.prepare_filter(pod, snapshot)
        assert (indexed is None) == (walked is None)
        if indexed is not None and walked is not None:
            assert [indexed.unfit(n) for n in infos] == [walked.unfit(n) for n in infos]
            compared.append("filter")
        scored = interpodaffinity.prepare_score(pod, view, infos)
        expected = interpodaffinity.prepare_score(pod, snapshot, infos)
        assert (scored is None) == (expected is None)
        if scored is not None and expected is not None:
            assert list(scored) == list(expected)
            compared.append("score")
