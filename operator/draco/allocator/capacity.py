"""Consumable capacity: how much of a device one request consumes, and whether it fits.

A device with ``allowMultipleAllocations`` is shared: each allocation consumes an amount
of every capacity the device publishes (the requested amount rounded up by the request
policy, the policy's default when nothing is requested, else the whole capacity), and
the amounts of all allocations must stay within the published value. A device without
it is exclusive, but a request's ``capacity.requests`` still filters it (the requested
amount must fit the published value), as upstream does.

A capacity has one name however it is written: ``memory`` in a slice of driver
``gpu.example.com`` is ``gpu.example.com/memory``, and a request may name it either way
(Kubernetes 1.38, kubernetes/kubernetes#142202). A device that publishes both spellings has
one such capacity, the fully qualified entry's (the inventory drops the other), as for
constraints and in CEL. A request that names one capacity under both spellings is an
error, as upstream's ("capacity ... requested both as ... and as ..."): which amount was
meant cannot be told. Consumed capacity is written under the name the slice uses; what
shares recorded under either spelling consumed counts against the one capacity.

Upstream keys consumed capacity by device name. When a pool publishes one name on two
nodes, shares of the shareable one consume capacity that the other, exclusive one then
lacks: it needs its requested amounts, or all of a capacity it is not asked for, on top
of what those shares hold, whoever asks (admin access too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draco.allocator.devices import CapacityRecord, DeviceRecord
from draco.api.quantity import Quantity
from draco.errors import AllocationInputError

__all__ = [
    "CapacityNamedTwice",
    "capacity_name",
    "consumption",
    "quantity",
    "short_of",
    "used_by_device_name",
]


class CapacityNamedTwice(AllocationInputError):
    """A request names one capacity of a device both with and without its driver's domain
    (the plan adds which claim and request)."""


def quantity(value: Any) -> Quantity:
    return value if isinstance(value, Quantity) else Quantity(str(value))


def capacity_name(device: DeviceRecord, name: str) -> str | None:
    """The name under which ``device`` publishes the capacity ``name`` (qualified or
    not), ``None`` when it publishes none."""
    if name in device.capacity:
        return name
    domain, slash, ident = name.partition("/")
    if not slash:
        qualified = f"{device.driver}/{name}"
        return qualified if qualified in device.capacity else None
    return ident if domain == device.driver and ident in device.capacity else None


def _requests_by_device_name(device: DeviceRecord, requests: Mapping[str, Quantity]) -> dict[str, Quantity]:
    """``requests`` keyed by ``device``'s own capacity names (all of them published)."""
    out: dict[str, Quantity] = {}
    spelled: dict[str, str] = {}
    for name, amount in requests.items():
        own = capacity_name(device, name)
        if own is None:
            continue
        if own in spelled:
            ident = own.rpartition("/")[2]
            raise CapacityNamedTwice(f'capacity "{ident}" requested both as "{name}" and as "{spelled[own]}"')
        spelled[own] = name
        out[own] = amount
    return out


def used_by_device_name(device: DeviceRecord, used: Mapping[str, int]) -> dict[str, int]:
    """Consumed capacity (nanos) keyed by ``device``'s own capacity names: shares recorded
    under either spelling of one capacity add up; names it does not publish are dropped."""
    if all(name in device.capacity for name in used):
        return dict(used)
    out: dict[str, int] = {}
    for name, amount in used.items():
        own = capacity_name(device, name)
        if own is not None:
            out[own] = out.get(own, 0) + amount
    return out


def _rounded(requested: Quantity | None, cap: CapacityRecord) -> Quantity:
    policy = cap.policy
    if requested is None:
        if policy and policy.get("default") is not None:
            return quantity(policy["default"])
        return cap.value
    if not policy:
        return requested
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        minimum = quantity(valid_range["min"])
        if requested.nanos < minimum.nanos:
            return minimum
        if valid_range.get("step") is None:
            return requested
        step = quantity(valid_range["step"]).nanos
        if step <= 0:
            return requested
        steps = -(-(requested.nanos - minimum.nanos) // step)
        # Written in the step's format, as upstream (a 1G step gives 10G, not 9765625Ki).
        return Quantity.from_nanos(minimum.nanos + steps * step, fmt=quantity(valid_range["step"]).format)
    valid_values = policy.get("validValues")
    if valid_values:
        for value in valid_values:
            candidate = quantity(value)
            if requested.nanos <= candidate.nanos:
                return candidate
    return requested


def _violates(amount: Quantity, cap: CapacityRecord) -> bool:
    policy = cap.policy
    if not policy:
        return False
    default = policy.get("default")
    if default is not None and quantity(default).nanos == amount.nanos:
        return False
    valid_range = policy.get("validRange")
    if valid_range:
        if valid_range.get("max") is not None and amount.nanos > quantity(valid_range["max"]).nanos:
            return True
        if valid_range.get("step") is not None and valid_range.get("min") is not None:
            step = quantity(valid_range["step"]).nanos
            if step > 0 and (amount.nanos - quantity(valid_range["min"]).nanos) % step:
                return True
        return False
    valid_values = policy.get("validValues")
    if valid_values:
        return all(quantity(value).nanos != amount.nanos for value in valid_values)
    return False


def consumption(
    device: DeviceRecord,
    requests: Mapping[str, Quantity],
    *,
    in_use: Mapping[str, int] | None,
) -> dict[str, Quantity] | str:
    """What one allocation of ``device`` for ``requests`` consumes, or why it cannot.

    ``in_use`` is the capacity already consumed (nanos per capacity name). The answer is
    a reason for the explanation funnel when the device is ineligible.
    """
    for name in requests:
        if capacity_name(device, name) is None:
            return f"without capacity {name}"
    requests = _requests_by_device_name(device, requests)
    consumed: dict[str, Quantity] = {}
    for name, cap in device.capacity.items():
        amount = _rounded(requests.get(name), cap)
        if _violates(amount, cap):
            return f"outside the request policy of capacity {name}"
        used = in_use.get(name, 0) if in_use else 0
        if used + amount.nanos > cap.value.nanos:
            return f"without enough {name} left"
        consumed[name] = amount
    return consumed


def short_of(
    device: DeviceRecord, requests: Mapping[str, Quantity], *, in_use: Mapping[str, int]
) -> str | None:
    """The first capacity of ``device`` that one allocation for ``requests`` would take
    beyond what ``in_use`` leaves (``None``: it fits), for a request that
    :func:`consumption` already admits on the device's published capacity."""
    requests = _requests_by_device_name(device, requests)
    for name, cap in device.capacity.items():
        if in_use.get(name, 0) + _rounded(requests.get(name), cap).nanos > cap.value.nanos:
            return name
    return None
