"""Turning the claims of a pod into search plans for one node.

For every request (every subrequest of a ``firstAvailable`` list) this resolves the
class, compiles the selectors, and walks the node's devices once to find the candidates
the search may try, in the search order. Everything that does not depend on the other
choices of the search is decided here, once: selectors (class first, then request),
the allocated state, capacity, counters, taints. Each step's rejections are counted for
the explanation funnel. Fatal input problems raise :class:`AllocationInputError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from draco.allocator.capacity import consumption, quantity
from draco.allocator.devices import DeviceRecord
from draco.allocator.inventory import Inventory, NodeView
from draco.allocator.outcome import FunnelStep, RequestFunnel
from draco.allocator.selectors import SelectorCache
from draco.api.quantity import Quantity
from draco.errors import AllocationInputError, CELError

__all__ = ["Plan", "Slot", "build_slots", "tolerated"]

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(slots=True, eq=False)
class Plan:
    """One (sub)request to satisfy on one node, with its candidate devices."""

    claim_index: int
    claim: str
    request: str
    base: str
    sub: str | None
    class_name: str
    class_data: Mapping[str, Any]
    all_mode: bool
    need: int
    admin: bool
    tolerations: list[Mapping[str, Any]]
    capacity_requests: dict[str, Quantity]
    candidates: list[int]
    #: What one allocation consumes, for devices that allow multiple allocations.
    consumed: dict[int, dict[str, Quantity]]
    funnel: RequestFunnel
    #: For ``All``: why the full set cannot be taken on this node (``None``: it can).
    all_blocked: str | None = None
    #: For ``All``: matching devices that cannot be taken (in use by allocated claims,
    #: or tainted); the search fails the request when it reaches one.
    blocked: frozenset[int] = frozenset()
    constraints: list[Any] = field(default_factory=list)
    bit: int = 0


@dataclass(slots=True, eq=False)
class Slot:
    """One request of one claim: one plan, or the ordered alternatives of ``firstAvailable``."""

    claim_index: int
    name: str
    alternatives: list[Plan]
    first_available: bool
    chosen: Plan | None = None


def tolerated(
    taint_key: str, taint_value: str, taint_effect: str, tolerations: list[Mapping[str, Any]]
) -> bool:
    """Whether some toleration tolerates the taint (upstream ToleratesTaint)."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint_effect:
            continue
        key = toleration.get("key") or ""
        if key and key != taint_key:
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            return True
        if operator == "Equal" and (toleration.get("value") or "") == taint_value:
            return True
    return False


#: A selector verdict on one device: selected (None), rejected (the funnel reason), or a
#: runtime error as (by the class?, selector number, error).
Verdict = str | tuple[bool, int, CELError] | None

_STEP_RANKS = (
    ("rejected by selector", "of class"),
    ("rejected by selector", "of the request"),
    ("in use", ""),
    ("without", ""),
    ("outside", ""),
    ("short of", ""),
    ("tainted", ""),
)


def _step_order(item: tuple[str, int]) -> tuple[int, int, str]:
    """Funnel steps in the order the filters apply (selectors by number), whatever the
    order devices hit them."""
    reason = item[0]
    for rank, (prefix, part) in enumerate(_STEP_RANKS):
        if reason.startswith(prefix) and part in reason:
            number = reason.split("#", 1)[1].split(" ", 1)[0] if "#" in reason else "0"
            return (rank, int(number) if number.isdigit() else 0, reason)
    return (len(_STEP_RANKS), 0, reason)


def _detail(error: CELError) -> str:
    return str(getattr(error, "detail", None) or error)


def _compile(
    cache: SelectorCache, expressions: list[str], *, where: str
) -> list[Callable[[DeviceRecord], Any]]:
    evaluators = []
    for number, expression in enumerate(expressions):
        try:
            evaluators.append(cache.evaluator(expression))
        except CELError as exc:
            raise AllocationInputError(f"{where}: selector #{number}: CEL compile error: {exc}") from exc
    return evaluators


def _selectors(data: Mapping[str, Any] | None, *, where: str) -> list[str]:
    expressions: list[str] = []
    for index, selector in enumerate((data or {}).get("selectors") or []):
        cel = selector.get("cel") or {}
        expression = cel.get("expression")
        if not expression:
            raise AllocationInputError(
                f"{where}, selector #{index}: CEL expression empty (unsupported selector type?)"
            )
        expressions.append(expression)
    return expressions


class _PlanBuilder:
    """Per-node, per-call state shared by the plans of one pod."""

    def __init__(self, inventory: Inventory, view: NodeView) -> None:
        self.inventory = inventory
        self.view = view
        self.counters: dict[tuple[str, str, int], dict[tuple[str, str], int]] = {}

    def counters_left(self, device: DeviceRecord) -> dict[tuple[str, str], int]:
        key = (device.driver, device.pool, device.generation)
        left = self.counters.get(key)
        if left is None:
            left = self.inventory.counters_available(device)
            self.counters[key] = left
        return left

    def build(
        self,
        *,
        claim_index: int,
        claim: str,
        base: str,
        sub: str | None,
        data: Mapping[str, Any],
        admin: bool,
    ) -> Plan:
        request = f"{base}/{sub}" if sub else base
        where = f"claim {claim}, request {request}"
        class_name = data.get("deviceClassName") or ""
        if not class_name:
            raise AllocationInputError(f"{where}: missing device class name (unsupported request type?)")
        class_data = self.inventory.classes.get(class_name)
        if class_data is None:
            raise AllocationInputError(
                f"{where}: device class {class_name} does not exist; create it or fix spec.devices.requests"
            )
        class_selectors = _selectors(class_data.get("spec"), where=f"class {class_name}")
        request_selectors = _selectors(data, where=where)
        cache = self.inventory.cache
        class_eval = _compile(cache, class_selectors, where=f"class {class_name}")
        request_eval = _compile(cache, request_selectors, where=f"claim {claim}, request {request}")
        mode = data.get("allocationMode") or "ExactCount"
        if mode not in ("ExactCount", "All"):
            raise AllocationInputError(f"{where}: unsupported allocation mode {mode}")
        if mode == "All":
            for pool, _, state, why in self.view.unusable:
                detail = "is currently being updated" if state == "incomplete" else f"is invalid ({why})"
                raise AllocationInputError(
                    f"{where}: asks for all devices, but resource pool {pool.describe()} {detail}"
                )
        count = int(data.get("count") or 0)
        if mode == "ExactCount" and count <= 0:
            count = 1
        capacity_requests = {
            name: quantity(value)
            for name, value in ((data.get("capacity") or {}).get("requests") or {}).items()
        }
        tolerations = list(data.get("tolerations") or [])

        inventory = self.inventory
        devices = inventory.devices
        rejections: dict[str, int] = {}
        candidates: list[int] = []
        consumed: dict[int, dict[str, Quantity]] = {}
        all_devices: list[int] = []
        all_blocked: str | None = None
        blocked: set[int] = set()

        def reject(reason: str) -> None:
            rejections[reason] = rejections.get(reason, 0) + 1

        verdicts = self._verdicts(class_name, class_selectors, request_selectors, class_eval, request_eval)
        if self.view.unreachable:
            hidden = self._hidden_errors(
                class_name, class_selectors, request_selectors, class_eval, request_eval
            )
            verdicts = [*verdicts, *hidden]
        for index, verdict in verdicts:
            device = devices[index]
            in_use = not admin and inventory.exclusive_in_use(device)
            if verdict is not None:
                if isinstance(verdict, str):
                    reject(verdict)
                    continue
                if in_use and mode != "All":
                    # Upstream skips devices in use before their selectors run, except
                    # for ``All``, which selects among every device of the node.
                    reject("in use")
                    continue
                of_class, number, error = verdict
                owner = f"class {class_name}" if of_class else f"claim {claim}"
                raise AllocationInputError(
                    f"{owner}: selector #{number} on device {device.describe()}: CEL runtime error: {_detail(error)}"
                )
            if mode == "All":
                # Like upstream, "all" is every matching device whose published capacity
                # can hold the request; one that is in use, tainted, short of counters or
                # of the capacity left by other shares fails the request instead.
                use: dict[str, Quantity] | str | None = None
                if device.allow_multiple or capacity_requests:
                    use = consumption(device, capacity_requests, in_use=None)
                if isinstance(use, str):
                    reject(use)
                    continue
                all_devices.append(index)
                if device.allow_multiple and use is not None:
                    consumed[index] = use
                blocker = self._blocker(device, in_use=in_use, tolerations=tolerations)
                if in_use or (blocker is not None and blocker.startswith("tainted")):
                    blocked.add(index)
                if blocker is None and device.allow_multiple:
                    left = consumption(device, capacity_requests, in_use=inventory.shared_capacity(device))
                    if isinstance(left, str):
                        blocker = f"shared {left}"
                if all_blocked is None and blocker is not None:
                    all_blocked = f"device {device.describe()} is {blocker}"
                continue
            if in_use:
                reject("in use")
                continue
            use = None
            if device.allow_multiple or capacity_requests:
                shared = inventory.shared_capacity(device) if device.allow_multiple else None
                use = consumption(device, capacity_requests, in_use=shared)
            if isinstance(use, str):
                reject(use)
                continue
            blocker = self._blocker(device, in_use=False, tolerations=tolerations)
            if blocker is not None:
                reject(blocker)
                continue
            candidates.append(index)
            if device.allow_multiple and use is not None:
                consumed[index] = use
        if mode == "All":
            candidates = all_devices
            count = len(all_devices)
        funnel = RequestFunnel(
            claim=claim,
            request=request,
            device_class=class_name,
            needed=None if mode == "All" else count,
            considered=len(self.view.devices),
            steps=tuple(FunnelStep(reason, n) for reason, n in sorted(rejections.items(), key=_step_order)),
            available=len(candidates),
        )
        return Plan(
            claim_index=claim_index,
            claim=claim,
            request=request,
            base=base,
            sub=sub,
            class_name=class_name,
            class_data=class_data,
            all_mode=mode == "All",
            need=count,
            admin=admin,
            tolerations=tolerations,
            capacity_requests=capacity_requests,
            candidates=candidates,
            consumed=consumed,
            funnel=funnel,
            all_blocked=all_blocked,
            blocked=frozenset(blocked),
        )

    def _verdicts(
        self,
        class_name: str,
        class_selectors: list[str],
        request_selectors: list[str],
        class_eval: list[Callable[[DeviceRecord], Any]],
        request_eval: list[Callable[[DeviceRecord], Any]],
    ) -> list[tuple[int, Verdict]]:
        """What the selectors say about each device of the node, cached per node and
        selectors: ``None`` selected, a funnel reason, or the runtime error to report."""
        key = (id(self.view), class_name, tuple(class_selectors), tuple(request_selectors))
        cached: list[tuple[int, Verdict]] | None = self.inventory.node_selections.get(key)
        if cached is not None:
            return cached
        devices = self.inventory.devices
        verdicts: list[tuple[int, Verdict]] = []
        for index in self.view.devices:
            device = devices[index]
            verdict: Verdict = None
            for of_class, evaluators in ((True, class_eval), (False, request_eval)):
                for number, evaluate in enumerate(evaluators):
                    outcome = evaluate(device)
                    if outcome is True:
                        continue
                    if outcome is False:
                        owner = f"class {class_name}" if of_class else "the request"
                        verdict = f"rejected by selector #{number} of {owner}"
                    else:
                        verdict = (of_class, number, outcome)
                    break
                if verdict is not None:
                    break
            verdicts.append((index, verdict))
        self.inventory.node_selections[key] = verdicts
        return verdicts

    def _hidden_errors(
        self,
        class_name: str,
        class_selectors: list[str],
        request_selectors: list[str],
        class_eval: list[Callable[[DeviceRecord], Any]],
        request_eval: list[Callable[[DeviceRecord], Any]],
    ) -> list[tuple[int, tuple[bool, int, CELError]]]:
        """Selector runtime errors on the devices of the node's per-device slices that do
        not reach the node (upstream evaluates them before it checks the node)."""
        key = ("hidden", id(self.view), class_name, tuple(class_selectors), tuple(request_selectors))
        cached: list[tuple[int, tuple[bool, int, CELError]]] | None = self.inventory.node_selections.get(key)
        if cached is not None:
            return cached
        errors: list[tuple[int, tuple[bool, int, CELError]]] = []
        for index in self.view.unreachable:
            device = self.inventory.devices[index]
            for of_class, evaluators in ((True, class_eval), (False, request_eval)):
                outcome: Any = True
                for number, evaluate in enumerate(evaluators):
                    outcome = evaluate(device)
                    if outcome is not True:
                        if outcome is not False:
                            errors.append((index, (of_class, number, outcome)))
                        break
                if outcome is not True:
                    break
        self.inventory.node_selections[key] = errors
        return errors

    def _blocker(
        self, device: DeviceRecord, *, in_use: bool, tolerations: list[Mapping[str, Any]]
    ) -> str | None:
        """Why a selected device cannot be taken whatever else is chosen (``None``: it can)."""
        if in_use:
            return "in use"
        if device.consumes and not (device.allow_multiple and self.inventory.shared_in_use(device)):
            left = self.counters_left(device)
            for set_name, counters in device.consumes:
                for counter, amount in counters:
                    if left.get((set_name, counter), 0) < amount:
                        return "short of shared counters"
        for taint in device.taints:
            if taint.effect in _BLOCKING_EFFECTS and not tolerated(
                taint.key, taint.value, taint.effect, tolerations
            ):
                return f"tainted {taint.describe()}"
        return None


def build_slots(
    inventory: Inventory, view: NodeView, claims: list[Mapping[str, Any]], keys: list[str]
) -> list[Slot]:
    """The slots of the search: one per request, claims in order, requests in spec order."""
    builder = _PlanBuilder(inventory, view)
    slots: list[Slot] = []
    for claim_index, (claim, key) in enumerate(zip(claims, keys, strict=True)):
        devices = (claim.get("spec") or {}).get("devices") or {}
        for request in devices.get("requests") or []:
            name = request.get("name", "")
            exactly = request.get("exactly")
            first_available = request.get("firstAvailable")
            if exactly is not None and first_available:
                raise AllocationInputError(
                    f"claim {key}, request {name}: exactly one of `exactly` or `firstAvailable` is required, "
                    "but multiple fields are set"
                )
            if exactly is not None:
                plan = builder.build(
                    claim_index=claim_index,
                    claim=key,
                    base=name,
                    sub=None,
                    data=exactly,
                    admin=bool(exactly.get("adminAccess")),
                )
                slots.append(
                    Slot(claim_index=claim_index, name=name, alternatives=[plan], first_available=False)
                )
            elif first_available:
                plans = [
                    builder.build(
                        claim_index=claim_index,
                        claim=key,
                        base=name,
                        sub=sub.get("name", ""),
                        data=sub,
                        admin=False,
                    )
                    for sub in first_available
                ]
                slots.append(
                    Slot(claim_index=claim_index, name=name, alternatives=plans, first_available=True)
                )
            else:
                raise AllocationInputError(
                    f"claim {key}, request {name}: exactly one of `exactly` or `firstAvailable` is required"
                )
    return slots
