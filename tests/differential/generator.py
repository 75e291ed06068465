"""Random allocation problems for the differential test, from a seed.

Each problem is a small cluster as the API server would store it (every object passes
draco's validation, which the e2e agreement test holds to kube-apiserver's verdicts):
nodes with labels; pools of one or more ResourceSlices local to a node, on all nodes, on
labelled nodes or with per-device node selection; devices with int, bool, string and
version attributes (list attributes in some problems), capacities, shared counters,
multi-allocatable devices with consumable capacity and request policies, taints and
binding conditions; DeviceClasses with selectors and configs; claims already allocated
(exclusive, shared with and without consumed capacity, admin access); and one to three
claims to allocate with ExactCount and All requests, firstAvailable, selectors,
tolerations, admin access, capacity requests, matchAttribute and distinctAttribute
constraints and configs. Sizes stay small so that both allocators search exhaustively
in milliseconds.

Rare, deliberate oddities keep the less travelled paths covered: selectors that raise a
CEL runtime error on devices without an attribute, invalid pools (a device name used in
two slices, a counter set that does not exist), incomplete pools, over-committed shared
counters and shares beyond a device's capacity in the allocated state.
"""

from __future__ import annotations

import random
from typing import Any

Json = dict[str, Any]

API = "resource.k8s.io/v1"
GPU = "gpu.example.com"
NIC = "nic.example.com"
DRIVERS = (GPU, NIC)

MODELS = ("a100", "h100", "l4")
VERSIONS = ("1.0.0", "1.2.0", "2.0.0-rc.1", "2.0.0")
#: Constraint attributes: fully qualified, as the API requires.
CONSTRAINT_ATTRIBUTES = (
    "gpu.example.com/numa",
    "gpu.example.com/model",
    "gpu.example.com/healthy",
    "gpu.example.com/driverVersion",
    "gpu.example.com/index",
    "example.com/rack",
    "nic.example.com/numa",
)
LIST_CONSTRAINT_ATTRIBUTES = ("gpu.example.com/links", "gpu.example.com/zones")


def _quantity_pick(rng: random.Random, options: tuple[str, ...]) -> str:
    return rng.choice(options)


class Generator:
    """One problem per call of :meth:`problem`, fully determined by the seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed

    # --- the cluster -----------------------------------------------------------------------

    def problem(self, index: int) -> Json:
        rng = self.rng
        self.lists = rng.random() < 0.15
        self.unguarded = rng.random() < 0.08
        self.fractional = rng.random() < 0.1
        node_count = rng.randint(1, 3)
        self.nodes = [
            {
                "name": f"node-{i}",
                "labels": {"zone": rng.choice(("a", "b")), "rack": rng.choice(("r1", "r2"))},
            }
            for i in range(node_count)
        ]
        self.target = rng.choice(self.nodes)
        slices: list[Json] = []
        for p in range(rng.randint(1, 4)):
            slices.extend(self._pool(p))
        classes = self._classes()
        devices = [
            (s["spec"]["driver"], s["spec"]["pool"]["name"], d)
            for s in slices
            for d in s["spec"].get("devices") or []
        ]
        allocated = self._allocated(devices)
        claims = [self._claim(i, classes) for i in range(rng.choices((1, 2, 3), (6, 3, 1))[0])]
        features: Json = {}
        if self.lists:
            features["listTypeAttributes"] = True
        if self.fractional:
            # draco always works in exact quantities (DRAFractionalCapacityRange, off by
            # default in 1.37); problems with fractional ranges switch it on upstream.
            features["fractionalCapacityRange"] = True
        return {
            "id": f"{self.seed}-{index}",
            "features": features,
            "node": self.target,
            "classes": classes,
            "slices": slices,
            "allocated": allocated,
            "claims": claims,
        }

    def _pool(self, number: int) -> list[Json]:
        rng = self.rng
        driver = rng.choices(DRIVERS, (4, 1))[0]
        name = f"pool-{number}"
        kind = rng.choices(("local", "all", "selector", "per-device"), (5, 2, 2, 2))[0]
        local_node = (self.target if rng.random() < 0.6 else rng.choice(self.nodes))["name"]
        counters = kind != "selector" and rng.random() < 0.3
        counter_sets: list[Json] = []
        if counters:
            counter_sets = [
                {
                    "name": f"cs-{i}",
                    "counters": {
                        "mem": {"value": rng.choice(("16Gi", "24Gi", "32Gi"))},
                        "sm": {"value": rng.choice(("4", "8"))},
                    },
                }
                for i in range(rng.randint(1, 2))
            ]
        device_slices = rng.choices((1, 2, 3), (6, 3, 1))[0]
        total = device_slices + (1 if counters else 0)
        declared = total + 1 if rng.random() < 0.03 else total  # incomplete pool
        used_names: list[str] = []
        slices: list[Json] = []
        for s in range(device_slices):
            # Each earlier name once: a name reused twice in one slice makes an invalid object.
            earlier = list(dict.fromkeys(used_names))
            if kind == "local" and device_slices > 1 and rng.random() < 0.4:
                slice_node = rng.choice(self.nodes)["name"]  # a pool spanning nodes
            else:
                slice_node = local_node
            devices = []
            for d in range(rng.choices((0, 1, 2, 3, 4, 5), (1, 3, 4, 4, 3, 2))[0]):
                device_name = f"dev-{s}-{d}"
                if earlier and rng.random() < 0.03:
                    device_name = rng.choice(earlier)  # invalid pool: a name used in two slices
                    earlier.remove(device_name)
                used_names.append(device_name)
                devices.append(self._device(device_name, driver, kind, counter_sets))
            spec: Json = {
                "driver": driver,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": declared},
                "devices": devices,
            }
            self._node_selection(spec, kind, slice_node)
            slices.append(
                {
                    "apiVersion": API,
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{name}-s{s}"},
                    "spec": spec,
                }
            )
        if counters:
            spec = {
                "driver": driver,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": declared},
                "sharedCounters": counter_sets,
            }
            self._node_selection(spec, "all" if kind == "per-device" else kind, local_node)
            slices.append(
                {
                    "apiVersion": API,
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{name}-counters"},
                    "spec": spec,
                }
            )
        if rng.random() < 0.05 and slices:
            # An older generation still around: ignored by both.
            old = {**slices[0], "metadata": {"name": f"{name}-old"}}
            old["spec"] = {
                **slices[0]["spec"],
                "pool": {"name": name, "generation": 0, "resourceSliceCount": 1},
            }
            slices.append(old)
        return slices

    def _node_selection(self, spec: Json, kind: str, node: str) -> None:
        rng = self.rng
        if kind == "local":
            spec["nodeName"] = node
        elif kind == "all":
            spec["allNodes"] = True
        elif kind == "selector":
            if rng.random() < 0.5:
                term = {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": [rng.choice(("a", "b"))]}
                    ]
                }
            else:
                term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            spec["nodeSelector"] = {"nodeSelectorTerms": [term]}
        else:
            spec["perDeviceNodeSelection"] = True

    def _device(self, name: str, driver: str, kind: str, counter_sets: list[Json]) -> Json:
        rng = self.rng
        device: Json = {"name": name}
        attributes: Json = {}
        if rng.random() < 0.8:
            attributes["numa"] = {"int": rng.randint(0, 2)}
        if rng.random() < 0.8:
            attributes["model"] = {"string": rng.choice(MODELS)}
        if rng.random() < 0.5:
            attributes["healthy"] = {"bool": rng.random() < 0.8}
        if rng.random() < 0.5:
            attributes["driverVersion"] = {"version": rng.choice(VERSIONS)}
        if rng.random() < 0.4:
            attributes[f"{driver}/index"] = {"int": rng.randint(0, 3)}
        if rng.random() < 0.4:
            attributes["example.com/rack"] = {"string": rng.choice(("r1", "r2"))}
        if self.lists and rng.random() < 0.6:
            attributes["links"] = {"ints": sorted(rng.sample(range(4), rng.randint(1, 3)))}
        if self.lists and rng.random() < 0.4:
            attributes["zones"] = {"strings": sorted(rng.sample(["a", "b", "c"], rng.randint(1, 2)))}
        if attributes:
            device["attributes"] = attributes
        multi = rng.random() < 0.25
        capacity: Json = {}
        if rng.random() < 0.7 or multi:
            capacity["memory"] = {"value": rng.choice(("8Gi", "16Gi", "40G", "80Gi"))}
        if rng.random() < 0.4:
            capacity["cores"] = {"value": rng.choice(("4", "8", "16"))}
        if multi:
            device["allowMultipleAllocations"] = True
            for cap_name, cap in capacity.items():
                policy = self._policy(cap_name, cap["value"])
                if policy is not None:
                    cap["requestPolicy"] = policy
        if capacity and rng.random() < 0.95:
            device["capacity"] = capacity
        if counter_sets and rng.random() < 0.8:
            counter_set = rng.choice(counter_sets)
            counters = {"mem": {"value": rng.choice(("4Gi", "8Gi", "16Gi"))}}
            if rng.random() < 0.5:
                counters["sm"] = {"value": rng.choice(("1", "2", "4"))}
            if rng.random() < 0.02:
                counters = {"unknown": {"value": "1"}}  # invalid pool
            device["consumesCounters"] = [{"counterSet": counter_set["name"], "counters": counters}]
        if rng.random() < 0.2:
            device["taints"] = [self._taint() for _ in range(rng.randint(1, 2))]
            if len({(t["key"], t["effect"]) for t in device["taints"]}) < len(device["taints"]):
                device["taints"] = device["taints"][:1]
        if rng.random() < 0.06:
            device["bindingConditions"] = ["attached"]
            device["bindingFailureConditions"] = ["failed"]
            if rng.random() < 0.5:
                device["bindsToNode"] = True
        if kind == "per-device":
            choice = rng.random()
            if choice < 0.6:
                device["nodeName"] = rng.choice(self.nodes)["name"]
            elif choice < 0.8:
                device["allNodes"] = True
            else:
                device["nodeSelector"] = {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "rack", "operator": "In", "values": [rng.choice(("r1", "r2"))]}
                            ]
                        }
                    ]
                }
        return device

    def _policy(self, name: str, value: str) -> Json | None:
        rng = self.rng
        shape = rng.choice(("none", "default", "range", "range-step", "values"))
        if name == "memory":
            if value == "40G":
                unit, values = "G", ("1G", "2G", "5G", "10G")
            else:
                unit, values = "Gi", ("1Gi", "2Gi", "4Gi", "8Gi")
        elif self.fractional and rng.random() < 0.5:
            unit, values = "", ("500m", "1", "2", "4")
        else:
            unit, values = "", ("1", "2", "4")
        if shape == "none":
            return None
        if shape == "default":
            return {"default": rng.choice(values)}
        if shape == "values":
            chosen = sorted(set(rng.sample(values, rng.randint(1, 3))), key=values.index)
            return {"default": chosen[0], "validValues": chosen}
        # The capacity and the bounds must lie on the grid min + k * step: min = step.
        minimum = values[rng.randint(0, 1)]
        policy: Json = {"default": minimum, "validRange": {"min": minimum}}
        if shape == "range-step":
            policy["validRange"]["step"] = minimum
        if rng.random() < 0.5:
            policy["validRange"]["max"] = values[-1]
        if unit and rng.random() < 0.1:
            step = "512Mi" if unit == "Gi" else "500M"
            return {"default": step, "validRange": {"min": step, "step": step}}
        return policy

    def _taint(self) -> Json:
        rng = self.rng
        taint: Json = {
            "key": rng.choice(("maint", "degraded", "example.com/ecc")),
            "effect": rng.choice(("NoSchedule", "NoExecute", "None")),
        }
        if rng.random() < 0.5:
            taint["value"] = rng.choice(("yes", "no"))
        return taint

    def _classes(self) -> list[Json]:
        rng = self.rng
        classes = [
            self._class("gpu", [f'device.driver == "{GPU}"']),
            self._class("nic", [f'device.driver == "{NIC}"']),
            self._class("any", []),
            self._class(
                "big-gpu",
                [
                    f'device.driver == "{GPU}"',
                    f'device.capacity["{GPU}"].?memory.orValue(quantity("0")).compareTo(quantity("10Gi")) >= 0',
                ],
            ),
            self._class("shared", ["device.allowMultipleAllocations"]),
        ]
        for device_class in classes:
            if rng.random() < 0.3:
                device_class["spec"]["config"] = [
                    {
                        "opaque": {
                            "driver": rng.choice(DRIVERS),
                            "parameters": {"class": device_class["metadata"]["name"]},
                        }
                    }
                ]
        return classes

    @staticmethod
    def _class(name: str, expressions: list[str]) -> Json:
        spec: Json = {}
        if expressions:
            spec["selectors"] = [{"cel": {"expression": e}} for e in expressions]
        return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}

    # --- what is allocated already -------------------------------------------------------

    def _allocated(self, devices: list[tuple[str, str, Json]]) -> list[Json]:
        rng = self.rng
        claims = []
        seen: set[tuple[str, str, str]] = set()
        for i in range(rng.choices((0, 1, 2, 3), (4, 3, 2, 1))[0]):
            results = []
            for _ in range(rng.randint(1, 2)):
                if not devices:
                    break
                driver, pool, device = rng.choice(devices)
                key = (driver, pool, device["name"])
                result: Json = {"request": "r", "driver": driver, "pool": pool, "device": device["name"]}
                if device.get("allowMultipleAllocations") and rng.random() < 0.85:
                    result["shareID"] = f"00000000-0000-4000-8000-{len(claims):06d}{len(results):06d}"
                    capacity = device.get("capacity") or {}
                    if capacity and rng.random() < 0.8:
                        result["consumedCapacity"] = {
                            name: rng.choice(("1Gi", "2Gi", "4Gi", "10G"))
                            if name == "memory"
                            else rng.choice(("1", "2", "4"))
                            for name in capacity
                        }
                elif rng.random() < 0.1:
                    result["adminAccess"] = True
                elif key in seen and rng.random() < 0.9:
                    continue  # a device allocated twice is rare (but it happens across races)
                seen.add(key)
                results.append(result)
            if not results:
                continue
            claims.append(
                {
                    "apiVersion": API,
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"old-{i}", "namespace": "default", "uid": f"uid-old-{i}"},
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "r",
                                    "exactly": {
                                        "deviceClassName": "any",
                                        "allocationMode": "ExactCount",
                                        "count": 1,
                                    },
                                }
                            ]
                        }
                    },
                    "status": {"allocation": {"devices": {"results": results}}},
                }
            )
        return claims

    # --- the claims to allocate ------------------------------------------------------------

    def _selector(self) -> str:
        rng = self.rng
        gpu = f'device.attributes["{GPU}"]'
        options = [
            f'{gpu}.?model.orValue("") == "{rng.choice(MODELS)}"',
            f'"model" in {gpu} && {gpu}.model != "{rng.choice(MODELS)}"',
            f"has({gpu}.numa) && {gpu}.numa >= {rng.randint(0, 2)}",
            f"{gpu}.?healthy.orValue(false)",
            f'has({gpu}.driverVersion) && {gpu}.driverVersion.isGreaterThan(semver("{rng.choice(VERSIONS)}"))',
            f'device.capacity["{GPU}"].?memory.orValue(quantity("0")).compareTo(quantity("{rng.choice(("8Gi", "16Gi", "20G"))}")) >= 0',
            'device.attributes["example.com"].?rack.orValue("r1") == "r1"',
            "!device.allowMultipleAllocations",
            f'device.driver == "{rng.choice(DRIVERS)}"',
            # A string reached through `.?` has no size bound upstream: only cheap
            # operations on it pass the cost check; matches() needs the plain field.
            f'"model" in {gpu} && {gpu}.model.matches("^{rng.choice(("a", "h", "l"))}")',
            f'{gpu}.?model.orValue("").startsWith("{rng.choice(("a", "h", "l"))}")',
        ]
        if self.lists:
            options.append(f'"links" in {gpu} && {gpu}.links.exists(x, x == {rng.randint(0, 3)})')
        if self.unguarded and rng.random() < 0.5:
            # Raises "no such key" on devices without the attribute.
            options = [f'{gpu}.model == "{rng.choice(MODELS)}"', f"{gpu}.numa < 2"]
        return rng.choice(options)

    def _tolerations(self) -> list[Json]:
        rng = self.rng
        tolerations = []
        for _ in range(rng.randint(1, 2)):
            toleration: Json = {}
            if rng.random() < 0.8:
                toleration["key"] = rng.choice(("maint", "degraded", "example.com/ecc"))
            if "key" in toleration and rng.random() < 0.5:
                toleration["operator"] = "Equal"
                toleration["value"] = rng.choice(("yes", "no"))
            else:
                toleration["operator"] = "Exists"
            if rng.random() < 0.5:
                toleration["effect"] = rng.choice(("NoSchedule", "NoExecute"))
            tolerations.append(toleration)
        return tolerations

    def _exact(self, classes: list[Json], *, sub: bool) -> Json:
        rng = self.rng
        class_name = rng.choices([c["metadata"]["name"] for c in classes], (8, 2, 4, 1, 2))[0]
        request: Json = {"deviceClassName": class_name}
        if rng.random() < 0.4:
            request["selectors"] = [
                {"cel": {"expression": self._selector()}} for _ in range(rng.randint(1, 2))
            ]
        if rng.random() < 0.15:
            request["allocationMode"] = "All"
        else:
            request["allocationMode"] = "ExactCount"
            request["count"] = rng.choices((1, 2, 3), (12, 3, 1))[0]
        if rng.random() < 0.25:
            request["tolerations"] = self._tolerations()
        if rng.random() < 0.25:
            requests: Json = {}
            if rng.random() < 0.8:
                requests["memory"] = rng.choice(("512Mi", "1Gi", "3Gi", "5000M", "10G", "8Gi"))
            if rng.random() < 0.4:
                requests["cores"] = rng.choice(("1", "3", "1500m"))
            if requests:
                request["capacity"] = {"requests": requests}
        if not sub and rng.random() < 0.06 and request["allocationMode"] == "ExactCount":
            request["adminAccess"] = True
        return request

    def _claim(self, index: int, classes: list[Json]) -> Json:
        rng = self.rng
        requests = []
        names: list[str] = []
        for r in range(rng.choices((1, 2, 3), (5, 3, 1))[0]):
            name = f"req-{r}"
            if rng.random() < 0.25:
                subs = []
                for s in range(rng.randint(2, 3)):
                    sub = self._exact(classes, sub=True)
                    sub["name"] = f"sub-{s}"
                    subs.append(sub)
                    names.append(f"{name}/sub-{s}")
                requests.append({"name": name, "firstAvailable": subs})
            else:
                requests.append({"name": name, "exactly": self._exact(classes, sub=False)})
            names.append(name)
        devices: Json = {"requests": requests}
        constraints = []
        for _ in range(rng.choices((0, 1, 2), (12, 5, 1))[0]):
            attributes = CONSTRAINT_ATTRIBUTES + (LIST_CONSTRAINT_ATTRIBUTES if self.lists else ())
            constraint: Json = {}
            if rng.random() < 0.6:
                constraint["matchAttribute"] = rng.choice(attributes)
            else:
                constraint["distinctAttribute"] = rng.choice(attributes)
            if rng.random() < 0.4:
                constraint["requests"] = sorted(set(rng.sample(names, rng.randint(1, min(2, len(names))))))
            constraints.append(constraint)
        if constraints:
            devices["constraints"] = constraints
        if rng.random() < 0.3:
            configs = []
            for _ in range(rng.randint(1, 2)):
                config: Json = {"opaque": {"driver": rng.choice(DRIVERS), "parameters": {"claim": index}}}
                if rng.random() < 0.6:
                    config["requests"] = sorted(set(rng.sample(names, rng.randint(1, min(2, len(names))))))
                configs.append(config)
            devices["config"] = configs
        return {
            "apiVersion": API,
            "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{index}", "namespace": "default", "uid": f"uid-claim-{index}"},
            "spec": {"devices": devices},
        }


def invalid_objects(problem: Json) -> list[str]:
    """What draco's validation (the API server's rules) rejects in ``problem``: the
    generator must only produce objects a cluster could hold."""
    from draco.validation import validate_object

    found = []
    for kind in ("classes", "slices", "allocated", "claims"):
        for obj in problem[kind]:
            for error in validate_object(obj):
                found.append(f"{obj['kind']} {obj['metadata']['name']}: {error}")
    return found
