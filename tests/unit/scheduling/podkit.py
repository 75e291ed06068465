"""Builders for the placement-rule tests: pods and nodes as the API writes them, parsed
by the same code the operator uses (`pod_info`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from draco.scheduling.cluster import Snapshot
from draco.scheduling.framework import FilterRule, NodeFilter, Refusal, ScoreRule
from draco.scheduling.labels import LabelSelector
from draco.scheduling.nodefit import NodeInfo, NodeTaint
from draco.scheduling.podinfo import PodInfo, pod_info

Obj = dict[str, Any]

_uids = itertools.count(1)


def node(name: str, labels: Mapping[str, str] | None = None, *, taints: Sequence[NodeTaint] = ()) -> NodeInfo:
    return NodeInfo(name=name, labels=dict(labels or {}), taints=tuple(taints))


def selector(
    match: Mapping[str, str] | None = None, *expressions: tuple[str, str, Sequence[str]]
) -> dict[str, Any]:
    """A ``LabelSelector`` body: ``matchLabels`` and (key, operator, values) expressions."""
    body: dict[str, Any] = {}
    if match is not None:
        body["matchLabels"] = dict(match)
    if expressions:
        body["matchExpressions"] = [
            {"key": key, "operator": operator, **({"values": list(values)} if values else {})}
            for key, operator, values in expressions
        ]
    return body


def term(topology_key: str, label_selector: Mapping[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """A ``PodAffinityTerm``; ``extra`` in the API's spelling (namespaces, namespaceSelector,
    matchLabelKeys, mismatchLabelKeys)."""
    body: dict[str, Any] = {"topologyKey": topology_key, **extra}
    if label_selector is not None:
        body["labelSelector"] = dict(label_selector)
    return body


def weighted(weight: int, affinity_term: Mapping[str, Any]) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": dict(affinity_term)}


def spread(
    max_skew: int,
    topology_key: str,
    when: str,
    label_selector: Mapping[str, Any] | None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``TopologySpreadConstraint``; ``extra`` in the API's spelling."""
    body: dict[str, Any] = {
        "maxSkew": max_skew,
        "topologyKey": topology_key,
        "whenUnsatisfiable": when,
        **extra,
    }
    if label_selector is not None:
        body["labelSelector"] = dict(label_selector)
    return body


def pod_body(
    name: str,
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    affinity: Sequence[Mapping[str, Any]] = (),
    anti_affinity: Sequence[Mapping[str, Any]] = (),
    preferred: Sequence[Mapping[str, Any]] = (),
    preferred_anti: Sequence[Mapping[str, Any]] = (),
    constraints: Sequence[Mapping[str, Any]] = (),
    terminating: bool = False,
    owner: Mapping[str, Any] | None = None,
    node_affinity: Mapping[str, Any] | None = None,
    **spec: Any,
) -> Obj:
    """A Pod in its JSON shape: ``affinity``..``preferred_anti`` are pod (anti-)affinity
    terms, ``node_affinity`` the ``nodeAffinity`` section, ``owner`` an owner reference;
    ``spec`` adds fields to ``spec`` as written."""
    metadata: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{next(_uids)}",
        "labels": dict(labels or {}),
    }
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    body_spec: Obj = {"containers": [{"name": "c", "image": "x"}], **spec}
    pod_affinity: Obj = {}
    if node_affinity is not None:
        pod_affinity["nodeAffinity"] = dict(node_affinity)
    if affinity or preferred:
        pod_affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": list(affinity),
            "preferredDuringSchedulingIgnoredDuringExecution": list(preferred),
        }
    if anti_affinity or preferred_anti:
        pod_affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": list(anti_affinity),
            "preferredDuringSchedulingIgnoredDuringExecution": list(preferred_anti),
        }
    if pod_affinity:
        body_spec["affinity"] = pod_affinity
    if constraints:
        body_spec["topologySpreadConstraints"] = list(constraints)
    return {"metadata": metadata, "spec": body_spec}


def incoming(name: str = "p", **kwargs: Any) -> PodInfo:
    """The pod being placed: its placement record."""
    return pod_info(pod_body(name, **kwargs))


def placed(name: str, on: str, **kwargs: Any) -> PodInfo:
    return pod_info(pod_body(name, **kwargs), node=on)


def cluster(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo] = (),
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    services: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    controllers: Mapping[str, LabelSelector] | None = None,
) -> Snapshot:
    return Snapshot(
        nodes={n.name: n for n in nodes},
        pods=pods,
        namespaces=namespaces if namespaces is not None else {"default": {}},
        services=services or {},
        controllers=controllers or {},
    )


def verdicts(rule: FilterRule, pod: PodInfo, state: Snapshot) -> dict[str, str | None] | Refusal | None:
    """Filter's answer for every node of ``state`` (None: PreFilter had nothing to check)."""
    prepared = rule(pod, state)
    if prepared is None or isinstance(prepared, Refusal):
        return prepared
    check: NodeFilter = prepared
    return {name: check.unfit(n) for name, n in state.nodes.items()}


def scores(
    rule: ScoreRule, pod: PodInfo, state: Snapshot, nodes: Sequence[str] | None = None
) -> dict[str, int] | None:
    """Normalised scores of ``nodes`` (default: every node); None when the rule skipped."""
    feasible = [state.nodes[name] for name in (nodes if nodes is not None else state.nodes)]
    prepared = rule(pod, state, feasible)
    if prepared is None:
        return None
    return {n.name: score for n, score in zip(feasible, prepared, strict=True)}
