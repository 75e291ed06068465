"""DeviceClass status: selected and allocated device counts and a `Valid` condition.

The operator's informers of DeviceClasses, ResourceSlices and ResourceClaims (through the
Kopf handlers of `handlers.py`) feed small caches here (classes as the API shows them, each slice as the allocator's device records, claims
reduced to the device keys their allocation holds); every change puts the classes
it may affect on the ``deviceclass_status`` work queue. A sync computes the status with
`classstatus` and writes it to the status subresource, only when it differs from what the
class shows.

Debounced: a sync waits until inputs have been quiet for `QUIET_S` (but never longer than
`MAX_WAIT_S` after the first change it waits for), so a burst of thousands of slice or
claim events leads to one status write per class. Recounting is incremental: a slice's
device records are built when that slice changes (never the whole inventory), a class's
selection is kept per slice and re-evaluated only for slices that changed, and CEL results
are cached per (selector, device content); an allocation change only looks up the class's
selected devices.

Off the event loop: a class's selectors over every published device can cost tens of
seconds of CEL (a legal selector may take milliseconds per device). Before a sync
computes the status, the class's verdict (validation, compiling) and its selectors over
the published devices are evaluated in the :class:`Offloader`'s threads, in short slices,
into the selector cache; the count on the loop then only looks answers up.

Nothing lives only here: at start everything comes from the informers' caches and every
class is synced. The status describes the whole cluster, so it is kept only by an operator that
serves every namespace; one started with ``--namespace`` leaves DeviceClass status alone
(it would see only some claims).
"""

from __future__ import annotations

import asyncio
import datetime
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from draco.allocator.devices import DeviceRecord
from draco.allocator.inventory import Inventory
from draco.allocator.selectors import SelectorCache, shared_cache
from draco.api.bodies import Obj, ResourceClaimBody, key_of
from draco.api.constants import GROUP
from draco.api.constants import VERSION as DRACO_VERSION
from draco.api.pools import PoolKey, at_newest, pool_of
from draco.kube.client import DEVICE_CLASSES, Kube, NotFoundError
from draco.logs import get_logger
from draco.operator.deviceclassstatus import status as cs
from draco.runtime.offload import Offloader, shared_offloader
from draco.runtime.workqueue import WorkQueue

__all__ = ["FIELD_MANAGER", "QUEUE_NAME", "WORKERS", "ClassStatusService"]

log = get_logger(__name__)

FIELD_MANAGER: Final = "draco-deviceclass-status"
QUEUE_NAME: Final = "deviceclass_status"
#: Inputs must be quiet this long before a class is re-counted.
QUIET_S: Final = 1.0
#: ... unless they keep changing: then the status is brought up to date this often.
MAX_WAIT_S: Final = 10.0
#: Syncs are CPU work on the event loop and one status write; a few workers suffice.
WORKERS: Final = 2


def _clock() -> float:
    """The event loop's clock (monotonic; virtual in the unit tests' loop)."""
    return asyncio.get_running_loop().time()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _trim_slice(obj: Mapping[str, Any]) -> Obj:
    return {"metadata": {"name": (obj.get("metadata") or {}).get("name", "")}, "spec": obj.get("spec") or {}}


def _trim_class(obj: Mapping[str, Any]) -> Obj:
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion") or f"{GROUP}/{DRACO_VERSION}",
        "kind": obj.get("kind") or "DeviceClass",
        "metadata": {k: meta[k] for k in ("name", "uid", "generation") if k in meta},
        "spec": obj.get("spec") or {},
        "status": obj.get("status") or {},
    }


@dataclass(slots=True)
class _Slice:
    """One slice's devices as the allocator records them, built once per change of it."""

    spec: Obj
    pool: PoolKey
    generation: int
    devices: list[DeviceRecord]
    #: Bumped on every change, so per-slice results know when they are stale.
    version: int


def _slice_of(obj: Mapping[str, Any], *, version: int, cache: SelectorCache) -> _Slice:
    trimmed = _trim_slice(obj)
    spec = trimmed["spec"]
    pool, generation = pool_of(spec)
    # A one-slice inventory: the allocator's device records (attributes qualified, CEL
    # content interned in the shared cache) without rebuilding every other slice's.
    inventory = Inventory.build(classes=(), slices=[trimmed], cache=cache)
    return _Slice(
        spec=spec,
        pool=pool,
        generation=generation,
        devices=cs.published_devices(inventory),
        version=version,
    )


#: What most classes select from most slices (another driver's devices): shared, not copied.
_NOTHING: Final = cs.Selection(frozenset())


@dataclass
class _Counted:
    """A class's selection per published slice, reused while the slice and the selectors
    stay the same, and their union at one publication epoch."""

    selectors: tuple[cs.Selector, ...]
    by_slice: dict[str, tuple[int, cs.Selection]] = field(default_factory=dict)
    merged: tuple[int, cs.Selection] | None = None


@dataclass
class ClassStatusService:
    """The caches and the sync; see the module docstring."""

    kube: Kube
    queue: WorkQueue[str]
    classes: dict[str, Obj] = field(default_factory=dict)
    slices: dict[str, _Slice] = field(default_factory=dict)
    claims: dict[str, frozenset[cs.DeviceKey]] = field(default_factory=dict)
    #: Device key -> how many claims hold it.
    allocated: Counter[cs.DeviceKey] = field(default_factory=Counter)
    #: The process-wide cache the allocation uses too: a selector evaluated for one is
    #: not evaluated again for the other.
    cache: SelectorCache = field(default_factory=shared_cache)
    offload: Offloader = field(default_factory=shared_offloader)
    runner: asyncio.Task[None] | None = None
    _published: list[tuple[str, _Slice]] | None = None
    _epoch: int = 0
    _slice_version: int = 0
    _counted: dict[str, _Counted] = field(default_factory=dict)
    _verdicts: dict[str, tuple[tuple[Any, ...], cs.Verdict | None]] = field(default_factory=dict)
    _last_change: float = 0.0
    _waiting_since: dict[str, float] = field(default_factory=dict)

    # --- inputs ------------------------------------------------------------------------------

    def prime(self, *, classes: list[Obj], slices: list[Obj], claims: list[ResourceClaimBody]) -> None:
        """Fill the caches from a LIST and queue every class (at start)."""
        for obj in slices:
            self._put_slice(obj)
        for claim in claims:
            self._set_claim(key_of(claim), cs.allocated_device_keys(claim))
        for obj in classes:
            name = obj["metadata"]["name"]
            self.classes[name] = _trim_class(obj)
            self.queue.add(name)

    def prime_slices(self, slices: list[Obj]) -> None:
        """The slice half of :meth:`prime` (no queue calls: safe in a thread at start)."""
        for obj in slices:
            self._put_slice(obj)

    def on_class(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if deleted:
            self.classes.pop(name, None)
            self._counted.pop(name, None)
            self._verdicts.pop(name, None)
            self._waiting_since.pop(name, None)
            return
        trimmed = _trim_class(obj)
        previous = self.classes.get(name)
        self.classes[name] = trimmed
        if (
            previous is None
            or previous["spec"] != trimmed["spec"]
            or previous["metadata"] != trimmed["metadata"]
        ):
            self._changed([name])
        elif previous["status"] != trimmed["status"]:
            # Someone else wrote the status (or this is the echo of our write): check it.
            self.queue.add_after(name, QUIET_S)

    def on_slice(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if deleted:
            if self.slices.pop(name, None) is None:
                return
        else:
            known = self.slices.get(name)
            if known is not None and known.spec == (obj.get("spec") or {}):
                return
            self._put_slice(obj)
        self._published = None
        self._changed(self.classes)

    def _put_slice(self, obj: Mapping[str, Any]) -> None:
        self._slice_version += 1
        self.slices[obj["metadata"]["name"]] = _slice_of(obj, version=self._slice_version, cache=self.cache)

    def on_claim(self, obj: ResourceClaimBody, *, deleted: bool) -> None:
        devices = frozenset() if deleted else cs.allocated_device_keys(obj)
        if self._set_claim(key_of(obj), devices):
            self._changed(self.classes)

    def _set_claim(self, key: str, devices: frozenset[cs.DeviceKey]) -> bool:
        previous = self.claims.get(key, frozenset())
        if previous == devices:
            return False
        self.allocated.subtract(previous)
        self.allocated.update(devices)
        # Counter.subtract keeps zero entries; drop them so `in` means "held".
        for key_gone in previous - devices:
            if self.allocated[key_gone] <= 0:
                del self.allocated[key_gone]
        if devices:
            self.claims[key] = devices
        else:
            self.claims.pop(key, None)
        return True

    def _changed(self, names: Iterable[str]) -> None:
        now = _clock()
        self._last_change = now
        for name in list(names):
            self._waiting_since.setdefault(name, now)
            self.queue.add_after(name, QUIET_S)

    # --- computing ---------------------------------------------------------------------------

    def published(self) -> list[tuple[str, _Slice]]:
        """Slices at the newest generation of their pool, by name (kept until a slice changes)."""
        if self._published is None:
            self._published = sorted(
                at_newest(self.slices.items(), lambda item: (item[1].pool, item[1].generation))
            )
            self._epoch += 1
        return self._published

    def _selection(self, name: str, selectors: tuple[cs.Selector, ...]) -> cs.Selection:
        """What the selectors select among published devices, re-evaluating changed slices only."""
        published = self.published()
        counted = self._counted.get(name)
        if counted is None or counted.selectors != selectors:
            counted = _Counted(selectors)
            self._counted[name] = counted
        if counted.merged is not None and counted.merged[0] == self._epoch:
            return counted.merged[1]
        fresh: dict[str, tuple[int, cs.Selection]] = {}
        for slice_name, published_slice in published:
            entry = counted.by_slice.get(slice_name)
            if entry is None or entry[0] != published_slice.version:
                selection = cs.select_devices(selectors, published_slice.devices, cache=self.cache)
                entry = (
                    published_slice.version,
                    selection if selection.selected or selection.failed else _NOTHING,
                )
            fresh[slice_name] = entry
        counted.by_slice = fresh
        merged = cs.merge_selections(entry[1] for entry in fresh.values())
        counted.merged = (self._epoch, merged)
        return merged

    @staticmethod
    def _verdict_key(device_class: Obj) -> tuple[Any, ...]:
        meta = device_class["metadata"]
        return (meta.get("uid"), meta.get("generation"), repr(device_class["spec"]))

    def _verdict(self, name: str, device_class: Obj) -> cs.Verdict | None:
        key = self._verdict_key(device_class)
        cached = self._verdicts.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        verdict = cs.judge_class(device_class, cache=self.cache)
        self._verdicts[name] = (key, verdict)
        return verdict

    async def prepare(self, name: str) -> None:
        """The costly part of :meth:`desired`, off the loop: the class's verdict and its
        selectors over every published device (into the cache; answers never change)."""
        device_class = self.classes.get(name)
        if device_class is None:
            return
        key = self._verdict_key(device_class)
        cached = self._verdicts.get(name)
        if cached is None or cached[0] != key:
            verdict = await self.offload.call_in_process(cs.judge_class_apart, device_class)
            self._verdicts[name] = (key, verdict)
        else:
            verdict = cached[1]
        if verdict is not None and verdict.reason == cs.REASON_INVALID_SELECTOR:
            return
        chain = [selector.expression for selector in cs.selectors_of(device_class)]
        devices = [device for _, published_slice in self.published() for device in published_slice.devices]
        await self.offload.warm(self.cache, [chain], devices)

    def desired(self, name: str) -> Obj | None:
        """The status class `name` should show now (None when the class is unknown)."""
        device_class = self.classes.get(name)
        if device_class is None:
            return None
        static = self._verdict(name, device_class)
        if static is not None and static.reason == cs.REASON_INVALID_SELECTOR:
            selection = cs.Selection(frozenset())
        else:
            selection = self._selection(name, tuple(cs.selectors_of(device_class)))
        return cs.desired_status(
            device_class["status"],
            generation=device_class["metadata"].get("generation"),
            selected=len(selection.selected),
            allocated=cs.count_allocated(selection.selected, self.allocated),
            verdict=cs.final_verdict(static, selection),
            now=_now(),
        )

    async def sync(self, name: str) -> float | None:
        """Bring class `name`'s status up to date; returns a delay while inputs are busy."""
        now = _clock()
        waiting_since = self._waiting_since.get(name)
        if waiting_since is not None:
            quiet_for = now - self._last_change
            if quiet_for < QUIET_S and now - waiting_since < MAX_WAIT_S:
                return QUIET_S - quiet_for
            del self._waiting_since[name]
        await self.prepare(name)
        desired = self.desired(name)
        if desired is None:
            return None
        current = self.classes[name]["status"]
        if not cs.status_differs(current, desired):
            return None
        try:
            written = await self.kube.patch(DEVICE_CLASSES, name, {"status": desired}, subresource="status")
        except NotFoundError:
            return None  # deleted meanwhile; its DELETED event clears the caches
        if name in self.classes:
            self.classes[name]["status"] = written.get("status") or desired
        condition = desired["conditions"][-1]
        log.info(
            "DeviceClass status written",
            device_class=name,
            selected=desired["selectedDevices"],
            allocated=desired["allocatedDevices"],
            valid=condition["status"],
            reason=condition["reason"],
        )
        return None
