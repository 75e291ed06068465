"""The common pod, allocated without plans, bounds or search: the first free devices.

Most pods ask, request by request, for a number of devices of a class: no constraints,
no alternatives, no admin access, no capacity, no ``All``, on devices that are neither
shared nor partitioned. For such a pod the search's first solution is the first free
candidate of every request in turn (the search leaves that path only after a failure),
and setting up plans, explanation funnels, bounds and search state costs several times
more than walking it. :func:`quick_fit` walks it and gives the search's answer, results
and steps alike; it gives ``None`` whenever the pod is not such a pod, something in it
is an error, or a request is not filled that way, and the planner and the search then
decide and explain as always.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from draco.allocator.devices import DeviceRecord
from draco.allocator.inventory import Inventory, NodeView
from draco.allocator.plans import Planner, exact_count
from draco.allocator.search import RESULTS_MAX
from draco.api.quantity import Quantity

__all__ = ["ClaimFit", "quick_fit"]


@dataclass(slots=True, frozen=True)
class _Request:
    request: str
    tolerations: list[Mapping[str, Any]]
    class_name: str
    class_data: Mapping[str, Any]
    admin: bool = False


@dataclass(slots=True, frozen=True)
class _Pick:
    plan: _Request
    device: DeviceRecord
    consumed: dict[str, Quantity] | None = None


@dataclass(slots=True, frozen=True)
class ClaimFit:
    """One claim's requests (name, what was allocated for it) and devices, in order."""

    requests: list[tuple[str, _Request]]
    chosen: list[_Pick]


def quick_fit(
    inventory: Inventory,
    view: NodeView,
    datas: Sequence[Mapping[str, Any]],
    *,
    max_steps: int,
) -> tuple[list[ClaimFit], int] | None:
    """Each claim's devices and the search steps, when taking the first free candidate of
    every request in turn allocates them all; ``None`` when the planner and the search
    must decide."""
    planner = Planner(inventory, view)
    in_use = inventory.exclusive_in_use
    taken_by_name = inventory.capacity_taken_by_name
    classes = inventory.classes
    taken: set[int] = set()
    steps = 0
    fits: list[ClaimFit] = []
    for data in datas:
        spec = (data.get("spec") or {}).get("devices") or {}
        if spec.get("constraints"):
            return None
        requests: list[tuple[str, _Request]] = []
        chosen: list[_Pick] = []
        for request in spec.get("requests") or ():
            exactly = request.get("exactly")
            if exactly is None or request.get("firstAvailable"):
                return None
            mode = exactly.get("allocationMode")
            if (mode and mode != "ExactCount") or exactly.get("adminAccess") or exactly.get("capacity"):
                return None
            class_name = exactly.get("deviceClassName") or ""
            class_data = classes.get(class_name)
            if class_data is None:
                return None
            selection = planner.selection(class_name, class_data, exactly)
            if selection is None:
                return None
            need = exact_count(exactly)
            if len(chosen) + need > RESULTS_MAX:
                return None
            name = request.get("name", "")
            tolerations = list(exactly.get("tolerations") or ())
            choice = _Request(
                request=name, tolerations=tolerations, class_name=class_name, class_data=class_data
            )
            for device in selection.devices:
                if device.allow_multiple or device.consumes:
                    return None
                if in_use(device) or taken_by_name(device):
                    continue
                if device.taints and planner.blocker(device, tolerations=tolerations) is not None:
                    continue
                # A candidate the search would try: one step, even when taken already.
                steps += 1
                if device.index in taken:
                    continue
                taken.add(device.index)
                chosen.append(_Pick(plan=choice, device=device))
                need -= 1
                if not need:
                    break
            if need:
                return None
            requests.append((name, choice))
        fits.append(ClaimFit(requests=requests, chosen=chosen))
    if steps > max_steps:
        return None
    return fits, steps
