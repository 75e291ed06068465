"""What ``draco top`` shows, computed from the objects it read: no I/O, no clock (the time
is given).

- **Per node**, its pools as a ResourcePoolStatusRequest answers them
  (`draco.allocator.poolstatus` over an `Inventory` of the slices, the DeviceTaintRules and
  the allocated claims: the numbers allocation decides by, the operator's pool metrics),
  with the devices its agent reports unhealthy; and every device with its state and who
  holds it: each claim whose allocation names it, the request, the pods (or PodGroup) it
  is reserved for and which of their containers get it, and what a share consumes.
  Pools whose devices are not all on one node are listed under the node ``""``.
- **Per DeviceClass**, what its status says (selected and allocated devices, the ``Valid``
  condition: the operator writes them) and how many waiting pods ask for it.
- **The waiting pods**: every pod draco is to place and has not (its scheduling gate, or
  ``schedulerName: draco`` and unbound), how long since it was created, the classes its
  unallocated claims ask for (a template's, while its claim is not made yet), its group,
  and why it waits: the newest Warning Event about it (else the newest Event), else its
  PodGroup's newest Warning or its ``PodGroupInitiallyScheduled`` condition.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from draco.allocator.devices import DeviceRecord
from draco.allocator.inventory import Inventory
from draco.allocator.poolstatus import PoolStatus, pool_devices, pool_statuses
from draco.api.bodies import ObjView, ResourceClaimSpecBody, key_of, meta_of
from draco.api.constants import POD_CLAIM_NAME_ANNOTATION, POD_GROUP_SCHEDULED_CONDITION, UNHEALTHY_TAINT_KEY
from draco.api.corebodies import PodBody
from draco.errors import DracoError
from draco.scheduling.devicetaints import parse_time
from draco.scheduling.groups import group_of
from draco.scheduling.podclaims import (
    PodClaim,
    claim_statuses,
    controller_pod_uid,
    device_class_names,
    is_pod_done,
    parse_pod_claims,
    waits_for_draco,
)

__all__ = ["ClassTop", "DeviceUse", "Holder", "NodeTop", "Objects", "Top", "WaitingPod", "build"]

_BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Objects:
    """What ``draco top`` reads (JSON bodies as the API returns them)."""

    classes: Sequence[ObjView] = ()
    slices: Sequence[ObjView] = ()
    taint_rules: Sequence[ObjView] = ()
    claims: Sequence[ObjView] = ()
    templates: Sequence[ObjView] = ()
    pods: Sequence[ObjView] = ()
    events: Sequence[ObjView] = ()
    pod_groups: Sequence[ObjView] = ()


@dataclass(frozen=True)
class Holder:
    """One allocation result naming a device: the claim, its request, whom it is reserved
    for (pod key -> the containers that get it, ``()`` when unknown), a share's capacity."""

    claim: str
    request: str
    reserved_for: tuple[tuple[str, tuple[str, ...]], ...] = ()
    consumed: tuple[tuple[str, str], ...] = ()
    admin_access: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "claim": self.claim,
            "request": self.request,
            "reservedFor": [
                {"name": name, "containers": list(containers)} for name, containers in self.reserved_for
            ],
        }
        if self.consumed:
            out["consumedCapacity"] = dict(self.consumed)
        if self.admin_access:
            out["adminAccess"] = True
        return out


@dataclass(frozen=True)
class DeviceUse:
    """One device: ``state`` is ``free``, ``allocated`` (held whole) or ``shared`` (held by
    shares of a device that allows several); its taints (``key=value:effect``) apart."""

    driver: str
    pool: str
    name: str
    state: str
    taints: tuple[str, ...] = ()
    unhealthy: bool = False
    holders: tuple[Holder, ...] = ()

    @property
    def blocked(self) -> bool:
        """Tainted NoSchedule or NoExecute: no new allocation gets it."""
        return any(t.rsplit(":", 1)[-1] in _BLOCKING_EFFECTS for t in self.taints)

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "pool": self.pool,
            "device": self.name,
            "state": self.state,
            "unhealthy": self.unhealthy,
            "taints": list(self.taints),
            "holders": [h.to_json() for h in self.holders],
        }


@dataclass(frozen=True)
class NodeTop:
    name: str
    pools: tuple[PoolStatus, ...]
    devices: tuple[DeviceUse, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pools": [{**p.to_wire(), "unhealthyDevices": p.unhealthy_devices} for p in self.pools],
            "devices": [d.to_json() for d in self.devices],
        }


@dataclass(frozen=True)
class ClassTop:
    name: str
    selected: int | None
    allocated: int | None
    valid: str | None
    waiting_pods: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "selectedDevices": self.selected,
            "allocatedDevices": self.allocated,
            "valid": self.valid,
            "waitingPods": self.waiting_pods,
        }


@dataclass(frozen=True)
class WaitingPod:
    pod: str
    waited_s: float
    classes: tuple[str, ...]
    group: str | None
    reason: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "waitingSeconds": round(self.waited_s, 3),
            "deviceClasses": list(self.classes),
            "group": self.group,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True)
class Top:
    nodes: tuple[NodeTop, ...]
    classes: tuple[ClassTop, ...]
    waiting: tuple[WaitingPod, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": [n.to_json() for n in self.nodes],
            "deviceClasses": [c.to_json() for c in self.classes],
            "waitingPods": [w.to_json() for w in self.waiting],
        }


def build(
    objects: Objects, *, now: datetime.datetime, node: str | None = None, namespace: str | None = None
) -> Top:
    """See the module docstring; ``node`` keeps that node only, ``namespace`` only that
    namespace's holders and waiting pods (the counts stay the cluster's)."""
    allocated = [c for c in objects.claims if (c.get("status") or {}).get("allocation")]
    inventory = Inventory.build(
        classes=[], slices=objects.slices, taint_rules=objects.taint_rules, allocated_claims=allocated
    )
    pods_by_uid = {str(meta_of(p).get("uid") or ""): p for p in objects.pods}
    holders = _holders(allocated, pods_by_uid, namespace=namespace)
    devices = pool_devices(inventory)
    by_node: dict[str, list[PoolStatus]] = defaultdict(list)
    for pool in pool_statuses(inventory):
        by_node[pool.node_name or ""].append(pool)
    nodes = tuple(
        NodeTop(
            name=name,
            pools=tuple(pools),
            devices=tuple(
                _device_use(inventory, device, holders.get(device.key, ()))
                for pool in pools
                for device in devices.get((pool.driver, pool.pool_name), ())
            ),
        )
        for name, pools in sorted(by_node.items())
        if node is None or name == node
    )
    waiting = _waiting(objects, now=now, namespace=namespace)
    asked: dict[str, int] = defaultdict(int)
    for pod in waiting:
        for name in pod.classes:
            asked[name] += 1
    return Top(nodes=nodes, classes=_classes(objects.classes, asked), waiting=waiting)


def _holders(
    claims: Iterable[ObjView], pods_by_uid: Mapping[str, ObjView], *, namespace: str | None
) -> dict[tuple[str, str, str], list[Holder]]:
    found: dict[tuple[str, str, str], list[Holder]] = defaultdict(list)
    for claim in claims:
        meta = meta_of(claim)
        if namespace is not None and meta.get("namespace") != namespace:
            continue
        status = claim.get("status") or {}
        reserved = tuple(_reservation(claim, ref, pods_by_uid) for ref in status.get("reservedFor") or ())
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or ():
            consumed = tuple(
                sorted((str(k), str(v)) for k, v in (result.get("consumedCapacity") or {}).items())
            )
            key = (
                str(result.get("driver") or ""),
                str(result.get("pool") or ""),
                str(result.get("device") or ""),
            )
            found[key].append(
                Holder(
                    claim=key_of(claim),
                    request=str(result.get("request") or ""),
                    reserved_for=reserved,
                    consumed=consumed,
                    admin_access=bool(result.get("adminAccess")),
                )
            )
    return found


def _reservation(
    claim: ObjView, ref: ObjView, pods_by_uid: Mapping[str, ObjView]
) -> tuple[str, tuple[str, ...]]:
    namespace = str(meta_of(claim).get("namespace") or "")
    if ref.get("resource") != "pods":
        return (f"{ref.get('resource')}/{namespace}/{ref.get('name')}", ())
    pod = pods_by_uid.get(str(ref.get("uid") or ""))
    return (f"{namespace}/{ref.get('name')}", _containers(pod, claim) if pod is not None else ())


def _containers(pod: ObjView, claim: ObjView) -> tuple[str, ...]:
    """The containers of `pod` that get `claim` (its claims annotation's entry for it)."""
    meta = meta_of(claim)
    name = str(meta.get("name") or "")
    owned = controller_pod_uid(claim) == meta_of(pod).get("uid")
    entry_name = (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
    every = tuple(str(c.get("name") or "") for c in (pod.get("spec") or {}).get("containers") or ())
    for entry in _entries(pod):
        if entry.resource_claim_name == name or (owned and entry.name == entry_name):
            return every if entry.containers is None else tuple(c for c in every if entry.gives_to(c))
    return ()


def _entries(pod: ObjView) -> list[PodClaim]:
    try:
        return parse_pod_claims(pod)
    except DracoError:
        return []  # an annotation the webhook would refuse: its pod waits with an Event saying so


def _device_use(inventory: Inventory, device: DeviceRecord, holders: Sequence[Holder]) -> DeviceUse:
    if not inventory.is_allocated(device):
        state = "free"
    else:
        state = "shared" if device.allow_multiple else "allocated"
    return DeviceUse(
        driver=device.driver,
        pool=device.pool,
        name=device.name,
        state=state,
        taints=tuple(t.describe() for t in device.taints),
        unhealthy=any(t.key == UNHEALTHY_TAINT_KEY for t in device.taints),
        holders=tuple(holders),
    )


def _classes(classes: Iterable[ObjView], asked: Mapping[str, int]) -> tuple[ClassTop, ...]:
    out: list[ClassTop] = []
    known: set[str] = set()
    for device_class in classes:
        name = str(meta_of(device_class).get("name") or "")
        known.add(name)
        status = device_class.get("status") or {}
        valid = next((c for c in status.get("conditions") or () if c.get("type") == "Valid"), None)
        out.append(
            ClassTop(
                name=name,
                selected=status.get("selectedDevices"),
                allocated=status.get("allocatedDevices"),
                valid=str(valid.get("status")) if valid else None,
                waiting_pods=asked.get(name, 0),
            )
        )
    # A class pods ask for that does not exist is worth a line too.
    out.extend(ClassTop(name, None, None, None, count) for name, count in asked.items() if name not in known)
    return tuple(sorted(out, key=lambda c: c.name))


@dataclass
class _Why:
    """The newest Warning and the newest Event about each object, by UID."""

    warning: dict[str, tuple[datetime.datetime, ObjView]] = field(default_factory=dict)
    any: dict[str, tuple[datetime.datetime, ObjView]] = field(default_factory=dict)

    @classmethod
    def of(cls, events: Iterable[ObjView]) -> _Why:
        why = cls()
        epoch = datetime.datetime.min.replace(tzinfo=datetime.UTC)
        for event in events:
            uid = str((event.get("regarding") or event.get("involvedObject") or {}).get("uid") or "")
            stamp = (
                parse_time((event.get("series") or {}).get("lastObservedTime"))
                or parse_time(event.get("eventTime"))
                or parse_time(event.get("deprecatedLastTimestamp") or event.get("lastTimestamp"))
                or parse_time(meta_of(event).get("creationTimestamp"))
                or epoch
            )
            for table in (why.warning, why.any) if event.get("type") == "Warning" else (why.any,):
                if uid not in table or table[uid][0] <= stamp:
                    table[uid] = (stamp, event)
        return why

    def about(self, uid: str) -> tuple[str, str] | None:
        found = self.warning.get(uid) or self.any.get(uid)
        if found is None:
            return None
        event = found[1]
        return str(event.get("reason") or ""), str(event.get("note") or event.get("message") or "")


def _waiting(objects: Objects, *, now: datetime.datetime, namespace: str | None) -> tuple[WaitingPod, ...]:
    why = _Why.of(objects.events)
    claims = {key_of(c): c for c in objects.claims}
    owned: dict[str, list[ObjView]] = defaultdict(list)
    for claim in objects.claims:
        if (uid := controller_pod_uid(claim)) is not None:
            owned[uid].append(claim)
    templates = {key_of(t): t for t in objects.templates}
    groups = {key_of(g): g for g in objects.pod_groups}
    out: list[WaitingPod] = []
    for pod in objects.pods:
        meta = meta_of(pod)
        body = cast(PodBody, pod)
        if not waits_for_draco(body) or is_pod_done(body) or meta.get("deletionTimestamp"):
            continue
        if namespace is not None and meta.get("namespace") != namespace:
            continue
        created = parse_time(meta.get("creationTimestamp"))
        ref = group_of(pod)
        told = why.about(str(meta.get("uid") or ""))
        if told is None and ref is not None and (group := groups.get(ref.key)) is not None:
            told = why.about(str(meta_of(group).get("uid") or "")) or _group_condition(group)
        reason, message = told or ("", "")
        out.append(
            WaitingPod(
                pod=key_of(pod),
                waited_s=max(0.0, (now - created).total_seconds()) if created else 0.0,
                classes=_pod_classes(pod, claims, owned, templates),
                group=ref.describe() if ref is not None else None,
                reason=reason,
                message=message,
            )
        )
    return tuple(sorted(out, key=lambda w: (-w.waited_s, w.pod)))


def _group_condition(group: ObjView) -> tuple[str, str] | None:
    for condition in (group.get("status") or {}).get("conditions") or ():
        if condition.get("type") == POD_GROUP_SCHEDULED_CONDITION and condition.get("status") != "True":
            return str(condition.get("reason") or ""), str(condition.get("message") or "")
    return None


def _pod_classes(
    pod: ObjView,
    claims: Mapping[str, ObjView],
    owned: Mapping[str, Sequence[ObjView]],
    templates: Mapping[str, ObjView],
) -> tuple[str, ...]:
    """The classes the pod's unallocated claims ask for: its named claims, the claims it
    controls (made from its templates, its extended resources' claim), and the templates
    of entries whose claim is not made yet."""
    meta = meta_of(pod)
    namespace = str(meta.get("namespace") or "")
    statuses = claim_statuses(pod)
    specs: list[ObjView] = []
    mine = list(owned.get(str(meta.get("uid") or ""), ()))
    for entry in _entries(pod):
        if entry.resource_claim_name is not None:
            mine.extend(c for c in (claims.get(f"{namespace}/{entry.resource_claim_name}"),) if c is not None)
        elif statuses.get(entry.name) is None and entry.resource_claim_template_name is not None:
            template = templates.get(f"{namespace}/{entry.resource_claim_template_name}")
            specs.append(((template or {}).get("spec") or {}).get("spec") or {})
    specs.extend(c.get("spec") or {} for c in mine if not (c.get("status") or {}).get("allocation"))
    names: list[str] = []
    for spec in specs:
        names.extend(n for n in device_class_names(cast(ResourceClaimSpecBody, spec)) if n not in names)
    return tuple(names)
