"""Random placement cases from a seed: a small cluster in use and one incoming pod.

A case is system-neutral JSON with case-local names (nodes ``n1``..., namespaces ``a`` and
``b``, pods ``e1``... and ``p``); :mod:`.render` turns it into the API objects of each
system. It holds:

- 2 to 6 nodes with ``kubernetes.io/hostname``, usually ``topology.kubernetes.io/zone``
  (1 to 3 zones), sometimes ``example.com/rack``, ``example.com/disk`` and a numeric
  ``example.com/gen``; taints (NoSchedule, PreferNoSchedule, NoExecute); allocatable CPU,
  memory and pods (some nodes nearly full); 0 to 4 GPUs each (models a100, h100, l4 with
  memory capacities), published in one ResourceSlice per node;
- existing pods already bound to those nodes: labels from a small vocabulary (so that
  selectors match some of them), CPU/memory requests, host ports, sometimes their own
  required or preferred pod (anti-)affinity, and devices (a claim already allocated to
  1 or 2 devices of their node and reserved for them);
- the incoming pod: labels, requests (init containers too), host ports, a node selector,
  required and preferred node affinity (every operator, ``matchFields``), tolerations,
  required and preferred pod affinity and anti-affinity (namespaces, ``namespaceSelector``,
  ``matchLabelKeys``, ``mismatchLabelKeys``), topology spread (``DoNotSchedule`` and
  ``ScheduleAnyway``, ``maxSkew``, ``minDomains``, ``nodeAffinityPolicy``,
  ``nodeTaintsPolicy``, ``matchLabelKeys``), and one claim of one or two requests (exact
  counts, class and request selectors, prioritized lists ``firstAvailable``).

The vocabularies are small on purpose: a rule only tells the systems apart when it
decides something, so most cases are crowded (labels that match, nodes near full, few
free devices). Every pod has priority 0: kube-scheduler preempts nothing.
"""

from __future__ import annotations

import random
from typing import Any

Json = dict[str, Any]

DRIVER = "gpu.example.com"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
DISK = "example.com/disk"
GEN = "example.com/gen"
TOPOLOGY_KEYS = (HOSTNAME, ZONE, RACK)

#: Device models and their memory.
MODELS = {"a100": ("40Gi", "80Gi"), "h100": ("80Gi",), "l4": ("24Gi",)}

#: DeviceClasses, created once per control plane: name → (CEL selector, model or None).
CLASSES: dict[str, tuple[str, str | None]] = {
    "gpu": (f'device.driver == "{DRIVER}"', None),
    **{
        f"gpu-{model}": (
            f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "{model}"',
            model,
        )
        for model in MODELS
    },
}

#: Request selectors: CEL → what it means, for the checker (``rules.device_matches``).
REQUEST_SELECTORS = {
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0': ("memory>=", "80Gi"),
    f'device.attributes["{DRIVER}"].model != "l4"': ("model!=", "l4"),
    f'device.attributes["{DRIVER}"].index < 2': ("index<", 2),
}

APPS = ("web", "db", "cache")
TIERS = ("front", "back")
VERSIONS = ("v1", "v2")
TAINT_KEYS = ("example.com/dedicated", "example.com/maintenance")
TAINT_VALUES = ("gpu", "batch")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class Generator:
    """One case per call of :meth:`case`, fully determined by the seed and the index."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def case(self, index: int) -> Json:
        rng = random.Random(f"{self.seed}-{index}")
        zones = rng.choice((1, 2, 3))
        nodes = [
            self._node(rng, i + 1, zones) for i in range(rng.choices((2, 3, 4, 5, 6), (2, 4, 4, 2, 1))[0])
        ]
        taken: dict[str, set[str]] = {n["name"]: set() for n in nodes}
        existing = [
            self._existing(rng, i + 1, nodes, taken)
            for i in range(rng.choices(range(9), (1, 2, 3, 3, 3, 2, 2, 1, 1))[0])
        ]
        pod, claim = self._incoming(rng, nodes, existing)
        return {
            "id": f"{self.seed}-{index}",
            "namespaces": {"a": {"team": "a"}, "b": {"team": "b"}},
            "nodes": nodes,
            "existing": existing,
            "pod": pod,
            "claim": claim,
        }

    # --- nodes ------------------------------------------------------------------------------

    def _node(self, rng: random.Random, number: int, zones: int) -> Json:
        labels: Json = {}
        if rng.random() < 0.9:
            labels[ZONE] = f"z{rng.randint(1, zones)}"
        if rng.random() < 0.5:
            labels[RACK] = rng.choice(("r1", "r2"))
        if rng.random() < 0.5:
            labels[DISK] = rng.choice(("ssd", "hdd"))
        if rng.random() < 0.5:
            labels[GEN] = rng.choice(("3", "4", "5"))
        taints = []
        if rng.random() < 0.25:
            for key in rng.sample(TAINT_KEYS, rng.choice((1, 1, 2))):
                taint: Json = {"key": key, "effect": rng.choices(EFFECTS, (2, 2, 1))[0]}
                if rng.random() < 0.7:
                    taint["value"] = rng.choice(TAINT_VALUES)
                taints.append(taint)
        devices = []
        for d in range(rng.choices((0, 1, 2, 3, 4), (1, 2, 4, 4, 3))[0]):
            model = rng.choice(tuple(MODELS))
            devices.append(
                {"name": f"gpu-{d}", "model": model, "index": d, "memory": rng.choice(MODELS[model])}
            )
        return {
            "name": f"n{number}",
            "labels": labels,
            "taints": taints,
            "allocatable": {
                "cpu": rng.choice(("2", "4", "8", "16")),
                "memory": rng.choice(("4Gi", "8Gi", "16Gi", "32Gi")),
                "pods": rng.choices(("3", "4", "110"), (1, 1, 6))[0],
            },
            "devices": devices,
        }

    # --- pods -------------------------------------------------------------------------------

    def _labels(self, rng: random.Random) -> Json:
        labels: Json = {}
        if rng.random() < 0.85:
            labels["app"] = rng.choice(APPS)
        if rng.random() < 0.5:
            labels["tier"] = rng.choice(TIERS)
        if rng.random() < 0.4:
            labels["version"] = rng.choice(VERSIONS)
        return labels

    def _container(self, rng: random.Random, name: str, *, ports: bool) -> Json:
        requests: Json = {}
        cpu = rng.choices(("0", "250m", "500m", "1", "1500m", "2", "3"), (2, 3, 3, 3, 2, 1, 1))[0]
        memory = rng.choices(("0", "256Mi", "1Gi", "2Gi", "4Gi", "6Gi"), (2, 3, 3, 2, 1, 1))[0]
        if cpu != "0":
            requests["cpu"] = cpu
        if memory != "0":
            requests["memory"] = memory
        container: Json = {"name": name, "image": "registry.invalid/none"}
        if requests:
            container["resources"] = {"requests": requests}
        if ports and rng.random() < 0.3:
            port: Json = {"containerPort": 8080, "hostPort": rng.choice((8080, 8080, 9090))}
            if rng.random() < 0.2:
                port["protocol"] = "UDP"
            if rng.random() < 0.15:
                port["hostIP"] = rng.choice(("127.0.0.1", "10.0.0.1"))
            container["ports"] = [port]
        return container

    def _selector(self, rng: random.Random) -> Json:
        """A label selector over the pod label vocabulary."""
        kind = rng.choices(("app", "app-in", "tier", "app-tier", "exists"), (5, 2, 2, 2, 1))[0]
        if kind == "app":
            return {"matchLabels": {"app": rng.choice(APPS)}}
        if kind == "app-in":
            return {
                "matchExpressions": [{"key": "app", "operator": "In", "values": sorted(rng.sample(APPS, 2))}]
            }
        if kind == "tier":
            return {"matchLabels": {"tier": rng.choice(TIERS)}}
        if kind == "app-tier":
            return {
                "matchLabels": {"app": rng.choice(APPS)},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": [rng.choice(TIERS)]}],
            }
        return {"matchExpressions": [{"key": "app", "operator": "Exists"}]}

    def _pod_term(self, rng: random.Random, *, incoming: bool, existing: list[Json]) -> Json:
        # Mostly a selector that some bound pod matches, so that the term decides something.
        seen = [p["labels"]["app"] for p in existing if "app" in p["labels"]]
        selector = (
            {"matchLabels": {"app": rng.choice(seen)}} if seen and rng.random() < 0.5 else self._selector(rng)
        )
        term: Json = {
            "labelSelector": selector,
            "topologyKey": rng.choices(TOPOLOGY_KEYS, (5, 3, 1))[0],
        }
        scope = rng.random()
        if scope < 0.15:
            term["namespaces"] = [rng.choice(("a", "b"))]
        elif scope < 0.25:
            term["namespaceSelector"] = {}
        elif scope < 0.32:
            term["namespaceSelector"] = {"matchLabels": {"team": rng.choice(("a", "b"))}}
        if incoming and rng.random() < 0.1:
            term["matchLabelKeys"] = ["version"]
        if incoming and rng.random() < 0.08:
            term["mismatchLabelKeys"] = ["tier"]
        return term

    def _pod_affinity(self, rng: random.Random, *, incoming: bool, existing: list[Json]) -> Json:
        affinity: Json = {}
        chances = (0.3, 0.12, 0.15, 0.1) if incoming else (0.12, 0.05, 0.1, 0.05)
        anti_required, affinity_required, anti_preferred, affinity_preferred = chances
        for field, required, preferred in (
            ("podAntiAffinity", anti_required, anti_preferred),
            ("podAffinity", affinity_required, affinity_preferred),
        ):
            part: Json = {}
            if rng.random() < required:
                part["requiredDuringSchedulingIgnoredDuringExecution"] = [
                    self._pod_term(rng, incoming=incoming, existing=existing)
                    for _ in range(rng.choices((1, 2), (4, 1))[0])
                ]
            if rng.random() < preferred:
                part["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {
                        "weight": rng.choice((1, 50, 100)),
                        "podAffinityTerm": self._pod_term(rng, incoming=incoming, existing=existing),
                    }
                ]
            if part:
                affinity[field] = part
        return affinity

    def _existing(
        self, rng: random.Random, number: int, nodes: list[Json], taken: dict[str, set[str]]
    ) -> Json:
        node = rng.choice(nodes)
        pod: Json = {
            "name": f"e{number}",
            "namespace": rng.choices(("a", "b"), (3, 1))[0],
            "node": node["name"],
            "labels": self._labels(rng),
            "spec": {"containers": [self._container(rng, "main", ports=True)]},
            "devices": [],
        }
        affinity = self._pod_affinity(rng, incoming=False, existing=[])
        if affinity:
            pod["spec"]["affinity"] = affinity
        free = [d["name"] for d in node["devices"] if d["name"] not in taken[node["name"]]]
        if free and rng.random() < 0.35:
            pod["devices"] = sorted(rng.sample(free, min(len(free), rng.choice((1, 1, 2)))))
            taken[node["name"]].update(pod["devices"])
        return pod

    def _node_selector_requirement(self, rng: random.Random, nodes: list[Json]) -> Json:
        labelled = [(k, v) for n in nodes for k, v in n["labels"].items()]
        if labelled and rng.random() < 0.5:
            # A label some node has, so that the requirement decides something.
            key, value = rng.choice(labelled)
            return {"key": key, "operator": rng.choice(("In", "In", "NotIn")), "values": [value]}
        key = rng.choice((ZONE, RACK, DISK, GEN, HOSTNAME))
        values = {
            ZONE: ("z1", "z2", "z3"),
            RACK: ("r1", "r2"),
            DISK: ("ssd", "hdd"),
            GEN: ("3", "4", "5"),
            HOSTNAME: tuple(n["name"] for n in nodes),
        }[key]
        operators = ["In", "NotIn", "Exists", "DoesNotExist"] + (["Gt", "Lt"] if key == GEN else [])
        operator = rng.choice(operators)
        requirement: Json = {"key": key, "operator": operator}
        if operator in ("In", "NotIn"):
            requirement["values"] = sorted(rng.sample(values, rng.randint(1, min(2, len(values)))))
        elif operator in ("Gt", "Lt"):
            requirement["values"] = [rng.choice(("3", "4"))]
        return requirement

    def _node_affinity(self, rng: random.Random, nodes: list[Json]) -> Json:
        affinity: Json = {}
        if rng.random() < 0.2:
            terms = []
            for _ in range(rng.choices((1, 2), (3, 1))[0]):
                term: Json = {}
                if rng.random() < 0.85:
                    term["matchExpressions"] = [
                        self._node_selector_requirement(rng, nodes) for _ in range(rng.choice((1, 1, 2)))
                    ]
                else:
                    # A field selector takes one value.
                    name = rng.choice(nodes)["name"]
                    term["matchFields"] = [
                        {"key": "metadata.name", "operator": rng.choice(("In", "NotIn")), "values": [name]}
                    ]
                terms.append(term)
            affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
        if rng.random() < 0.2:
            affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {
                    "weight": rng.choice((1, 30, 100)),
                    "preference": {"matchExpressions": [self._node_selector_requirement(rng, nodes)]},
                }
            ]
        return affinity

    def _tolerations(self, rng: random.Random) -> list[Json]:
        tolerations: list[Json] = []
        if rng.random() < 0.03:
            return [{"operator": "Exists"}]
        for key in TAINT_KEYS:
            if rng.random() < 0.3:
                toleration: Json = {"key": key}
                if rng.random() < 0.5:
                    toleration["operator"] = "Exists"
                else:
                    toleration["operator"] = "Equal"
                    toleration["value"] = rng.choice(TAINT_VALUES)
                if rng.random() < 0.5:
                    toleration["effect"] = rng.choice(EFFECTS)
                tolerations.append(toleration)
        return tolerations

    def _spread(self, rng: random.Random, labels: Json) -> list[Json]:
        constraints = []
        for key in rng.sample((HOSTNAME, ZONE, RACK), rng.choices((1, 2), (4, 1))[0]):
            # Mostly the pod's own kind, as a Deployment's replicas spread themselves.
            own = "app" in labels and rng.random() < 0.6
            constraint: Json = {
                "maxSkew": rng.choices((1, 2), (4, 1))[0],
                "topologyKey": key,
                "whenUnsatisfiable": rng.choice(("DoNotSchedule", "ScheduleAnyway")),
                "labelSelector": {"matchLabels": {"app": labels["app"]}} if own else self._selector(rng),
            }
            if constraint["whenUnsatisfiable"] == "DoNotSchedule" and rng.random() < 0.15:
                constraint["minDomains"] = rng.choice((2, 3, 4))
            if rng.random() < 0.05:
                constraint["nodeAffinityPolicy"] = "Ignore"
            if rng.random() < 0.15:
                constraint["nodeTaintsPolicy"] = "Honor"
            if rng.random() < 0.1:
                constraint["matchLabelKeys"] = ["version"]
            constraints.append(constraint)
        return constraints

    def _claim(self, rng: random.Random) -> Json:
        def exactly(name: str) -> Json:
            request: Json = {"name": name, "exactly": {"deviceClassName": "gpu"}}
            kind = rng.choices(("plain", "two", "class", "selector"), (10, 2, 3, 2))[0]
            if kind == "two":
                request["exactly"]["count"] = 2
            elif kind == "class":
                request["exactly"]["deviceClassName"] = f"gpu-{rng.choice(tuple(MODELS))}"
            elif kind == "selector":
                request["exactly"]["selectors"] = [
                    {"cel": {"expression": rng.choice(tuple(REQUEST_SELECTORS))}}
                ]
            return request

        def first_available(name: str) -> Json:
            models = rng.sample(tuple(MODELS), rng.choice((2, 2, 3)))
            alternatives = []
            for model in models:
                alternative: Json = {"name": model, "deviceClassName": f"gpu-{model}"}
                if rng.random() < 0.2:
                    alternative["count"] = 2
                alternatives.append(alternative)
            if rng.random() < 0.3:
                alternatives.append({"name": "any", "deviceClassName": "gpu"})
            return {"name": name, "firstAvailable": alternatives}

        requests = []
        for i in range(rng.choices((1, 2), (6, 1))[0]):
            name = f"r{i}"
            requests.append(first_available(name) if rng.random() < 0.3 else exactly(name))
        return {"requests": requests}

    def _incoming(self, rng: random.Random, nodes: list[Json], existing: list[Json]) -> tuple[Json, Json]:
        labels = self._labels(rng)
        containers = [self._container(rng, "main", ports=True)]
        if rng.random() < 0.2:
            # Host ports on the main container only: two of one pod may not repeat one.
            containers.append(self._container(rng, "sidecar", ports=False))
        spec: Json = {"containers": containers}
        if rng.random() < 0.1:
            spec["initContainers"] = [self._container(rng, "init", ports=False)]
        if rng.random() < 0.15:
            requirement = self._node_selector_requirement(rng, nodes)
            if requirement["operator"] == "In":
                spec["nodeSelector"] = {requirement["key"]: requirement["values"][0]}
        affinity: Json = {}
        node_affinity = self._node_affinity(rng, nodes)
        if node_affinity:
            affinity["nodeAffinity"] = node_affinity
        affinity.update(self._pod_affinity(rng, incoming=True, existing=existing))
        if affinity:
            spec["affinity"] = affinity
        tolerations = self._tolerations(rng)
        if tolerations:
            spec["tolerations"] = tolerations
        if rng.random() < 0.4:
            spec["topologySpreadConstraints"] = self._spread(rng, labels)
        pod = {
            "name": "p",
            "namespace": rng.choices(("a", "b"), (3, 1))[0],
            "labels": labels,
            "spec": spec,
        }
        return pod, self._claim(rng)


def exclusive(case: Json) -> bool:
    """Whether the case must be alone in its control plane: a spread constraint with
    ``nodeAffinityPolicy: Ignore`` counts the domains of every node of the cluster."""
    constraints = case["pod"]["spec"].get("topologySpreadConstraints") or []
    return any(c.get("nodeAffinityPolicy") == "Ignore" for c in constraints)
