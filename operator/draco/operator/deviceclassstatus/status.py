"""What a DeviceClass's status should say, computed without I/O.

draco gives DeviceClass a status upstream lacks (see `draco.api.deviceclass`): how many
published devices the class selects, how many of those are allocated, and a `Valid`
condition. This module is the pure half of that: given the class, the devices published
at the newest generation of their pools and the devices allocated claims hold, it says
what the status should be, so the controller (`deviceclasses`) only gathers inputs and
writes the answer, and the rules are tested without an API server.

The verdict follows what allocation would make of the class, in order:

- a selector that does not compile: `InvalidSelector` (no device can ever match);
- a class the API server's rules reject (`draco.validation`): `InvalidSpec`;
- a selector that fails at runtime on some published device (a missing attribute, a
  type mismatch, the cost limit): `SelectorRuntimeError`. Upstream fails an allocation
  that meets such a device, so the class is not usable as it stands; those devices are
  counted as not selected and the message names the first of them;
- otherwise `Valid`.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from draco.allocator.devices import DeviceRecord
from draco.allocator.inventory import Inventory
from draco.allocator.selectors import SelectorCache
from draco.api.bodies import ResourceClaimBody
from draco.api.constants import GROUP, KIND_DEVICE_CLASS, VERSION
from draco.errors import CELError
from draco.validation import render_all, validate_object

__all__ = [
    "CONDITION_VALID",
    "REASON_INVALID_SELECTOR",
    "REASON_INVALID_SPEC",
    "REASON_SELECTOR_RUNTIME_ERROR",
    "REASON_VALID",
    "DeviceKey",
    "RuntimeFailure",
    "Selection",
    "Selector",
    "Verdict",
    "allocated_device_keys",
    "count_allocated",
    "desired_status",
    "final_verdict",
    "judge_class",
    "judge_class_apart",
    "merge_selections",
    "published_devices",
    "select_devices",
    "selectors_of",
    "status_differs",
]

#: ``(driver, pool, device)``: a device's identity across slices and claims.
DeviceKey = tuple[str, str, str]

CONDITION_VALID: Final = "Valid"
REASON_VALID: Final = "Valid"
REASON_INVALID_SELECTOR: Final = "InvalidSelector"
REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_SELECTOR_RUNTIME_ERROR: Final = "SelectorRuntimeError"

#: The API server limits a condition message to 32 KiB; ours stay far shorter.
MAX_MESSAGE: Final = 4096


@dataclass(frozen=True, slots=True)
class Selector:
    """One CEL selector of a class: where it is in the spec and what it says."""

    index: int
    expression: str

    @property
    def path(self) -> str:
        return f"spec.selectors[{self.index}].cel.expression"


@dataclass(frozen=True, slots=True)
class Verdict:
    valid: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RuntimeFailure:
    """The first device a selector failed on, and why."""

    selector: Selector
    device: DeviceKey
    error: str


@dataclass(frozen=True, slots=True)
class Selection:
    """Devices the class selects, devices a selector failed on (not selected), and the
    first failure."""

    selected: frozenset[DeviceKey]
    failed: frozenset[DeviceKey] = frozenset()
    failure: RuntimeFailure | None = None


def merge_selections(parts: Iterable[Selection]) -> Selection:
    """One selection of several (one per slice): the union, and the first failure in order."""
    selected: set[DeviceKey] = set()
    failed: set[DeviceKey] = set()
    failure: RuntimeFailure | None = None
    for part in parts:
        selected |= part.selected
        failed |= part.failed
        if failure is None:
            failure = part.failure
    return Selection(frozenset(selected), frozenset(failed), failure)


def selectors_of(device_class: Mapping[str, Any]) -> list[Selector]:
    """The class's CEL selectors in spec order (a selector without CEL is a spec error)."""
    selectors: list[Selector] = []
    for index, selector in enumerate((device_class.get("spec") or {}).get("selectors") or []):
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if isinstance(expression, str):
            selectors.append(Selector(index, expression))
    return selectors


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def judge_class_apart(device_class: Mapping[str, Any]) -> Verdict | None:
    """:func:`judge_class` with a cache of its own: for another process (compiling and
    validating a costly selector takes seconds)."""
    return judge_class(device_class, cache=SelectorCache())


def judge_class(device_class: Mapping[str, Any], *, cache: SelectorCache) -> Verdict | None:
    """The verdict that does not depend on devices: a selector that does not compile or a
    spec the API server's rules reject; None when the class itself is sound."""
    for selector in selectors_of(device_class):
        try:
            cache.compile(selector.expression)
        except CELError as exc:
            return Verdict(
                valid=False,
                reason=REASON_INVALID_SELECTOR,
                message=_clip(
                    f"{selector.path} {selector.expression!r} does not compile: {_one_line(str(exc))}"
                ),
            )
    # The spec is judged as on create; the status is ours and not the user's to fix.
    body = {
        "apiVersion": device_class.get("apiVersion") or f"{GROUP}/{VERSION}",
        "kind": device_class.get("kind") or KIND_DEVICE_CLASS,
        "metadata": device_class.get("metadata") or {},
        "spec": device_class.get("spec") or {},
    }
    errors = validate_object(body)
    if errors:
        return Verdict(
            valid=False,
            reason=REASON_INVALID_SPEC,
            message=_clip(f"the API server's rules reject this class: {_one_line(render_all(errors))}"),
        )
    return None


def published_devices(inventory: Inventory) -> list[DeviceRecord]:
    """Devices of the newest generation of each pool, one record per device key."""
    seen: set[DeviceKey] = set()
    devices: list[DeviceRecord] = []
    for device in inventory.devices:
        pool = inventory.pools.get((device.driver, device.pool))
        if pool is None or device.generation != pool.generation or device.key in seen:
            continue
        seen.add(device.key)
        devices.append(device)
    return devices


def select_devices(
    selectors: Sequence[Selector], devices: Iterable[DeviceRecord], *, cache: SelectorCache
) -> Selection:
    """Devices every selector accepts, evaluated in spec order as allocation does (the
    first selector that rejects or fails decides). Every selector must compile."""
    evaluators = [(selector, cache.evaluator(selector.expression)) for selector in selectors]
    selected: set[DeviceKey] = set()
    failed: set[DeviceKey] = set()
    failure: RuntimeFailure | None = None
    for device in devices:
        chosen = True
        for selector, evaluate in evaluators:
            result = evaluate(device)
            if isinstance(result, CELError):
                failed.add(device.key)
                if failure is None:
                    failure = RuntimeFailure(selector, device.key, _one_line(str(result)))
                chosen = False
                break
            if not result:
                chosen = False
                break
        if chosen:
            selected.add(device.key)
    return Selection(frozenset(selected), frozenset(failed), failure)


def final_verdict(static: Verdict | None, selection: Selection) -> Verdict:
    """The `Valid` condition: the static verdict if the class is broken, else whether the
    selectors evaluated on every published device."""
    if static is not None:
        return static
    failure = selection.failure
    if failure is not None:
        device = "/".join(failure.device)
        others = len(selection.failed) - 1
        also = f" (and on {others} more device{'s' if others != 1 else ''})" if others else ""
        return Verdict(
            valid=False,
            reason=REASON_SELECTOR_RUNTIME_ERROR,
            message=_clip(
                f"{failure.selector.path} {failure.selector.expression!r} fails on device {device}"
                f"{also}: {failure.error}; such devices count as not selected, and allocating "
                "from this class fails where one of them is considered"
            ),
        )
    return Verdict(
        valid=True,
        reason=REASON_VALID,
        message="every selector compiles and evaluates on every published device",
    )


def allocated_device_keys(claim: ResourceClaimBody) -> frozenset[DeviceKey]:
    """Devices the claim's allocation holds (admin-access results hold nothing)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return frozenset(
        (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        for result in (allocation.get("devices") or {}).get("results") or []
        if not result.get("adminAccess")
    )


def count_allocated(selected: Iterable[DeviceKey], allocated: Container[DeviceKey]) -> int:
    return sum(1 for key in selected if key in allocated)


def desired_status(
    current: Mapping[str, Any] | None,
    *,
    generation: int | None,
    selected: int,
    allocated: int,
    verdict: Verdict,
    now: str,
) -> dict[str, Any]:
    """The status to write. Other conditions are kept; the `Valid` condition keeps its
    lastTransitionTime while its status stays the same (metav1.Condition semantics)."""
    current = current or {}
    status = "True" if verdict.valid else "False"
    kept = [c for c in current.get("conditions") or [] if c.get("type") != CONDITION_VALID]
    previous = next((c for c in current.get("conditions") or [] if c.get("type") == CONDITION_VALID), None)
    transition = (
        previous["lastTransitionTime"]
        if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime")
        else now
    )
    condition: dict[str, Any] = {
        "type": CONDITION_VALID,
        "status": status,
        "reason": verdict.reason,
        "message": verdict.message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return {"selectedDevices": selected, "allocatedDevices": allocated, "conditions": [*kept, condition]}


def status_differs(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` would change any field of `current` that it sets."""
    current = current or {}
    return any(current.get(name) != value for name, value in desired.items())
