"""A case as the API objects of each system, under the case's own names.

Many cases share one control plane at a time, so each case's objects are its own: nodes
``<tag>-n1``, namespaces ``<tag>-a`` and ``<tag>-b`` (labelled with the case), slices
``<tag>-n1``. The incoming pod gets one more node selector, the case's label, so that
neither kube-scheduler nor draco may pick another case's node. The rules it carries
cannot see the other cases either: a term's namespaces are the case's (a
``namespaceSelector`` gets the case's label added, ``{}`` included, which then selects the
case's namespaces), and topology spread counts pods of the pod's own namespace on the
nodes its node selector admits. Only ``nodeAffinityPolicy: Ignore`` counts every node of
the cluster: such a case runs alone (``generator.exclusive``).

Both systems get the same objects but for the DRA parts: upstream's pods name their
claims in ``spec.resourceClaims`` (and each container in ``resources.claims``), its
objects are ``resource.k8s.io/v1``; draco's pods name them in the annotation
``resource.draco.dev/claims`` and the incoming pod carries the gate
``resource.draco.dev/allocation``, its objects are ``resource.draco.dev/v1``. Claims are
named by the pod (``<pod>-dev``), never generated from templates.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .generator import CLASSES, DRIVER, HOSTNAME, Json

CASE_LABEL = "placement.diff.draco.dev/case"
CLAIMS_ANNOTATION = "resource.draco.dev/claims"
GATE = "resource.draco.dev/allocation"
CLAIM = "dev"


def node_name(tag: str, local: str) -> str:
    return f"{tag}-{local}"


def namespace_name(tag: str, local: str) -> str:
    return f"{tag}-{local}"


def classes() -> list[Json]:
    return [
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
        for name, (expression, _model) in CLASSES.items()
    ]


def namespaces(case: Json, tag: str) -> list[Json]:
    return [
        {"metadata": {"name": namespace_name(tag, local), "labels": {**labels, CASE_LABEL: tag}}}
        for local, labels in case["namespaces"].items()
    ]


def nodes(case: Json, tag: str) -> list[Json]:
    """Node bodies; their ``spec.taints`` must be written after the create (admission adds
    the not-ready taint to new Nodes, and no node controller lifts it here)."""
    bodies = []
    for node in case["nodes"]:
        name = node_name(tag, node["name"])
        allocatable = dict(node["allocatable"])
        bodies.append(
            {
                "metadata": {"name": name, "labels": {**node["labels"], HOSTNAME: name, CASE_LABEL: tag}},
                "spec": {"taints": copy.deepcopy(node["taints"])},
                "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
            }
        )
    return bodies


def slices(case: Json, tag: str) -> list[Json]:
    bodies = []
    for node in case["nodes"]:
        if not node["devices"]:
            continue
        name = node_name(tag, node["name"])
        bodies.append(
            {
                "metadata": {"name": name},
                "spec": {
                    "driver": DRIVER,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "nodeName": name,
                    "devices": [
                        {
                            "name": device["name"],
                            "attributes": {
                                "model": {"string": device["model"]},
                                "index": {"int": device["index"]},
                            },
                            "capacity": {"memory": {"value": device["memory"]}},
                        }
                        for device in node["devices"]
                    ],
                },
            }
        )
    return bodies


def _term(term: Json, tag: str) -> Json:
    term = copy.deepcopy(term)
    if "namespaces" in term:
        term["namespaces"] = [namespace_name(tag, n) for n in term["namespaces"]]
    if "namespaceSelector" in term:
        selector = term["namespaceSelector"]
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), CASE_LABEL: tag}
    return term


def _requirement(requirement: Json, tag: str) -> Json:
    requirement = copy.deepcopy(requirement)
    if requirement["key"] in (HOSTNAME, "metadata.name") and "values" in requirement:
        requirement["values"] = [node_name(tag, v) for v in requirement["values"]]
    return requirement


def _node_term(term: Json, tag: str) -> Json:
    return {kind: [_requirement(r, tag) for r in requirements] for kind, requirements in term.items()}


def pod_spec(spec: Json, tag: str) -> Json:
    """The case's scheduling fields under the case's names."""
    spec = copy.deepcopy(spec)
    if "nodeSelector" in spec:
        spec["nodeSelector"] = {
            key: node_name(tag, value) if key == HOSTNAME else value
            for key, value in spec["nodeSelector"].items()
        }
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required:
        required["nodeSelectorTerms"] = [_node_term(t, tag) for t in required["nodeSelectorTerms"]]
    for preferred in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        preferred["preference"] = _node_term(preferred["preference"], tag)
    for kind in ("podAffinity", "podAntiAffinity"):
        part = affinity.get(kind) or {}
        if "requiredDuringSchedulingIgnoredDuringExecution" in part:
            part["requiredDuringSchedulingIgnoredDuringExecution"] = [
                _term(t, tag) for t in part["requiredDuringSchedulingIgnoredDuringExecution"]
            ]
        for weighted in part.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
            weighted["podAffinityTerm"] = _term(weighted["podAffinityTerm"], tag)
    return spec


def _with_claim(body: Json, claim_name: str, system: str) -> None:
    if system == "upstream":
        body["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimName": claim_name}]
        for container in body["spec"]["containers"]:
            container.setdefault("resources", {})["claims"] = [{"name": CLAIM}]
    else:
        body["metadata"].setdefault("annotations", {})[CLAIMS_ANNOTATION] = json.dumps(
            [{"name": CLAIM, "resourceClaimName": claim_name}]
        )


def claim_name(pod: str) -> str:
    return f"{pod}-{CLAIM}"


def existing_pods(case: Json, tag: str, system: str) -> list[Json]:
    bodies = []
    for pod in case["existing"]:
        body: Json = {
            "metadata": {
                "name": pod["name"],
                "namespace": namespace_name(tag, pod["namespace"]),
                "labels": dict(pod["labels"]),
            },
            "spec": {**pod_spec(pod["spec"], tag), "nodeName": node_name(tag, pod["node"])},
        }
        if pod["devices"]:
            _with_claim(body, claim_name(pod["name"]), system)
        bodies.append(body)
    return bodies


def existing_claims(case: Json, tag: str) -> list[tuple[Json, Json]]:
    """(claim body, its status without ``reservedFor``) of each existing pod with devices;
    the status is written once the pod exists (its UID goes into ``reservedFor``)."""
    out = []
    for pod in case["existing"]:
        if not pod["devices"]:
            continue
        node = node_name(tag, pod["node"])
        body = {
            "metadata": {"name": claim_name(pod["name"]), "namespace": namespace_name(tag, pod["namespace"])},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": len(pod["devices"])}}
                    ]
                }
            },
        }
        status = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
                        for device in pod["devices"]
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        }
        out.append((body, status))
    return out


def incoming_claim(case: Json, tag: str) -> Json:
    pod = case["pod"]
    return {
        "metadata": {"name": claim_name(pod["name"]), "namespace": namespace_name(tag, pod["namespace"])},
        "spec": {"devices": copy.deepcopy(case["claim"])},
    }


def incoming_pod(case: Json, tag: str, system: str) -> Json:
    pod = case["pod"]
    spec = pod_spec(pod["spec"], tag)
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), CASE_LABEL: tag}
    body: Json = {
        "metadata": {
            "name": pod["name"],
            "namespace": namespace_name(tag, pod["namespace"]),
            "labels": dict(pod["labels"]),
        },
        "spec": spec,
    }
    _with_claim(body, claim_name(pod["name"]), system)
    if system != "upstream":
        body["spec"]["schedulingGates"] = [{"name": GATE}]
    return body


def device_results(claim: Json | None) -> list[tuple[str, str, str, str]]:
    """The allocated devices of a claim as (request, driver, pool, device), sorted."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    results: list[Any] = (allocation.get("devices") or {}).get("results") or []
    return sorted((r["request"], r["driver"], r["pool"], r["device"]) for r in results)
