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
from typing import Any, NoReturn

from draco.allocator.capacity import CapacityNamedTwice, consumption, quantity, short_of
from draco.allocator.devices import DeviceRecord
from draco.allocator.inventory import Inventory, NodeView
from draco.allocator.outcome import FunnelStep, RequestFunnel
from draco.allocator.selectors import SelectorCache
from draco.api.quantity import Quantity
from draco.api.tolerations import tolerates_any
from draco.errors import AllocationInputError, CELError

__all__ = ["Plan", "Planner", "Selection", "Slot", "build_slots", "exact_count"]

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_NOTHING: frozenset[int] = frozenset()


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
    #: Devices the node offers, and how many each filter removed (see :attr:`funnel`).
    considered: int
    rejections: dict[str, int]
    #: For ``All``: why the full set cannot be taken on this node (``None``: it can).
    all_blocked: str | None = None
    #: For ``All``: matching devices that cannot be taken (in use by allocated claims,
    #: or tainted); the search fails the request when it reaches one.
    blocked: frozenset[int] = frozenset()
    #: For ``All``: devices that cannot be shared and lack a capacity that shares under
    #: their name consumed (capacity name by device); the search fails the request when
    #: it reaches one, after the constraints, as upstream checks capacity last.
    short: Mapping[int, str] = field(default_factory=dict)
    constraints: list[Any] = field(default_factory=list)
    bit: int = 0

    @property
    def funnel(self) -> RequestFunnel:
        """How the node's devices were narrowed down to the candidates; built only when a
        reason needs it, since most plans are satisfied."""
        return RequestFunnel(
            claim=self.claim,
            request=self.request,
            device_class=self.class_name,
            needed=None if self.all_mode else self.need,
            considered=self.considered,
            steps=tuple(
                FunnelStep(reason, n) for reason, n in sorted(self.rejections.items(), key=_step_order)
            ),
            available=len(self.candidates),
        )


@dataclass(slots=True, eq=False)
class Slot:
    """One request of one claim: one plan, or the ordered alternatives of ``firstAvailable``."""

    claim_index: int
    name: str
    alternatives: list[Plan]
    first_available: bool
    chosen: Plan | None = None


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


def _selector_failed(
    verdict: tuple[bool, int, CELError], device: DeviceRecord, *, class_name: str, claim: str
) -> NoReturn:
    of_class, number, error = verdict
    owner = f"class {class_name}" if of_class else f"claim {claim}"
    raise AllocationInputError(
        f"{owner}: selector #{number} on device {device.describe()}: CEL runtime error: {_detail(error)}"
    )


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


def exact_count(data: Mapping[str, Any]) -> int:
    """How many devices an ``ExactCount`` request asks for (``count``, 1 when unset)."""
    count = int(data.get("count") or 0)
    return count if count > 0 else 1


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


@dataclass(slots=True, frozen=True)
class Selection:
    """The devices of a node that a class's and a request's selectors select, in search
    order, when no selector failed on any device they looked at."""

    devices: tuple[DeviceRecord, ...]


#: Cached "no clean selection" (``None`` is "not cached yet").
_FAILED = object()


class Planner:
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
        class_name = data.get("deviceClassName") or ""
        if not class_name:
            raise AllocationInputError(
                f"claim {claim}, request {request}: missing device class name (unsupported request type?)"
            )
        class_data = self.inventory.classes.get(class_name)
        if class_data is None:
            raise AllocationInputError(
                f"claim {claim}, request {request}: device class {class_name} does not exist; "
                "create it or fix spec.devices.requests"
            )
        class_selectors, class_eval = self._class_selectors(class_name, class_data)
        request_selectors, request_eval = self._request_selectors(
            data, where=f"claim {claim}, request {request}"
        )
        mode = data.get("allocationMode") or "ExactCount"
        if mode == "ExactCount":
            count = exact_count(data)
        elif mode == "All":
            for pool, _, state, why in self.view.unusable:
                detail = "is currently being updated" if state == "incomplete" else f"is invalid ({why})"
                raise AllocationInputError(
                    f"claim {claim}, request {request}: asks for all devices, but resource pool "
                    f"{pool.describe()} {detail}"
                )
            count = 0
        else:
            raise AllocationInputError(
                f"claim {claim}, request {request}: unsupported allocation mode {mode}"
            )
        capacity = data.get("capacity")
        capacity_requests = (
            {name: quantity(value) for name, value in (capacity.get("requests") or {}).items()}
            if capacity
            else {}
        )
        tolerations = list(data.get("tolerations") or ())

        rejections: dict[str, int] = {}
        verdicts = self._verdicts(class_name, class_selectors, request_selectors, class_eval, request_eval)
        if self.view.unreachable:
            hidden = self._hidden_errors(
                class_name, class_selectors, request_selectors, class_eval, request_eval
            )
            verdicts = [*verdicts, *hidden]
        consumed: dict[int, dict[str, Quantity]] = {}
        all_blocked: str | None = None
        blocked: set[int] = set()
        short: dict[int, str] = {}
        try:
            if mode == "All":
                candidates, all_blocked, blocked = self._all_candidates(
                    verdicts,
                    class_name=class_name,
                    claim=claim,
                    admin=admin,
                    capacity_requests=capacity_requests,
                    tolerations=tolerations,
                    rejections=rejections,
                    consumed=consumed,
                    short=short,
                )
                count = len(candidates)
            else:
                candidates = self._candidates(
                    verdicts,
                    class_name=class_name,
                    claim=claim,
                    admin=admin,
                    capacity_requests=capacity_requests,
                    tolerations=tolerations,
                    rejections=rejections,
                    consumed=consumed,
                )
        except CapacityNamedTwice as exc:
            raise AllocationInputError(
                f"claim {claim}, request {request}: {exc}; name it once in capacity.requests"
            ) from exc
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
            considered=len(self.view.devices),
            rejections=rejections,
            all_blocked=all_blocked,
            blocked=frozenset(blocked) if blocked else _NOTHING,
            short=short,
        )

    def _candidates(
        self,
        verdicts: list[tuple[int, Verdict]],
        *,
        class_name: str,
        claim: str,
        admin: bool,
        capacity_requests: dict[str, Quantity],
        tolerations: list[Mapping[str, Any]],
        rejections: dict[str, int],
        consumed: dict[int, dict[str, Quantity]],
    ) -> list[int]:
        """The devices an ``ExactCount`` request may take, in search order; the others
        counted in ``rejections`` by the first filter that removed them."""
        inventory = self.inventory
        devices = inventory.devices
        exclusive_in_use = inventory.exclusive_in_use
        candidates: list[int] = []
        for index, verdict in verdicts:
            if verdict is not None:
                if isinstance(verdict, str):
                    rejections[verdict] = rejections.get(verdict, 0) + 1
                    continue
                device = devices[index]
                if not admin and exclusive_in_use(device):
                    # Upstream skips devices in use before their selectors run.
                    rejections["in use"] = rejections.get("in use", 0) + 1
                    continue
                _selector_failed(verdict, device, class_name=class_name, claim=claim)
            device = devices[index]
            if not admin and exclusive_in_use(device):
                rejections["in use"] = rejections.get("in use", 0) + 1
                continue
            use: dict[str, Quantity] | None = None
            shared = inventory.shared_capacity(device)
            if device.allow_multiple or capacity_requests or shared:
                # Shares under the device's name count against an exclusive device too,
                # whoever asks (see draco.allocator.capacity).
                fits = consumption(device, capacity_requests, in_use=shared)
                if isinstance(fits, str):
                    rejections[fits] = rejections.get(fits, 0) + 1
                    continue
                use = fits
            if device.consumes or device.taints:
                blocker = self._blocker(device, in_use=False, tolerations=tolerations)
                if blocker is not None:
                    rejections[blocker] = rejections.get(blocker, 0) + 1
                    continue
            candidates.append(index)
            if device.allow_multiple and use is not None:
                consumed[index] = use
        return candidates

    def _all_candidates(
        self,
        verdicts: list[tuple[int, Verdict]],
        *,
        class_name: str,
        claim: str,
        admin: bool,
        capacity_requests: dict[str, Quantity],
        tolerations: list[Mapping[str, Any]],
        rejections: dict[str, int],
        consumed: dict[int, dict[str, Quantity]],
        short: dict[int, str],
    ) -> tuple[list[int], str | None, set[int]]:
        """The devices of an ``All`` request, why the set cannot be taken (``None``: it
        can), and the devices that block it (``short``: those short of capacity that
        shares under their name hold).

        Like upstream, "all" is every matching device whose published capacity can hold
        the request, in use or not; one that is in use, tainted, short of counters or of
        the capacity left by other shares fails the request instead."""
        inventory = self.inventory
        devices = inventory.devices
        all_devices: list[int] = []
        all_blocked: str | None = None
        blocked: set[int] = set()
        for index, verdict in verdicts:
            if isinstance(verdict, str):
                rejections[verdict] = rejections.get(verdict, 0) + 1
                continue
            device = devices[index]
            if verdict is not None:
                _selector_failed(verdict, device, class_name=class_name, claim=claim)
            in_use = not admin and inventory.exclusive_in_use(device)
            use: dict[str, Quantity] | str | None = None
            if device.allow_multiple or capacity_requests:
                use = consumption(device, capacity_requests, in_use=None)
            if isinstance(use, str):
                rejections[use] = rejections.get(use, 0) + 1
                continue
            all_devices.append(index)
            if device.allow_multiple and use is not None:
                consumed[index] = use
            blocker = self._blocker(device, in_use=in_use, tolerations=tolerations)
            if in_use or (blocker is not None and blocker.startswith("tainted")):
                blocked.add(index)
            shared = inventory.shared_capacity(device)
            if not device.allow_multiple and shared:
                lacking = short_of(device, capacity_requests, in_use=shared)
                if lacking is not None:
                    short[index] = lacking
                    if blocker is None:
                        blocker = f"without enough {lacking} left (shares under its name hold some)"
            if blocker is None and device.allow_multiple:
                left = consumption(device, capacity_requests, in_use=shared)
                if isinstance(left, str):
                    blocker = f"shared {left}"
            if all_blocked is None and blocker is not None:
                all_blocked = f"device {device.describe()} is {blocker}"
        return all_devices, all_blocked, blocked

    def selection(
        self, class_name: str, class_data: Mapping[str, Any], data: Mapping[str, Any]
    ) -> Selection | None:
        """What the class ``class_name`` and the request ``data`` select on this node;
        ``None`` when a selector does not compile or fails on a device, which
        :meth:`build` reports. Cached per node and selectors."""
        try:
            class_selectors, class_eval = self._class_selectors(class_name, class_data)
            request_selectors, request_eval = self._request_selectors(data, where="")
        except AllocationInputError:
            return None
        key = ("selection", id(self.view), class_name, class_selectors, request_selectors)
        cached = self.inventory.node_selections.get(key)
        if cached is None:
            verdicts = self._verdicts(
                class_name, class_selectors, request_selectors, class_eval, request_eval
            )
            failed = any(
                verdict is not None and not isinstance(verdict, str) for _, verdict in verdicts
            ) or bool(
                self.view.unreachable
                and self._hidden_errors(
                    class_name, class_selectors, request_selectors, class_eval, request_eval
                )
            )
            devices = self.inventory.devices
            cached = (
                _FAILED
                if failed
                else Selection(
                    devices=tuple(devices[index] for index, verdict in verdicts if verdict is None)
                )
            )
            self.inventory.node_selections[key] = cached
        return None if cached is _FAILED else cached  # type: ignore[return-value]

    def blocker(self, device: DeviceRecord, *, tolerations: list[Mapping[str, Any]]) -> str | None:
        """Why a selected device that is not in use cannot be taken whatever else is
        chosen (counters, a taint not tolerated); ``None``: it can."""
        return self._blocker(device, in_use=False, tolerations=tolerations)

    def _request_selectors(
        self, data: Mapping[str, Any], *, where: str
    ) -> tuple[tuple[str, ...], list[Callable[[DeviceRecord], Any]]]:
        """A request's selector expressions and evaluators (none without selectors);
        raises :class:`AllocationInputError` naming ``where`` for one that is empty or does
        not compile."""
        if not data.get("selectors"):
            return (), []
        expressions = _selectors(data, where=where)
        return tuple(expressions), _compile(self.inventory.cache, expressions, where=where)

    def _class_selectors(
        self, class_name: str, class_data: Mapping[str, Any]
    ) -> tuple[tuple[str, ...], list[Callable[[DeviceRecord], Any]]]:
        """A class's selector expressions and evaluators, compiled once per inventory (its
        classes do not change); a class that does not compile raises every time."""
        key = ("class", class_name)
        cached: tuple[tuple[str, ...], list[Callable[[DeviceRecord], Any]]] | None = (
            self.inventory.node_selections.get(key)
        )
        if cached is None:
            expressions = _selectors(class_data.get("spec"), where=f"class {class_name}")
            cached = (
                tuple(expressions),
                _compile(self.inventory.cache, expressions, where=f"class {class_name}"),
            )
            self.inventory.node_selections[key] = cached
        return cached

    def _verdicts(
        self,
        class_name: str,
        class_selectors: tuple[str, ...],
        request_selectors: tuple[str, ...],
        class_eval: list[Callable[[DeviceRecord], Any]],
        request_eval: list[Callable[[DeviceRecord], Any]],
    ) -> list[tuple[int, Verdict]]:
        """What the selectors say about each device of the node, cached per node and
        selectors: ``None`` selected, a funnel reason, or the runtime error to report."""
        key = (id(self.view), class_name, class_selectors, request_selectors)
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
        class_selectors: tuple[str, ...],
        request_selectors: tuple[str, ...],
        class_eval: list[Callable[[DeviceRecord], Any]],
        request_eval: list[Callable[[DeviceRecord], Any]],
    ) -> list[tuple[int, tuple[bool, int, CELError]]]:
        """Selector runtime errors on the devices of the node's per-device slices that do
        not reach the node (upstream evaluates them before it checks the node)."""
        key = ("hidden", id(self.view), class_name, class_selectors, request_selectors)
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
            if taint.effect in _BLOCKING_EFFECTS and not tolerates_any(
                tolerations, key=taint.key, value=taint.value, effect=taint.effect
            ):
                return f"tainted {taint.describe()}"
        return None


def build_slots(
    inventory: Inventory, view: NodeView, claims: list[Mapping[str, Any]], keys: list[str]
) -> list[Slot]:
    """The slots of the search: one per request, claims in order, requests in spec order."""
    builder = Planner(inventory, view)
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
