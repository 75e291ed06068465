"""Which group a pod belongs to, what the group asks for, and where it may land: pure.

A group of pods is placed all or nothing (gang scheduling): no member is released to run
until ``minCount`` members have a node and their devices. draco reads the group a pod
belongs to from what users already write (`docs/pods.md`, "Groups of pods"):

- draco's PodGroup (``scheduling.draco.dev/v1beta1``, upstream's ``scheduling.k8s.io``
  shape): the pod label ``scheduling.draco.dev/pod-group: <name>``; the PodGroup's
  ``spec.schedulingPolicy.gang.minCount`` (a ``basic`` policy is no gang), its
  ``schedulingConstraints`` (a node-label domain, draco's device-attribute domain) and
  its ``resourceClaims`` (claims shared by the group, `draco.scheduling.podclaims`);
- the coscheduling plugin of kubernetes-sigs/scheduler-plugins: the label
  ``scheduling.x-k8s.io/pod-group: <name>`` and its PodGroup
  (``scheduling.x-k8s.io/v1alpha1``): ``spec.minMember``, ``spec.scheduleTimeoutSeconds``;
- Kueue's plain pod groups: the label ``kueue.x-k8s.io/pod-group-name: <name>`` and the
  annotation ``kueue.x-k8s.io/pod-group-total-count: <n>`` on each pod (all of them).

A pod carrying more than one is in the first of that list. JobSet and LeaderWorkerSet
labels do not make a group by themselves (their pods join one through the labels above).

The decision over a group (:func:`place_group`) is one pass over its members under the
caller's decision lock: each member is decided as any pod is (its plan,
`draco.scheduling.podplan`: every placement rule of kube-scheduler's profile, its own
claims on one node), the plan held before the next
member is decided (so the next sees its devices taken and its pod placed: anti-affinity
spreads the members), a claim shared by members allocated once and seen allocated by
those after it. With a topology constraint the pass runs per domain, best fit first
(:func:`node_domains`, :func:`attribute_domains`), and the first domain where enough
members fit wins. A pass that cannot reach ``minCount`` releases everything it held.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from draco.api.bodies import (
    AllocationResultBody,
    DeviceRequestBody,
    DeviceSelectorBody,
    ResourceClaimBody,
    key_of,
    meta_of,
    object_key,
)
from draco.api.constants import POD_GROUP_LABEL
from draco.scheduling.podclaims import PodClaim
from draco.scheduling.podplan import PodPlan, Unplaced

__all__ = [
    "COSCHEDULING_LABEL",
    "KUEUE_COUNT_ANNOTATION",
    "KUEUE_LABEL",
    "Domain",
    "GroupClaim",
    "GroupDecision",
    "GroupPlan",
    "GroupPolicy",
    "GroupRef",
    "GroupRefusal",
    "Member",
    "attribute_domains",
    "device_need",
    "group_of",
    "group_of_labels",
    "node_domains",
    "place_group",
    "policy_of",
    "refusal_message",
    "restricted",
]

#: The coscheduling plugin's pod label, and Kueue's pod-group label and count annotation.
COSCHEDULING_LABEL: Final = "scheduling.x-k8s.io/pod-group"
KUEUE_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"

Convention = Literal["draco", "coscheduling", "kueue"]


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A pod's group: its namespace and name, whose convention named it, and the member
    count the pod itself carries (Kueue's total count; None: the group object says)."""

    namespace: str
    name: str
    convention: Convention = "draco"
    count: int | None = None

    @property
    def key(self) -> str:
        """``namespace/name`` for draco's PodGroups, ``namespace/<convention>:name`` else."""
        if self.convention == "draco":
            return object_key(self.namespace, self.name)
        return f"{self.namespace}/{self.convention}:{self.name}"

    def describe(self) -> str:
        """How Events name the group."""
        kind = {
            "draco": "PodGroup",
            "coscheduling": "PodGroup (scheduling.x-k8s.io)",
            "kueue": "Kueue pod group",
        }[self.convention]
        return f"{kind} {self.namespace}/{self.name}"


def group_of_labels(
    namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> GroupRef | None:
    """The group named by these labels and annotations of a pod (see the module docstring)."""
    if name := labels.get(POD_GROUP_LABEL):
        return GroupRef(namespace, name)
    if name := labels.get(COSCHEDULING_LABEL):
        return GroupRef(namespace, name, "coscheduling")
    if name := labels.get(KUEUE_LABEL):
        count = _positive_int(annotations.get(KUEUE_COUNT_ANNOTATION))
        return GroupRef(namespace, name, "kueue", count=count if count is not None else 0)
    return None


def group_of(pod: Mapping[str, Any]) -> GroupRef | None:
    """The group ``pod`` belongs to, or None."""
    meta = meta_of(pod)
    return group_of_labels(
        str(meta.get("namespace", "")), meta.get("labels") or {}, meta.get("annotations") or {}
    )


def _positive_int(value: object) -> int | None:
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if number > 0 else None


@dataclass(frozen=True, slots=True)
class GroupClaim:
    """An entry of a PodGroup's ``spec.resourceClaims``."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


@dataclass(frozen=True)
class GroupPolicy:
    """What a group asks for. ``min_count`` None: no gang (each pod is placed on its own);
    ``problem``: why the group cannot be placed yet (its object is missing or broken)."""

    min_count: int | None = None
    #: Seconds the group may hold devices without every member released (None: the default).
    timeout_s: float | None = None
    #: A node label whose one value all members' nodes share.
    topology_key: str | None = None
    #: A device attribute whose one value all the group's devices share.
    device_attribute: str | None = None
    claims: tuple[GroupClaim, ...] = ()
    problem: str | None = None
    #: The group object's UID (reservations of group claims name it).
    uid: str = ""
    #: The claims made from the group's template entries, by entry (its status).
    claim_statuses: Mapping[str, str | None] = field(default_factory=dict)

    def claims_of(self, entries: Iterable[PodClaim]) -> dict[str, GroupClaim]:
        """The pod's entries that are the group's claims (same name, same reference), by
        entry name: those resolve to the group's claim (KEP-5729)."""
        by_name = {claim.name: claim for claim in self.claims}
        found: dict[str, GroupClaim] = {}
        for entry in entries:
            claim = by_name.get(entry.name)
            if claim is not None and (
                claim.resource_claim_name,
                claim.resource_claim_template_name,
            ) == (entry.resource_claim_name, entry.resource_claim_template_name):
                found[entry.name] = claim
        return found


def _group_claims(spec: Mapping[str, Any]) -> tuple[GroupClaim, ...]:
    return tuple(
        GroupClaim(
            name=str(entry.get("name", "")),
            resource_claim_name=entry.get("resourceClaimName"),
            resource_claim_template_name=entry.get("resourceClaimTemplateName"),
        )
        for entry in spec.get("resourceClaims") or []
        if isinstance(entry, Mapping)
    )


def policy_of(ref: GroupRef, group: Mapping[str, Any] | None) -> GroupPolicy:
    """The policy of ``ref``'s group; ``group``: its object (draco's PodGroup or the
    coscheduling plugin's), None when it does not exist."""
    if ref.convention == "kueue":
        if not ref.count:
            return GroupPolicy(
                problem=f"{ref.describe()}: the pod has no valid {KUEUE_COUNT_ANNOTATION} annotation"
            )
        return GroupPolicy(min_count=ref.count)
    if group is None:
        return GroupPolicy(problem=f"{ref.describe()} does not exist; the pod waits for it")
    uid = str(meta_of(group).get("uid") or "")
    spec = group.get("spec") or {}
    if ref.convention == "coscheduling":
        members = _positive_int(spec.get("minMember")) or 1
        timeout = _positive_int(spec.get("scheduleTimeoutSeconds"))
        return GroupPolicy(min_count=members, timeout_s=float(timeout) if timeout else None, uid=uid)
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang")
    count = _positive_int((gang or {}).get("minCount")) if gang is not None else None
    constraints = spec.get("schedulingConstraints") or {}
    topology = [t.get("key") for t in constraints.get("topology") or [] if t.get("key")]
    devices = [
        d.get("matchAttribute") for d in constraints.get("deviceTopology") or [] if d.get("matchAttribute")
    ]
    statuses = {
        str(entry.get("name", "")): entry.get("resourceClaimName")
        for entry in (group.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(entry, Mapping)
    }
    return GroupPolicy(
        min_count=count,
        topology_key=str(topology[0]) if topology else None,
        device_attribute=str(devices[0]) if devices else None,
        claims=_group_claims(spec),
        uid=uid,
        claim_statuses=statuses,
    )


# --- domains ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Domain:
    """Where one pass of the group decision may put the group: ``nodes`` (None: any),
    and a CEL ``selector`` every device must also pass (None: none)."""

    label: str
    nodes: frozenset[str] | None = None
    selector: str | None = None
    #: Free devices the domain holds (what best fit orders by).
    free: int = 0


def node_domains(
    key: str, node_labels: Mapping[str, Mapping[str, str]], free_on: Callable[[str], int], need: int
) -> list[Domain]:
    """The domains of node label ``key`` over ``node_labels`` (node -> labels), best fit
    first: those with enough free devices for ``need``, fewest first, then the others
    (they are tried too: the devices are only an estimate, and they explain the refusal)."""
    members: dict[str, set[str]] = {}
    for name, labels in node_labels.items():
        value = labels.get(key)
        if value is not None:
            members.setdefault(value, set()).add(name)
    domains = [
        Domain(f"{key}={value}", frozenset(nodes), free=sum(free_on(n) for n in nodes))
        for value, nodes in members.items()
    ]
    return _best_fit(domains, need)


def attribute_domains(attribute: str, values: Iterable[tuple[str, Any, bool]], need: int) -> list[Domain]:
    """The domains of device ``attribute`` (``domain/id``): ``values`` gives each device's
    (type tag, value, free) for those that have it; best fit first as in :func:`node_domains`."""
    free: dict[tuple[str, Any], int] = {}
    for tag, value, is_free in values:
        free[(tag, value)] = free.get((tag, value), 0) + (1 if is_free else 0)
    domains = []
    for (tag, value), count in free.items():
        selector = attribute_selector(attribute, tag, value)
        if selector is not None:
            domains.append(Domain(f"{attribute}={value}", selector=selector, free=count))
    return _best_fit(domains, need)


def _best_fit(domains: list[Domain], need: int) -> list[Domain]:
    return sorted(domains, key=lambda d: (d.free < need, d.free if d.free >= need else -d.free, d.label))


def attribute_selector(attribute: str, tag: str, value: Any) -> str | None:
    """A CEL selector admitting the devices whose ``attribute`` equals ``value`` (None for
    a type it cannot compare: a list attribute)."""
    domain, _, name = attribute.rpartition("/")
    if not domain or not name:
        return None
    if tag == "string":
        literal = json.dumps(str(value))
    elif tag == "bool":
        literal = "true" if value else "false"
    elif tag == "int":
        literal = str(int(value))
    elif tag == "version":
        path = f"device.attributes[{json.dumps(domain)}][{json.dumps(name)}]"
        guard = f"{json.dumps(name)} in device.attributes[{json.dumps(domain)}]"
        return f"{guard} && {path}.compareTo(semver({json.dumps(str(value))})) == 0"
    else:
        return None
    attributes = f"device.attributes[{json.dumps(domain)}]"
    return f"{json.dumps(name)} in {attributes} && {attributes}[{json.dumps(name)}] == {literal}"


def restricted(claims: Sequence[ResourceClaimBody], selector: str) -> list[ResourceClaimBody]:
    """``claims`` with ``selector`` added to every request (and every alternative of a
    prioritized list): copies, the claims' metadata kept (their allocations are written
    for the originals)."""
    extra: DeviceSelectorBody = {"cel": {"expression": selector}}
    copies: list[ResourceClaimBody] = []
    for claim in claims:
        spec = claim.get("spec") or {}
        devices = spec.get("devices") or {}
        requests: list[DeviceRequestBody] = []
        for original in devices.get("requests") or []:
            request: DeviceRequestBody = {**original}
            if exactly := original.get("exactly"):
                request["exactly"] = {**exactly, "selectors": [*(exactly.get("selectors") or []), extra]}
            if alternatives := original.get("firstAvailable"):
                request["firstAvailable"] = [
                    {**sub, "selectors": [*(sub.get("selectors") or []), extra]} for sub in alternatives
                ]
            requests.append(request)
        copies.append(
            cast(ResourceClaimBody, {**claim, "spec": {**spec, "devices": {**devices, "requests": requests}}})
        )
    return copies


def device_need(claims: Iterable[ResourceClaimBody]) -> int:
    """How many devices ``claims`` ask for at least (``All`` counts one; a prioritized
    list its smallest alternative)."""
    total = 0
    for claim in claims:
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            options = (
                [request["exactly"]] if request.get("exactly") else list(request.get("firstAvailable") or [])
            )
            counts = [
                1 if (o.get("allocationMode") or "ExactCount") == "All" else max(int(o.get("count") or 1), 1)
                for o in options
            ]
            total += min(counts) if counts else 0
    return total


# --- the decision ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One gated member as the decision takes it: its claims to allocate and those
    allocated already (claims named by several members appear in each)."""

    key: str
    pending: Sequence[ResourceClaimBody] = ()
    allocated: Sequence[ResourceClaimBody] = ()


@dataclass(frozen=True)
class GroupPlan:
    """Enough members fit: the group's plan is their plans (held by the caller), in the
    domain chosen."""

    domain: Domain | None
    chosen: list[PodPlan]
    #: Members that did not fit although the group did (they wait, as single pods).
    left: list[Unplaced] = field(default_factory=list)


@dataclass(frozen=True)
class GroupRefusal:
    """Not enough members fit anywhere; nothing is held. ``placed``: the most that fit in
    one pass; ``failures``: why the others of that pass did not."""

    placed: int
    total: int
    needed: int
    failures: list[Unplaced]
    domain: Domain | None = None
    domains: int = 0


Decide = Callable[[Member, Domain | None], PodPlan | Unplaced]


def _as_allocated(claim: ResourceClaimBody, allocation: AllocationResultBody) -> ResourceClaimBody:
    return {**claim, "status": {**(claim.get("status") or {}), "allocation": allocation}}


def _with_shared(member: Member, shared: Mapping[str, AllocationResultBody]) -> Member:
    """``member`` with the claims an earlier member of the pass allocated moved to its
    allocated claims (with that allocation: its node selector narrows the nodes)."""
    if not shared:
        return member
    pending = [c for c in member.pending if key_of(c) not in shared]
    if len(pending) == len(member.pending):
        return member
    moved = [_as_allocated(c, shared[key_of(c)]) for c in member.pending if key_of(c) in shared]
    return Member(member.key, pending, [*member.allocated, *moved])


class GroupDecision:
    """The group decision as steps, so that a caller may await between members (the
    operator searches off its event loop; the decision lock stays held):

    - :meth:`next` gives the member to decide and the domain of the pass, or None when
      the decision is made (:attr:`result`);
    - :meth:`record` takes that member's answer and says what to do with it: ``hold``
      (mark the choice taken before the next member is decided), ``skip`` (it did not
      fit; go on), or ``release`` (this pass cannot reach the count: drop every hold of
      the pass, and do not hold this answer; the next pass, if any, starts afresh).

    :func:`place_group` runs it in one go."""

    def __init__(self, members: Sequence[Member], *, needed: int, domains: Sequence[Domain] | None) -> None:
        self.members = list(members)
        self.needed = needed
        self.passes: list[Domain | None] = list(domains) if domains is not None else [None]
        self.result: GroupPlan | GroupRefusal | None = None
        self._pass = 0
        self._index = 0
        self._shared: dict[str, AllocationResultBody] = {}
        self._chosen: list[PodPlan] = []
        self._failures: list[Unplaced] = []
        self._best: GroupRefusal | None = None
        if not self.members or not self.passes:
            self.result = GroupRefusal(0, len(self.members), needed, [], None, len(self.passes))

    @property
    def domain(self) -> Domain | None:
        return self.passes[self._pass] if self._pass < len(self.passes) else None

    def next(self) -> tuple[Member, Domain | None] | None:
        if self.result is not None:
            return None
        return _with_shared(self.members[self._index], self._shared), self.domain

    def record(self, answer: PodPlan | Unplaced) -> Literal["hold", "skip", "release"]:
        if isinstance(answer, PodPlan):
            self._chosen.append(answer)
            self._shared.update(answer.allocations)
            verdict: Literal["hold", "skip", "release"] = "hold"
        else:
            self._failures.append(answer)
            verdict = "skip"
        self._index += 1
        hopeless = len(self.members) - len(self._failures) < self.needed
        if not hopeless and self._index < len(self.members):
            return verdict
        if len(self._chosen) >= self.needed:
            self.result = GroupPlan(self.domain, self._chosen, self._failures)
            return verdict
        if self._best is None or len(self._chosen) > self._best.placed:
            self._best = GroupRefusal(
                len(self._chosen), len(self.members), self.needed, self._failures, self.domain
            )
        self._pass += 1
        self._index = 0
        self._shared, self._chosen, self._failures = {}, [], []
        if self._pass >= len(self.passes):
            best = self._best
            self.result = GroupRefusal(
                best.placed, best.total, best.needed, best.failures, best.domain, len(self.passes)
            )
        return "release"


def place_group(
    members: Sequence[Member],
    *,
    needed: int,
    domains: Sequence[Domain] | None,
    decide: Decide,
    hold: Callable[[PodPlan], None],
    release: Callable[[], None],
) -> GroupPlan | GroupRefusal:
    """One decision over ``members`` (see the module docstring): at least ``needed`` of
    them placed together in one domain (``domains`` None: anywhere), or nothing held.

    ``decide`` places one member (its claims already allocated by earlier members of the
    pass come as allocated); ``hold`` marks a choice taken before the next member is
    decided; ``release`` drops every hold of the pass."""
    decision = GroupDecision(members, needed=needed, domains=domains)
    while (step := decision.next()) is not None:
        answer = decide(*step)
        verdict = decision.record(answer)
        if verdict == "hold" and isinstance(answer, PodPlan):
            hold(answer)
        elif verdict == "release":
            release()  # the pass's holds (a choice that ends a failed pass is never held)
    assert decision.result is not None
    return decision.result


def refusal_message(
    ref: GroupRef, refusal: GroupRefusal, *, placed_before: int = 0, limit: int = 1024
) -> str:
    """The Event of a group that cannot be placed: how many fit, how many are needed, and
    why the first that does not fit fails (``12 of 16 placed; 4 do not fit: ...``)."""
    total = refusal.total + placed_before
    placed = refusal.placed + placed_before
    where = ""
    if refusal.domains > 1:
        where = f" in any one of {refusal.domains} domains"
    elif refusal.domain is not None:
        where = f" in {refusal.domain.label}"
    text = (
        f"{ref.describe()}: {placed} of {total} pod(s) can be placed together{where}, "
        f"{refusal.needed + placed_before} needed; no pod of the group is released until they all fit"
    )
    if refusal.failures:
        first = refusal.failures[0]
        text += f"; {len(refusal.failures)} do not fit, first {first.key}: {first.reason}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
