"""The rules a placement must keep, checked here on their own, apart from both systems' code.

Why: agreeing with upstream is not enough to call a placement right (both could be
wrong the same way), and where upstream has a tie a different node is fine only if it
keeps every rule. So the differential checks each choice (draco's and upstream's; a
violation found in upstream's own choice means this checker is wrong) against the
rules of kube-scheduler's default profile, written from their documented semantics:

- ``node-selector``: ``nodeSelector`` and required node affinity (terms ORed, each
  term's expressions and fields ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt);
- ``taints``: every NoSchedule and NoExecute taint of the node tolerated;
- ``resources``: CPU and memory the pod requests (the larger of its containers' sum and
  any init container) fit beside the pods bound there (a resource the pod does not
  request is not checked), and one more pod fits the node's ``pods``;
- ``host-ports``: no bound pod on the node uses the same port and protocol on a
  conflicting host IP (equal, or either one the wildcard);
- ``pod-affinity``: for every required term the node has its topology key, and some
  pod matching *all* terms runs in the node's domain, unless no pod anywhere matches
  them all and the pod matches them itself;
- ``pod-anti-affinity``: for no required term a matching pod runs in the node's domain;
- ``existing-anti-affinity``: no bound pod's required anti-affinity term matches the
  pod within the node's domain of that term;
- ``topology-spread``: for every ``DoNotSchedule`` constraint the node has the key and
  (matching pods of the pod's namespace in the node's domain) + (1 if the pod matches)
  - (the fewest in any eligible domain, 0 when there are fewer than ``minDomains``)
  <= ``maxSkew``; eligible nodes have every such constraint's key and, by
  ``nodeAffinityPolicy`` (Honor by default) and ``nodeTaintsPolicy`` (Ignore by default),
  pass the pod's node selection and tolerate its taints;
- ``devices``: each result names a device of the node, free (no other claim has it), not
  named twice, matching its request's class and selectors, in the request's count; a
  ``firstAvailable`` request uses one alternative.

Terms select pods in their namespaces (``namespaces`` and those ``namespaceSelector``
selects, the owner's own when both are unset), by their label selector with
``matchLabelKeys`` (``key In [owner's value]``) and ``mismatchLabelKeys`` (``NotIn``)
merged in. :func:`expected_devices` is the first allocation in the allocator's search
order (requests in order, alternatives in order, devices in slice order), which both
allocators return on a node.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .generator import CLASSES, DRIVER, HOSTNAME, REQUEST_SELECTORS, Json

Result = tuple[str, str, str, str]  # request, driver, pool, device

_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTORS = {
    None: 1,
    "m": 0.001,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
}


def quantity(text: str | int) -> float:
    """A quantity of the forms the generator writes (``500m``, ``2``, ``4Gi``)."""
    match = _QUANTITY.match(str(text))
    if not match:
        raise ValueError(f"unsupported quantity {text!r}")
    return float(match[1]) * _FACTORS[match[2]]


@dataclass
class World:
    """A case's cluster as the systems were given it: node, namespace and pod bodies
    (rendered), the devices of each node in slice order, and those already allocated."""

    nodes: dict[str, Json]
    namespaces: dict[str, dict[str, str]]
    pods: list[Json]
    devices: dict[str, list[Json]] = field(default_factory=dict)
    in_use: set[tuple[str, str]] = field(default_factory=set)

    def pods_on(self, node: str) -> list[Json]:
        return [p for p in self.pods if p["spec"].get("nodeName") == node]


# --- selectors ----------------------------------------------------------------------------


def labels_match(selector: Json | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; None selects nothing, ``{}`` everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _node_requirement(requirement: Json, value: str | None) -> bool:
    operator, values = requirement["operator"], requirement.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        try:
            have, limit = int(value or ""), int(values[0])
        except ValueError:
            return False
        return have > limit if operator == "Gt" else have < limit
    raise ValueError(f"unknown operator {operator}")


def node_term_matches(term: Json, node: Json) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    return all(_node_requirement(r, labels.get(r["key"])) for r in expressions) and all(
        _node_requirement(r, node["metadata"]["name"] if r["key"] == "metadata.name" else None)
        for r in fields
    )


def node_selection_matches(pod: Json, node: Json) -> bool:
    """The pod's ``nodeSelector`` and required node affinity."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
        return False
    required = (
        ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    return required is None or any(node_term_matches(t, node) for t in required)


def tolerates(tolerations: Iterable[Json], taint: Json) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint["effect"]:
            continue
        operator = toleration.get("operator") or "Equal"
        if not toleration.get("key"):
            if operator == "Exists":
                return True
            continue
        if toleration["key"] != taint["key"]:
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated(pod: Json, node: Json) -> list[Json]:
    tolerations = pod["spec"].get("tolerations") or []
    return [
        t
        for t in node["spec"].get("taints") or []
        if t["effect"] in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)
    ]


# --- pod terms ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """A pod (anti-)affinity term of ``owner`` with its namespaces resolved."""

    selector: Json
    namespaces: frozenset[str]
    topology_key: str

    @classmethod
    def of(cls, term: Json, owner: Json, namespaces: Mapping[str, Mapping[str, str]]) -> Term:
        selector: Json = dict(term.get("labelSelector") or {})
        owner_labels = owner["metadata"].get("labels") or {}
        merged = list(selector.get("matchExpressions") or [])
        for key in term.get("matchLabelKeys") or []:
            if key in owner_labels:
                merged.append({"key": key, "operator": "In", "values": [owner_labels[key]]})
        for key in term.get("mismatchLabelKeys") or []:
            if key in owner_labels:
                merged.append({"key": key, "operator": "NotIn", "values": [owner_labels[key]]})
        if merged:
            selector["matchExpressions"] = merged
        if term.get("labelSelector") is None and not merged:
            selector = {"matchExpressions": [{"key": "never", "operator": "In", "values": []}]}
        chosen = set(term.get("namespaces") or [])
        if "namespaceSelector" in term and term["namespaceSelector"] is not None:
            chosen |= {
                n for n, labels in namespaces.items() if labels_match(term["namespaceSelector"], labels)
            }
        elif not chosen:
            chosen = {owner["metadata"]["namespace"]}
        return cls(selector, frozenset(chosen), term["topologyKey"])

    def matches(self, pod: Json) -> bool:
        return pod["metadata"]["namespace"] in self.namespaces and labels_match(
            self.selector, pod["metadata"].get("labels") or {}
        )


def required_terms(pod: Json, kind: str, world: World) -> list[Term]:
    part = (pod["spec"].get("affinity") or {}).get(kind) or {}
    return [
        Term.of(t, pod, world.namespaces)
        for t in part.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    ]


def _domain(world: World, node: str, key: str) -> str | None:
    return (world.nodes[node]["metadata"].get("labels") or {}).get(key)


# --- the rules ----------------------------------------------------------------------------


def _requests(pod: Json) -> dict[str, float]:
    def of(container: Json) -> dict[str, float]:
        requests = (container.get("resources") or {}).get("requests") or {}
        return {r: quantity(requests.get(r, 0)) for r in ("cpu", "memory")}

    total = {"cpu": 0.0, "memory": 0.0}
    for container in pod["spec"]["containers"]:
        for r, v in of(container).items():
            total[r] += v
    for container in pod["spec"].get("initContainers") or []:
        for r, v in of(container).items():
            total[r] = max(total[r], v)
    return total


def check_resources(world: World, pod: Json, node: str) -> list[str]:
    allocatable = world.nodes[node]["status"]["allocatable"]
    bound = world.pods_on(node)
    problems = []
    if len(bound) + 1 > int(allocatable["pods"]):
        problems.append(f"resources: {len(bound)} pods on {node}, which allows {allocatable['pods']}")
    want = _requests(pod)
    for resource in ("cpu", "memory"):
        used = sum(_requests(p)[resource] for p in bound)
        free = quantity(allocatable[resource]) - used
        if want[resource] > 0 and want[resource] > free + 1e-9:
            problems.append(f"resources: {resource} {want[resource]:g} requested, {free:g} free on {node}")
    return problems


def _host_ports(pod: Json) -> list[tuple[str, str, int]]:
    ports = []
    for container in pod["spec"]["containers"]:
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                ip = port.get("hostIP") or "0.0.0.0"
                ports.append((ip, port.get("protocol") or "TCP", int(port["hostPort"])))
    return ports


def check_host_ports(world: World, pod: Json, node: str) -> list[str]:
    used = [(p["metadata"]["name"], port) for p in world.pods_on(node) for port in _host_ports(p)]
    problems = []
    for ip, protocol, number in _host_ports(pod):
        for owner, (other_ip, other_protocol, other_number) in used:
            if (protocol, number) == (other_protocol, other_number) and (
                ip == other_ip or "0.0.0.0" in (ip, other_ip)
            ):
                problems.append(f"host-ports: {protocol}/{number} on {ip} taken by {owner} on {node}")
    return problems


def check_pod_affinity(world: World, pod: Json, node: str) -> list[str]:
    terms = required_terms(pod, "podAffinity", world)
    if not terms:
        return []
    if any(_domain(world, node, t.topology_key) is None for t in terms):
        return [f"pod-affinity: {node} lacks a topology key of {[t.topology_key for t in terms]}"]
    matching = [p for p in world.pods if all(t.matches(p) for t in terms)]
    in_domains = all(
        any(
            _domain(world, p["spec"]["nodeName"], t.topology_key) == _domain(world, node, t.topology_key)
            for p in matching
        )
        for t in terms
    )
    if in_domains:
        return []
    # The first of a group that has affinity to itself may go anywhere.
    anywhere = [
        p
        for p in matching
        if any(_domain(world, p["spec"]["nodeName"], t.topology_key) is not None for t in terms)
    ]
    if not anywhere and all(t.matches(pod) for t in terms):
        return []
    return [f"pod-affinity: no pod matching every required term in {node}'s domains"]


def check_pod_anti_affinity(world: World, pod: Json, node: str) -> list[str]:
    problems = []
    for term in required_terms(pod, "podAntiAffinity", world):
        domain = _domain(world, node, term.topology_key)
        if domain is None:
            continue
        for other in world.pods:
            if term.matches(other) and _domain(world, other["spec"]["nodeName"], term.topology_key) == domain:
                problems.append(
                    f"pod-anti-affinity: {other['metadata']['name']} in {term.topology_key}={domain}"
                )
    return problems


def check_existing_anti_affinity(world: World, pod: Json, node: str) -> list[str]:
    problems = []
    for other in world.pods:
        for term in required_terms(other, "podAntiAffinity", world):
            domain = _domain(world, node, term.topology_key)
            if (
                domain is not None
                and term.matches(pod)
                and _domain(world, other["spec"]["nodeName"], term.topology_key) == domain
            ):
                problems.append(
                    f"existing-anti-affinity: {other['metadata']['name']}'s term on {term.topology_key}={domain}"
                )
    return problems


def _spread_selector(constraint: Json, pod: Json) -> Json:
    selector: Json = dict(constraint.get("labelSelector") or {})
    labels = pod["metadata"].get("labels") or {}
    extra = {k: labels[k] for k in constraint.get("matchLabelKeys") or [] if k in labels}
    if extra:
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), **extra}
    return selector


def check_topology_spread(world: World, pod: Json, node: str) -> list[str]:
    hard = [
        c
        for c in pod["spec"].get("topologySpreadConstraints") or []
        if c["whenUnsatisfiable"] == "DoNotSchedule"
    ]
    if not hard:
        return []
    if any(_domain(world, node, c["topologyKey"]) is None for c in hard):
        return [f"topology-spread: {node} lacks a key of {[c['topologyKey'] for c in hard]}"]
    problems = []
    namespace = pod["metadata"]["namespace"]
    for constraint in hard:
        key, selector = constraint["topologyKey"], _spread_selector(constraint, pod)
        counts: dict[str, int] = {}
        for name, body in world.nodes.items():
            labels = body["metadata"].get("labels") or {}
            if any(c["topologyKey"] not in labels for c in hard):
                continue
            if (constraint.get("nodeAffinityPolicy") or "Honor") == "Honor" and not node_selection_matches(
                pod, body
            ):
                continue
            if (constraint.get("nodeTaintsPolicy") or "Ignore") == "Honor" and untolerated(pod, body):
                continue
            counts.setdefault(labels[key], 0)
            counts[labels[key]] += sum(
                1
                for p in world.pods_on(name)
                if p["metadata"]["namespace"] == namespace
                and not p["metadata"].get("deletionTimestamp")
                and labels_match(selector, p["metadata"].get("labels") or {})
            )
        # Fewer eligible domains than minDomains (1 by default): the global minimum is 0.
        fewest = 0 if len(counts) < constraint.get("minDomains", 1) else min(counts.values())
        domain = _domain(world, node, key)
        assert domain is not None
        own = 1 if labels_match(selector, pod["metadata"].get("labels") or {}) else 0
        skew = counts.get(domain, 0) + own - fewest
        if skew > constraint["maxSkew"]:
            problems.append(f"topology-spread: skew {skew} > {constraint['maxSkew']} on {key}={domain}")
    return problems


def check_node(world: World, pod: Json, node: str) -> list[str]:
    """Every rule but the devices, for ``pod`` on ``node``."""
    problems = []
    if not node_selection_matches(pod, world.nodes[node]):
        problems.append(f"node-selector: {node} does not match")
    problems += [f"taints: {t['key']}:{t['effect']} on {node}" for t in untolerated(pod, world.nodes[node])]
    problems += check_resources(world, pod, node)
    problems += check_host_ports(world, pod, node)
    problems += check_pod_affinity(world, pod, node)
    problems += check_pod_anti_affinity(world, pod, node)
    problems += check_existing_anti_affinity(world, pod, node)
    problems += check_topology_spread(world, pod, node)
    return problems


# --- devices ------------------------------------------------------------------------------


def device_matches(device: Json, class_name: str, selectors: Iterable[Json]) -> bool:
    _expression, model = CLASSES[class_name]
    attributes, capacity = device["attributes"], device["capacity"]
    if model is not None and attributes["model"]["string"] != model:
        return False
    for selector in selectors:
        kind, value = REQUEST_SELECTORS[selector["cel"]["expression"]]
        if kind == "memory>=" and quantity(capacity["memory"]["value"]) < quantity(value):
            return False
        if kind == "model!=" and attributes["model"]["string"] == value:
            return False
        if kind == "index<" and not attributes["index"]["int"] < value:
            return False
    return True


def _alternatives(request: Json) -> list[tuple[str, Json]]:
    """(result request name, what it asks) of each way to satisfy ``request``, in order."""
    if "firstAvailable" in request:
        return [(f"{request['name']}/{sub['name']}", sub) for sub in request["firstAvailable"]]
    return [(request["name"], request["exactly"])]


def expected_devices(world: World, claim: Json, node: str) -> list[Result] | None:
    """The first allocation of ``claim`` on ``node`` in the allocator's search order
    (None: it does not fit there)."""
    devices = world.devices.get(node, [])
    free = [d for d in devices if (node, d["name"]) not in world.in_use]

    def search(index: int, taken: frozenset[str]) -> list[Result] | None:
        if index == len(claim["requests"]):
            return []
        for name, asks in _alternatives(claim["requests"][index]):
            fits = [
                d["name"]
                for d in free
                if d["name"] not in taken
                and device_matches(d, asks["deviceClassName"], asks.get("selectors") or [])
            ]
            for chosen in itertools.combinations(fits, asks.get("count", 1)):
                rest = search(index + 1, taken | set(chosen))
                if rest is not None:
                    return [(name, DRIVER, node, d) for d in chosen] + rest
        return None

    found = search(0, frozenset())
    return sorted(found) if found is not None else None


def check_devices(world: World, claim: Json, node: str, results: list[Result]) -> list[str]:
    problems = []
    by_name = {d["name"]: d for d in world.devices.get(node, [])}
    seen: set[str] = set()
    for _request, driver, pool, device in results:
        if driver != DRIVER or pool != node or device not in by_name:
            problems.append(f"devices: {driver}/{pool}/{device} is not a device of {node}")
            continue
        if (node, device) in world.in_use:
            problems.append(f"devices: {device} of {node} is already allocated")
        if device in seen:
            problems.append(f"devices: {device} of {node} allocated twice")
        seen.add(device)
    for request in claim["requests"]:
        used = [r for r in results if r[0] == request["name"] or r[0].startswith(request["name"] + "/")]
        names = {r[0] for r in used}
        options = dict(_alternatives(request))
        if len(names) != 1 or next(iter(names)) not in options:
            problems.append(f"devices: request {request['name']} answered by {sorted(names)}")
            continue
        asks = options[next(iter(names))]
        if len(used) != asks.get("count", 1):
            problems.append(
                f"devices: request {request['name']} got {len(used)} devices, asks {asks.get('count', 1)}"
            )
        for _, _, _, device in used:
            if device in by_name and not device_matches(
                by_name[device], asks["deviceClassName"], asks.get("selectors") or []
            ):
                problems.append(f"devices: {device} does not match request {next(iter(names))}")
    return problems


def feasible_nodes(world: World, pod: Json, claim: Json) -> dict[str, list[Result]]:
    """Every node where the pod fits by every rule, with the devices it would get there."""
    fits = {}
    for node in sorted(world.nodes):
        if check_node(world, pod, node):
            continue
        devices = expected_devices(world, claim, node)
        if devices is not None:
            fits[node] = devices
    return fits


def world_of(
    *,
    nodes: list[Json],
    namespaces: list[Json],
    pods: list[Json],
    slices: list[Json],
    allocated: Iterable[Result],
) -> World:
    return World(
        nodes={n["metadata"]["name"]: n for n in nodes},
        namespaces={n["metadata"]["name"]: dict(n["metadata"].get("labels") or {}) for n in namespaces},
        pods=list(pods),
        devices={s["spec"]["nodeName"]: list(s["spec"]["devices"]) for s in slices},
        in_use={(pool, device) for _request, _driver, pool, device in allocated},
    )


def describe(world: World) -> dict[str, Any]:
    """What a mismatch report shows of the cluster: per node, its labels, taints, pods and free devices."""
    return {
        name: {
            "labels": body["metadata"].get("labels") or {},
            "taints": body["spec"].get("taints") or [],
            "pods": [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in world.pods_on(name)],
            "free devices": [
                d["name"] for d in world.devices.get(name, []) if (name, d["name"]) not in world.in_use
            ],
        }
        for name, body in sorted(world.nodes.items())
    }


__all__ = [
    "HOSTNAME",
    "Result",
    "World",
    "check_devices",
    "check_node",
    "describe",
    "expected_devices",
    "feasible_nodes",
    "world_of",
]
