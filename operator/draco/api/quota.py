"""Device quota: how many devices of each DeviceClass a claim counts against a ResourceQuota.

Upstream's ResourceQuota limits the devices a namespace's claims ask for, per class, with
the entry ``<class>.deviceclass.resource.k8s.io/devices`` in ``spec.hard``. draco's claims
are its own kind, so its entries are named the same way under its group:
``<class>.deviceclass.resource.draco.dev/devices``. A claim counts what upstream's quota
evaluator for claims (``pkg/quota/v1/evaluator/core/resource_claims.go``) counts, at
creation, from its spec (not from what it was allocated):

- each request adds, for its class, its ``count`` in mode ``ExactCount`` (1 when unset, the
  API's default) and 32 in mode ``All`` (the most devices an allocation can hold: the
  worst case); an unknown mode counts nothing;
- a ``firstAvailable`` request adds, per class, the largest of its subrequests for that
  class (the worst case of the alternatives);
- admin access counts like any other request (KEP-5018: "Requests asking for adminAccess
  contribute to the quota").

A claim is refused, as upstream's quota admission refuses it, when any quota of its
namespace with an entry for one of its classes would go over its hard limit: the message
names the quota and the requested, used and limited amounts of the entries that fail
(``exceeded quota: <quota>, requested: <entry>=2, used: <entry>=1, limited: <entry>=2``).
A quota whose ``status.used`` has no value for such an entry yet is not enforced on
guesses: the claim is refused with ``status unknown for quota`` until the operator has
counted the namespace (upstream's admission does the same until kube-controller-manager
has).

Pure: bodies in, numbers and messages out. The webhook charges a claim (`charge`), the
operator keeps ``status.used`` (`namespace_usage`, `status_patch`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from draco.api.constants import ALLOCATION_RESULTS_MAX_SIZE, GROUP
from draco.quantity import Quantity

__all__ = [
    "DEVICES_SUFFIX",
    "QUOTA_EXCEEDED",
    "QuotaCharge",
    "QuotaRefusal",
    "charge",
    "claim_usage",
    "class_of_entry",
    "draco_entries",
    "is_quota_refusal",
    "namespace_usage",
    "quota_entry",
    "recount_due",
    "status_patch",
]

#: The suffix of draco's per-class quota entries (upstream: ``.deviceclass.resource.k8s.io/devices``).
DEVICES_SUFFIX: Final = f".deviceclass.{GROUP}/devices"
#: How upstream's quota admission starts the message of a refusal.
QUOTA_EXCEEDED: Final = "exceeded quota"
_STATUS_UNKNOWN: Final = "status unknown for quota"
_REFUSAL: Final = re.compile(rf"\b({QUOTA_EXCEEDED}|{_STATUS_UNKNOWN}): ")


def quota_entry(class_name: str) -> str:
    """The ResourceQuota entry that limits the devices of class `class_name`."""
    return f"{class_name}{DEVICES_SUFFIX}"


def class_of_entry(entry: str) -> str | None:
    """The DeviceClass an entry limits, or None when it is not one of draco's."""
    if entry.endswith(DEVICES_SUFFIX) and len(entry) > len(DEVICES_SUFFIX):
        return entry[: -len(DEVICES_SUFFIX)]
    return None


def _devices(request: Mapping[str, Any]) -> int:
    mode = request.get("allocationMode") or "ExactCount"
    if mode == "ExactCount":
        count = request.get("count")
        return int(count) if isinstance(count, int) and not isinstance(count, bool) else 1
    if mode == "All":
        return ALLOCATION_RESULTS_MAX_SIZE
    return 0  # an unknown mode (a newer API): upstream counts nothing either


def claim_usage(claim_spec: Mapping[str, Any]) -> dict[str, int]:
    """The devices a claim (its ``spec``) counts, by quota entry (see the module docstring)."""
    usage: dict[str, int] = {}
    for request in (claim_spec.get("devices") or {}).get("requests") or ():
        if not isinstance(request, Mapping):
            continue
        alternatives = request.get("firstAvailable")
        if alternatives:
            worst: dict[str, int] = {}
            for sub in alternatives:
                if isinstance(sub, Mapping) and sub.get("deviceClassName"):
                    entry = quota_entry(str(sub["deviceClassName"]))
                    worst[entry] = max(worst.get(entry, 0), _devices(sub))
            for entry, count in worst.items():
                usage[entry] = usage.get(entry, 0) + count
            continue
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping) and exactly.get("deviceClassName"):
            entry = quota_entry(str(exactly["deviceClassName"]))
            usage[entry] = usage.get(entry, 0) + _devices(exactly)
    return usage


def namespace_usage(claims: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """What the claims of a namespace count together, by quota entry."""
    total: dict[str, int] = {}
    for claim in claims:
        for entry, count in claim_usage(claim.get("spec") or {}).items():
            total[entry] = total.get(entry, 0) + count
    return total


def _count(value: Any) -> Fraction | None:
    """A quota amount (a quantity), None when unreadable."""
    try:
        return Quantity.from_json(value).as_fraction()
    except ValueError:
        return None


def _text(value: Fraction) -> str:
    """A quota amount as kube-apiserver prints a quantity (``2``, ``1500m``)."""
    return Quantity.from_fraction(value).to_json()


def draco_entries(quota: Mapping[str, Any]) -> dict[str, Fraction]:
    """The hard limits of draco's entries in a ResourceQuota's ``spec.hard``."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    out: dict[str, Fraction] = {}
    for entry, value in hard.items():
        if class_of_entry(str(entry)) is not None and (limit := _count(value)) is not None:
            out[str(entry)] = limit
    return out


def _used(quota: Mapping[str, Any]) -> dict[str, Fraction]:
    used = (quota.get("status") or {}).get("used") or {}
    return {str(k): n for k, v in used.items() if (n := _count(v)) is not None}


def _pretty(values: Mapping[str, Fraction | int]) -> str:
    """Upstream's ``prettyPrint``: ``name=value`` pairs sorted by name, comma-separated."""
    return ",".join(f"{k}={_text(Fraction(values[k]))}" for k in sorted(values))


@dataclass(frozen=True)
class QuotaRefusal:
    """Why a claim is refused: upstream's quota admission message (a 403 Forbidden)."""

    message: str


@dataclass(frozen=True)
class QuotaCharge:
    """The quotas a claim is charged to: for each, the ``status.used`` entries to write
    (the old value plus the claim's), and the resourceVersion they were decided on."""

    updates: Sequence[tuple[Mapping[str, Any], dict[str, str]]] = field(default_factory=tuple)


def charge(quotas: Iterable[Mapping[str, Any]], usage: Mapping[str, int]) -> QuotaCharge | QuotaRefusal:
    """Charge `usage` (a claim's `claim_usage`) to the namespace's `quotas`, or refuse it.

    Quotas are looked at by name (upstream's order); the first that fails refuses the claim.
    """
    counted = {entry: n for entry, n in usage.items() if n > 0}
    updates: list[tuple[Mapping[str, Any], dict[str, str]]] = []
    for quota in sorted(quotas, key=lambda q: str((q.get("metadata") or {}).get("name") or "")):
        hard = {entry: limit for entry, limit in draco_entries(quota).items() if entry in counted}
        if not hard:
            continue
        name = str((quota.get("metadata") or {}).get("name") or "")
        used = _used(quota)
        unknown = sorted(entry for entry in hard if entry not in used)
        if unknown:
            return QuotaRefusal(f"{_STATUS_UNKNOWN}: {name}, resource: {unknown[0]}")
        after = {entry: used[entry] + counted[entry] for entry in hard}
        over = sorted(entry for entry in hard if after[entry] > hard[entry])
        if over:
            return QuotaRefusal(
                f"{QUOTA_EXCEEDED}: {name}, requested: {_pretty({e: counted[e] for e in over})}, "
                f"used: {_pretty({e: used[e] for e in over})}, limited: {_pretty({e: hard[e] for e in over})}"
            )
        updates.append((quota, {entry: _text(value) for entry, value in after.items()}))
    return QuotaCharge(tuple(updates))


def status_patch(quota: Mapping[str, Any], usage: Mapping[str, int]) -> dict[str, Any] | None:
    """The merge patch of a quota's status that records `usage` (a namespace's
    `namespace_usage`) for draco's entries of its ``spec.hard`` (``status.hard`` too, as
    kube-controller-manager copies it), or None when the status says so already. Entries
    that are not draco's are never touched; draco's entries no longer in ``spec.hard`` are
    removed (``null``)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    status = quota.get("status") or {}
    old_hard = status.get("hard") or {}
    old_used = status.get("used") or {}
    ours = {str(e): v for e, v in hard.items() if class_of_entry(str(e)) is not None}
    new_hard: dict[str, Any] = {e: v for e, v in ours.items() if old_hard.get(e) != v}
    new_used: dict[str, Any] = {
        e: str(usage.get(e, 0)) for e in ours if _count(old_used.get(e)) != usage.get(e, 0)
    }
    for stale in (e for e in {*old_hard, *old_used} if class_of_entry(str(e)) is not None and e not in ours):
        if stale in old_hard:
            new_hard[stale] = None
        if stale in old_used:
            new_used[stale] = None
    patch: dict[str, Any] = {}
    if new_hard:
        patch["hard"] = new_hard
    if new_used:
        patch["used"] = new_used
    return {"status": patch} if patch else None


def recount_due(quota: Mapping[str, Any]) -> bool:
    """True when a quota's status does not cover draco's entries of its ``spec.hard`` as
    they are now (new, changed or removed entries): its usage must be counted. A change of
    ``status.used`` alone is a charge or a count, not a reason to count again."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    status = quota.get("status") or {}
    ours = {str(e): v for e, v in hard.items() if class_of_entry(str(e)) is not None}
    counted_hard = {
        str(e): v for e, v in (status.get("hard") or {}).items() if class_of_entry(str(e)) is not None
    }
    counted_used = {str(e) for e in status.get("used") or {} if class_of_entry(str(e)) is not None}
    return ours != counted_hard or set(ours) != counted_used


def is_quota_refusal(message: str) -> bool:
    """True when an API error message is a quota refusal (upstream's or the webhook's)."""
    return _REFUSAL.search(message) is not None
