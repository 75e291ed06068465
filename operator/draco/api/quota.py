"""Device quota: how many devices a claim counts against a ResourceQuota.

Upstream's ResourceQuota limits the devices a namespace's claims ask for, per class, with
the entry ``<class>.deviceclass.resource.k8s.io/devices`` in ``spec.hard``. draco's claims
are its own kind, so its entries are named the same way under its group:
``<class>.deviceclass.resource.draco.dev/devices``. Since Kubernetes 1.35 (DRAExtendedResource,
kubernetes/kubernetes PR #134210) a claim's devices also count against the quota of the
extended resources its class backs, so one limit holds whether devices are asked for by
claims or by ``resources.requests``: ``requests.deviceclass.resource.draco.dev/<class>``
(the class's implicit name, draco's for upstream's ``deviceclass.resource.kubernetes.io``)
and, when the class sets ``extendedResourceName``, ``requests.<that name>``. A claim counts
what upstream's quota evaluator for claims (``pkg/quota/v1/evaluator/core/resource_claims.go``)
counts, at creation, from its spec (not from what it was allocated):

- each request adds, for its class, its ``count`` in mode ``ExactCount`` (1 when unset, the
  API's default) and 32 in mode ``All`` (the most devices an allocation can hold: the
  worst case); an unknown mode counts nothing;
- a ``firstAvailable`` request adds, per class, the largest of its subrequests for that
  class (the worst case of the alternatives);
- admin access counts like any other request (KEP-5018: "Requests asking for adminAccess
  contribute to the quota");
- under each ``requests.*`` entry a claim counts its class's devices; the special claim of
  a pod's extended resources (annotated ``resource.draco.dev/extended-resource-claim:
  "true"``) only what goes beyond what its pod counts there itself: when the claim's
  controller is that pod (its UID) and the pod's record of its special claim names this
  claim, or, with no record yet, this is the pod's first such claim (upstream's
  ``getVerifiedPodUsage``, Kubernetes 1.38). Anything else counts in full.

The ``requests.*`` entries are shared with kube-controller-manager: its quota controller
counts the pods' requests there and writes only those, so the operator writes pods plus
claims (`namespace_usage`, pods counted as its pod evaluator counts them: not Succeeded or
Failed, their effective requests) and writes again when it finds such an entry below its
count (`undercounted`): a write of kube-controller-manager, which never reacts to
``status.used`` changes, so the two settle after one write each.

A claim is refused, as upstream's quota admission refuses it, when any quota of its
namespace with an entry it counts would go over its hard limit: the message names the
quota and the requested, used and limited amounts of the entries that fail
(``exceeded quota: <quota>, requested: <entry>=2, used: <entry>=1, limited: <entry>=2``).
A quota whose ``status.used`` has no value for such an entry yet is not enforced on
guesses: the claim is refused with ``status unknown for quota`` until the operator has
counted the namespace (upstream's admission does the same until kube-controller-manager
has).

Pure: bodies in, numbers and messages out. The webhook charges a claim (`charge`), the
operator keeps ``status.used`` (`namespace_usage`, `status_patch`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from draco.api.constants import (
    ALLOCATION_RESULTS_MAX_SIZE,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION,
    GROUP,
    IMPLICIT_EXTENDED_RESOURCE_PREFIX,
)
from draco.quantity import Quantity

__all__ = [
    "DEVICES_SUFFIX",
    "NO_CLASSES",
    "QUOTA_EXCEEDED",
    "REQUESTS_PREFIX",
    "QuotaCharge",
    "QuotaNames",
    "QuotaRefusal",
    "charge",
    "claim_usage",
    "class_of_entry",
    "controlling_pod",
    "draco_entries",
    "draco_usage",
    "is_quota_refusal",
    "namespace_usage",
    "owner_usage",
    "pod_counts",
    "pod_requests",
    "quota_entry",
    "recount_due",
    "status_patch",
    "undercounted",
]

#: The suffix of draco's per-class quota entries (upstream: ``.deviceclass.resource.k8s.io/devices``).
DEVICES_SUFFIX: Final = f".deviceclass.{GROUP}/devices"
#: How upstream's quota admission starts the message of a refusal.
QUOTA_EXCEEDED: Final = "exceeded quota"
_STATUS_UNKNOWN: Final = "status unknown for quota"
_REFUSAL: Final = re.compile(rf"\b({QUOTA_EXCEEDED}|{_STATUS_UNKNOWN}): ")


#: The prefix of a pod's extended-resource quota entries (``requests.<resource>``).
REQUESTS_PREFIX: Final = "requests."
_IMPLICIT_REQUESTS: Final = REQUESTS_PREFIX + IMPLICIT_EXTENDED_RESOURCE_PREFIX
_POD_DONE: Final = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class QuotaNames:
    """What device quota counts besides the per-class entries: the DeviceClasses there are
    (their implicit extended resources) and the extended resource each names
    (``spec.extendedResourceName``), by class."""

    extended: Mapping[str, str] = field(default_factory=dict)
    #: The names of the DeviceClasses that exist (those named in `extended` among them).
    classes: frozenset[str] = frozenset()

    @classmethod
    def of(cls, classes: Iterable[Mapping[str, Any]]) -> QuotaNames:
        """From the DeviceClasses (their ``metadata.name`` and ``spec.extendedResourceName``)."""
        extended: dict[str, str] = {}
        names: set[str] = set()
        for device_class in classes:
            name = (device_class.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not name:
                continue
            names.add(name)
            resource = (device_class.get("spec") or {}).get("extendedResourceName")
            if isinstance(resource, str) and resource:
                extended[name] = resource
        return cls(extended, frozenset(names))

    def entries(self, class_name: str) -> tuple[str, str | None]:
        """The class's ``requests.*`` entries: its implicit one and its explicit one (None)."""
        explicit = self.extended.get(class_name)
        return _IMPLICIT_REQUESTS + class_name, (REQUESTS_PREFIX + explicit if explicit else None)

    def shared(self, entry: str) -> bool:
        """Whether `entry` is a ``requests.*`` entry of a class that exists:
        kube-controller-manager counts the pods there, the operator the claims on top. As
        upstream's claim evaluator matches them, the entry of a class that does not exist
        (yet) is the pods' alone."""
        if entry.startswith(_IMPLICIT_REQUESTS):
            return entry[len(_IMPLICIT_REQUESTS) :] in self.classes
        return entry.startswith(REQUESTS_PREFIX) and entry[len(REQUESTS_PREFIX) :] in self._explicit

    @property
    def _explicit(self) -> frozenset[str]:
        return frozenset(self.extended.values())

    def class_of(self, entry: str) -> str | None:
        """The DeviceClass an entry device quota counts is about: a per-class entry's, the
        class of an implicit ``requests.*`` entry, the first class naming an explicit one."""
        if (name := class_of_entry(entry)) is not None:
            return name
        if entry.startswith(_IMPLICIT_REQUESTS):
            return entry[len(_IMPLICIT_REQUESTS) :] or None
        resource = entry[len(REQUESTS_PREFIX) :] if entry.startswith(REQUESTS_PREFIX) else None
        return next((c for c, r in sorted(self.extended.items()) if r == resource), None)

    def counted(self, entry: str) -> bool:
        """Whether device quota counts `entry` (the per-class ones, and the shared ones)."""
        return class_of_entry(entry) is not None or self.shared(entry)


#: No DeviceClass names an extended resource.
NO_CLASSES: Final = QuotaNames()


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


def claim_usage(
    claim_spec: Mapping[str, Any],
    *,
    names: QuotaNames = NO_CLASSES,
    pod_usage: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """The devices a claim (its ``spec``) counts, by quota entry (see the module docstring).

    `pod_usage`: for the special claim of a pod's extended resources whose owner checks out
    (`owner_usage`), what that pod counts itself (``requests.<resource>`` entries); the
    claim counts under the ``requests.*`` entries only what goes beyond it."""
    usage: dict[str, int] = {}
    for request in (claim_spec.get("devices") or {}).get("requests") or ():
        if not isinstance(request, Mapping):
            continue
        alternatives = request.get("firstAvailable")
        if alternatives:
            worst: dict[str, int] = {}
            for sub in alternatives:
                if isinstance(sub, Mapping) and sub.get("deviceClassName"):
                    name = str(sub["deviceClassName"])
                    worst[name] = max(worst.get(name, 0), _devices(sub))
            for name, count in worst.items():
                usage[quota_entry(name)] = usage.get(quota_entry(name), 0) + count
            continue
        exactly = request.get("exactly")
        if not isinstance(exactly, Mapping) or not exactly.get("deviceClassName"):
            continue  # an unknown, newer request type: nothing to count
        entry = quota_entry(str(exactly["deviceClassName"]))
        usage[entry] = usage.get(entry, 0) + _devices(exactly)
    # Upstream's addExtendedResourceQuota: each class's devices under its extended
    # resources too, less what the verified pod counts there itself.
    for entry, count in list(usage.items()):
        for resource in names.entries(str(class_of_entry(entry))):
            if resource is None:
                continue
            left = count - (pod_usage or {}).get(resource, 0)
            if left > 0:
                usage[resource] = left
    return usage


def _whole(value: Any) -> int | None:
    """An extended-resource amount (a whole number), None when it is not one."""
    try:
        amount = Quantity.from_json(value).as_fraction()
    except ValueError:
        return None
    return int(amount) if amount.denominator == 1 else None


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's requests of resources with a domain (limits stand in for a missing
    request, as the API server defaults them)."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {str(k): n for k, v in merged.items() if "/" in str(k) and (n := _whole(v)) is not None}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """A pod's requests of resources with a domain, as upstream's ``PodRequests`` adds them
    up for quota: regular and sidecar containers together, or the largest init container
    (with the sidecars started before it) when that is more, plus the overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        asked = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            for name, n in asked.items():
                sidecars[name] = sidecars.get(name, 0) + n
                total[name] = total.get(name, 0) + n
        else:
            for name, n in asked.items():
                init_peak[name] = max(init_peak.get(name, 0), n + sidecars.get(name, 0))
    for container in spec.get("containers") or ():
        for name, n in _container_requests(container).items():
            total[name] = total.get(name, 0) + n
    for name, peak in init_peak.items():
        total[name] = max(total.get(name, 0), peak)
    for name, value in (spec.get("overhead") or {}).items():
        extra = _whole(value)
        if name in total and extra is not None:
            total[name] += extra
    return total


def pod_counts(pod: Mapping[str, Any]) -> bool:
    """Whether kube-controller-manager's pod evaluator counts the pod (not Succeeded or
    Failed)."""
    return (pod.get("status") or {}).get("phase") not in _POD_DONE


def _recorded_claim(pod: Mapping[str, Any]) -> str | None:
    """The special claim the pod's record names (None: no record yet, or unreadable)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION
    )
    try:
        record = json.loads(str(raw)) if raw else None
    except ValueError:
        return None
    name = record.get("resourceClaimName") if isinstance(record, dict) else None
    return name if isinstance(name, str) and name else None


def owner_usage(
    claim: Mapping[str, Any],
    *,
    pod: Mapping[str, Any] | None,
    siblings: Iterable[Mapping[str, Any]] = (),
) -> dict[str, int] | None:
    """What the pod that controls a special claim counts itself, as ``requests.<resource>``
    entries; None when the claim is not one whose owner checks out (upstream's
    ``getVerifiedPodUsage``): not annotated as a special claim, not controlled by `pod` (a
    v1 Pod of the same name and UID), another claim recorded by the pod, or — with no record
    yet — not the first of the special claims the pod controls (`siblings`, the others: the
    earliest created, on a tie the smallest name)."""
    meta = claim.get("metadata") or {}
    owner = controlling_pod(claim)
    if owner is None or pod is None:
        return None
    pod_meta = pod.get("metadata") or {}
    if owner.get("uid") != pod_meta.get("uid") or owner.get("name") != pod_meta.get("name"):
        return None
    recorded = _recorded_claim(pod)
    if recorded is not None and recorded != meta.get("name"):
        return None
    if recorded is None:
        mine = (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))
        for other in siblings:
            other_meta = other.get("metadata") or {}
            theirs = (str(other_meta.get("creationTimestamp") or ""), str(other_meta.get("name") or ""))
            if theirs != mine and theirs < mine and _controller_uid(other) == owner.get("uid"):
                return None
    if not pod_counts(pod):
        return {}
    return {REQUESTS_PREFIX + name: n for name, n in pod_requests(pod).items()}


def namespace_usage(
    claims: Iterable[Mapping[str, Any]],
    *,
    names: QuotaNames = NO_CLASSES,
    pods: Iterable[Mapping[str, Any]] = (),
) -> dict[str, int]:
    """What the claims of a namespace count together, by quota entry; the shared
    ``requests.*`` entries also with what the namespace's `pods` count there (as
    kube-controller-manager counts them)."""
    claims = list(claims)
    pods_by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
    special: dict[str, list[Mapping[str, Any]]] = {}
    for claim in claims:
        uid = _controller_uid(claim)
        if uid is not None:
            special.setdefault(uid, []).append(claim)
    total: dict[str, int] = {}
    for claim in claims:
        uid = _controller_uid(claim)
        pod = pods_by_uid.get(uid) if uid is not None else None
        counts_itself = owner_usage(claim, pod=pod, siblings=special.get(uid or "", ()))
        for entry, count in claim_usage(
            claim.get("spec") or {}, names=names, pod_usage=counts_itself
        ).items():
            total[entry] = total.get(entry, 0) + count
    for pod in pods_by_uid.values():
        if not pod_counts(pod):
            continue
        for name, count in pod_requests(pod).items():
            if names.shared(REQUESTS_PREFIX + name):
                total[REQUESTS_PREFIX + name] = total.get(REQUESTS_PREFIX + name, 0) + count
    return total


def controlling_pod(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller reference of a claim annotated as a special claim when it is a v1
    Pod, else None."""
    meta = claim.get("metadata") or {}
    if (meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
        return None
    owner: Mapping[str, Any] | None = next(
        (r for r in meta.get("ownerReferences") or () if r.get("controller")), None
    )
    if owner is None or owner.get("kind") != "Pod" or owner.get("apiVersion") != "v1":
        return None
    return owner


def _controller_uid(claim: Mapping[str, Any]) -> str | None:
    """The UID of the pod controlling a special claim, else None."""
    owner = controlling_pod(claim)
    return str(owner["uid"]) if owner is not None and owner.get("uid") else None


def _count(value: Any) -> Fraction | None:
    """A quota amount (a quantity), None when unreadable."""
    try:
        return Quantity.from_json(value).as_fraction()
    except ValueError:
        return None


def _text(value: Fraction) -> str:
    """A quota amount as kube-apiserver prints a quantity (``2``, ``1500m``)."""
    return Quantity.from_fraction(value).to_json()


def draco_entries(quota: Mapping[str, Any], names: QuotaNames = NO_CLASSES) -> dict[str, Fraction]:
    """The hard limits of the entries device quota counts in a ResourceQuota's ``spec.hard``
    (the per-class ones and, with `names`, the shared ``requests.*`` ones)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    out: dict[str, Fraction] = {}
    for entry, value in hard.items():
        if names.counted(str(entry)) and (limit := _count(value)) is not None:
            out[str(entry)] = limit
    return out


def draco_usage(
    quota: Mapping[str, Any], names: QuotaNames = NO_CLASSES
) -> list[tuple[str, str, Fraction, Fraction]]:
    """``(entry, class, hard, used)`` of each entry device quota counts in a ResourceQuota,
    sorted (``used`` 0 until the entry is counted; the class of a shared ``requests.*``
    entry is the one that backs it, the first by name when several name one resource)."""
    used = _used(quota)
    return [
        (entry, names.class_of(entry) or "", hard, used.get(entry, Fraction(0)))
        for entry, hard in sorted(draco_entries(quota, names).items())
    ]


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


def charge(
    quotas: Iterable[Mapping[str, Any]], usage: Mapping[str, int], names: QuotaNames = NO_CLASSES
) -> QuotaCharge | QuotaRefusal:
    """Charge `usage` (a claim's `claim_usage`) to the namespace's `quotas`, or refuse it.

    Quotas are looked at by name (upstream's order); the first that fails refuses the claim.
    """
    counted = {entry: n for entry, n in usage.items() if n > 0}
    updates: list[tuple[Mapping[str, Any], dict[str, str]]] = []
    for quota in sorted(quotas, key=lambda q: str((q.get("metadata") or {}).get("name") or "")):
        hard = {entry: limit for entry, limit in draco_entries(quota, names).items() if entry in counted}
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


def status_patch(
    quota: Mapping[str, Any], usage: Mapping[str, int], names: QuotaNames = NO_CLASSES
) -> dict[str, Any] | None:
    """The merge patch of a quota's status that records `usage` (a namespace's
    `namespace_usage`) for the entries device quota counts in its ``spec.hard``
    (``status.hard`` too, as kube-controller-manager copies it), or None when the status
    says so already. Other entries are never touched; per-class entries no longer in
    ``spec.hard`` are removed (``null``; kube-controller-manager drops shared ones itself)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    status = quota.get("status") or {}
    old_hard = status.get("hard") or {}
    old_used = status.get("used") or {}
    ours = {str(e): v for e, v in hard.items() if names.counted(str(e))}
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


def recount_due(quota: Mapping[str, Any], names: QuotaNames = NO_CLASSES) -> bool:
    """True when a quota's status does not cover the entries device quota counts in its
    ``spec.hard`` as they are now (new, changed or removed entries): its usage must be
    counted. A change of ``status.used`` alone is a charge or a count, not a reason to count
    again (but see `undercounted`)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    status = quota.get("status") or {}
    ours = {str(e): v for e, v in hard.items() if names.counted(str(e))}
    counted_hard = {str(e): v for e, v in (status.get("hard") or {}).items() if names.counted(str(e))}
    counted_used = {str(e) for e in status.get("used") or {} if names.counted(str(e))}
    return ours != counted_hard or set(ours) != counted_used


def undercounted(quota: Mapping[str, Any], usage: Mapping[str, int], names: QuotaNames) -> bool:
    """Whether a shared ``requests.*`` entry of the quota shows less than `usage` (the
    namespace's `namespace_usage`): kube-controller-manager wrote its pods-only count over
    the claims'. A charge only raises ``status.used``, so this is never one."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = _used(quota)
    return any(
        names.shared(str(e)) and (str(e) not in used or used[str(e)] < usage.get(str(e), 0)) for e in hard
    )


def is_quota_refusal(message: str) -> bool:
    """True when an API error message is a quota refusal (upstream's or the webhook's)."""
    return _REFUSAL.search(message) is not None
