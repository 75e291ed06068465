"""The agent process: watch loops that keep slices published and claims prepared.

Two informers feed two work queues (`draco.runtime.workqueue`, the operator's): the
agent's own ResourceSlices feed pools (driver, node), and the ResourceClaims the operator
labelled with one of the agent's nodes (`resource.draco.dev/node`, so an agent's watch
grows with its own claims, not with the cluster's) feed claims (uid). A pool sync compares
the driver's inventory with the cached slices and writes the difference (`publisher`); a
claim sync prepares or unprepares the claim on each of the agent's nodes (`prepare`, file
I/O in a worker thread, off the event loop) and writes the claim's `status.devices`
(`status`). Everything is re-derived from the API and the checkpoint at start and on a
periodic resync, so a restart, a deleted slice or a reboot that emptied `/var/run` all end
in the same state.

Claims prepared but no longer in the watch (deallocated, deleted, or allocated by an
operator from before the node label) are read once more with a GET before they are
unprepared: an unlabelled claim that still holds this node's devices stays prepared.

A failed prepare is announced once per allocation (one `FailedPrepareDynamicResources`
Event, one count, one log line), however often the claim is synced again before the
operator clears the allocation. Device health reaches the claims and pods on the
devices (`draco.agent.health`): a pool whose unhealthy devices changed queues the node's
prepared claims, whose sync tells their pods (`podhealth`) and then writes their status.

One process serves any number of nodes (`--nodes N` with the fake driver): each node has
its own pool per driver, its own checkpoint and, when there is more than one, its own
folders under `--cdi-dir` and `--state-dir`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from draco.agent import metrics
from draco.agent.drivers.base import DeviceDriver
from draco.agent.health import EVENT_COMPONENT, HEALTHY_CONDITION, device_problem
from draco.agent.nodes import ensure_node, node_uid
from draco.agent.podhealth import PodHealth
from draco.agent.prepare import NodePreparer, PrepareOutcome
from draco.agent.publisher import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    desired_slices,
    plan_pool,
    published_devices,
)
from draco.agent.status import DeviceKey, device_entries, merge_device_statuses
from draco.api.bodies import Obj
from draco.api.constants import NODE_FIELD, NODE_LABEL
from draco.api.names import natural_sorted
from draco.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from draco.kube.capabilities import field_selector_served
from draco.kube.client import RESOURCE_CLAIMS, RESOURCE_SLICES, EventType, Kube
from draco.kube.reachable import until_answered
from draco.kube.watch import list_watch
from draco.logs import get_logger
from draco.runtime.workqueue import WorkQueue

__all__ = ["Agent", "AgentConfig", "ClaimSelectors", "claims_selector", "claims_selectors"]

log = get_logger(__name__)

#: Warning on the claim when preparing fails: the reason the kubelet uses for the pod.
REASON_FAILED_PREPARE: Final = "FailedPrepareDynamicResources"

PoolKey = tuple[str, str]


@dataclass
class AgentConfig:
    nodes: Sequence[str]
    drivers: Sequence[DeviceDriver]
    cdi_dir: Path
    state_dir: Path
    create_nodes: bool = False
    resync_seconds: float = 60.0
    workers: int = 8
    #: Long-running coroutines that call their argument when inventories may have changed
    #: (the fake file watcher; each driver's own `watch` is added by the agent).
    watchers: Sequence[Callable[[Callable[[], None]], Coroutine[Any, Any, None]]] = field(
        default_factory=list
    )


def claims_selector(nodes: Sequence[str]) -> str | None:
    """The field selector of the claims allocated on `nodes` (the operator writes a claim's
    node in ``status.nodeName`` with the allocation). Field selectors have no set form, so
    an agent simulating several nodes watches every claim and keeps those whose results
    name its pools."""
    if len(nodes) == 1:
        return f"{NODE_FIELD}={nodes[0]}"
    return None


@dataclass(frozen=True)
class ClaimSelectors:
    """How the agent's claim watch narrows the cluster's claims to its own."""

    label_selector: str | None = None
    field_selector: str | None = None


def claims_selectors(nodes: Sequence[str], *, by_field: bool) -> ClaimSelectors:
    """The selectors of the claims allocated on `nodes`: the field ``status.nodeName`` where
    the API server serves it as a CRD selectable field (`by_field`), else the label
    ``resource.draco.dev/node`` that the operator then writes with the allocation (a
    kube-apiserver before 1.31 drops `selectableFields`). Several nodes: no selector."""
    if len(nodes) != 1:
        return ClaimSelectors()
    if by_field:
        return ClaimSelectors(field_selector=claims_selector(nodes))
    return ClaimSelectors(label_selector=f"{NODE_LABEL}={nodes[0]}")


def _allocation_key(obj: Mapping[str, Any]) -> str:
    """What tells one allocation of a claim from the next (an attempt)."""
    allocation = (obj.get("status") or {}).get("allocation") or {}
    return json.dumps(allocation, sort_keys=True)


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return 0


class Agent:
    def __init__(self, config: AgentConfig, *, kube: Kube) -> None:
        self.config = config
        self.kube = kube
        self.drivers: dict[str, DeviceDriver] = {d.name: d for d in config.drivers}
        several = len(config.nodes) > 1
        self.preparers: dict[str, NodePreparer] = {
            node: NodePreparer(
                node=node,
                cdi_dir=config.cdi_dir / node if several else config.cdi_dir,
                state_dir=config.state_dir / node if several else config.state_dir,
                drivers=self.drivers,
            )
            for node in config.nodes
        }
        self.node_uids: dict[str, str | None] = {}
        self.slices: dict[str, Obj] = {}
        self.pool_slices: dict[PoolKey, set[str]] = defaultdict(set)
        self.claims: dict[str, Obj] = {}
        # Retries start at 0.2 s and stop growing at 30 s: a node's own API errors are
        # usually short (an API server restart), and a pool or claim should not wait minutes.
        self.pools: WorkQueue[PoolKey] = WorkQueue("pools", base_delay=0.2, max_delay=30.0)
        self.claim_queue: WorkQueue[str] = WorkQueue("claims", base_delay=0.2, max_delay=30.0)
        self.slices_listed = asyncio.Event()
        self.claims_listed = asyncio.Event()
        # Set once every pool (driver, node) has been published for the inventory read
        # after the slices were listed: what a DaemonSet's readiness means to a user
        # (this node's devices are in the API), not merely that the lists are done.
        self.slices_published = asyncio.Event()
        self._unpublished: set[PoolKey] | None = None
        #: The unhealthy devices (name, problem) of each pool at its last sync.
        self._unhealthy: dict[PoolKey, frozenset[tuple[str, str]]] = {}
        #: The failed prepare last announced per claim uid: (allocation, error).
        self._announced: dict[str, tuple[str, str]] = {}
        self.pod_health = PodHealth(
            kube, claims=lambda: list(self.claims.values()), problems=self._claim_problems
        )
        metrics.PREPARED_CLAIMS.set(sum(len(p.prepared_uids()) for p in self.preparers.values()))

    # ---- lifecycle

    async def run(self) -> None:
        await until_answered(self._setup_nodes, what="read the nodes")
        selectors = ClaimSelectors()
        if len(self.config.nodes) == 1:
            by_field = await until_answered(
                lambda: field_selector_served(self.kube, RESOURCE_CLAIMS, NODE_FIELD),
                what="probe the claims' field selector",
            )
            selectors = claims_selectors(self.config.nodes, by_field=by_field)
        tasks = [
            self.pools.run(self._sync_pool, workers=self.config.workers),
            self.claim_queue.run(self._sync_claim, workers=self.config.workers),
            list_watch(
                self.kube,
                RESOURCE_SLICES,
                on_list=self._slices_listed,
                on_event=self._slice_event,
                label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
            ),
            list_watch(
                self.kube,
                RESOURCE_CLAIMS,
                on_list=self._claims_listed,
                on_event=self._claim_event,
                label_selector=selectors.label_selector,
                field_selector=selectors.field_selector,
            ),
            self._resync(),
        ]
        for watcher in self.config.watchers:
            tasks.append(watcher(self.resync_pools))
        for driver in self.config.drivers:
            tasks.append(driver.watch(self._pools_changed_for(driver.name)))
        log.info(
            "Agent started",
            nodes=len(self.config.nodes),
            drivers=sorted(self.drivers),
            cdi_dir=str(self.config.cdi_dir),
            state_dir=str(self.config.state_dir),
            claims_selected_by=selectors.field_selector or selectors.label_selector or "none",
        )
        await asyncio.gather(*tasks)

    async def wait_synced(self) -> None:
        """Until both lists are in and both queues are idle (benchmarks and tests)."""
        await self.slices_listed.wait()
        await self.slices_published.wait()
        await self.claims_listed.wait()
        await self.pools.wait_idle()
        await self.claim_queue.wait_idle()

    async def _setup_nodes(self) -> None:
        limit = asyncio.Semaphore(16)

        async def one(node: str) -> None:
            async with limit:
                if self.config.create_nodes:
                    self.node_uids[node] = await ensure_node(
                        self.kube, node, labels={"draco.dev/simulated": "true"}
                    )
                else:
                    self.node_uids[node] = await node_uid(self.kube, node)

        await asyncio.gather(*(one(n) for n in self.config.nodes))

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            self.resync_pools()
            for uid in list(self.claims) + [u for p in self.preparers.values() for u in p.prepared_uids()]:
                self.claim_queue.add(uid)

    # ---- pools

    def resync_pools(self) -> None:
        """Queue every pool of every driver for a sync (inventories may have changed)."""
        for driver in self.drivers:
            for node in self.config.nodes:
                self.pools.add((driver, node))

    def _pools_changed_for(self, driver: str) -> Callable[[], None]:
        def notify() -> None:
            for node in self.config.nodes:
                self.pools.add((driver, node))

        return notify

    def _pool_of(self, obj: Mapping[str, Any]) -> PoolKey | None:
        spec = obj.get("spec") or {}
        key = (str(spec.get("driver")), str((spec.get("pool") or {}).get("name")))
        if key[0] in self.drivers and key[1] in self.preparers and spec.get("nodeName") == key[1]:
            return key
        return None

    def _cache_slice(self, obj: Obj) -> None:
        name = str(obj["metadata"]["name"])
        old = self.slices.get(name)
        if old is not None and _rv(old) > _rv(obj):
            return
        self.slices[name] = obj
        key = self._pool_of(obj)
        if key is not None:
            self.pool_slices[key].add(name)

    def _forget_slice(self, name: str) -> None:
        obj = self.slices.pop(name, None)
        key = self._pool_of(obj) if obj else None
        if key is not None:
            self.pool_slices[key].discard(name)

    def _slices_listed(self, items: list[Obj]) -> None:
        self.slices.clear()
        self.pool_slices.clear()
        for obj in items:
            self._cache_slice(obj)
        if self._unpublished is None:  # the first list: readiness waits for every pool
            self._unpublished = {(d, n) for d in self.drivers for n in self.config.nodes}
            self._published(None)
        self.resync_pools()
        self.slices_listed.set()

    def _published(self, key: PoolKey | None) -> None:
        """A pool's slices now match its inventory; the last of the first round sets readiness."""
        if self._unpublished is None or self.slices_published.is_set():
            return
        if key is not None:
            self._unpublished.discard(key)
        if not self._unpublished:
            self.slices_published.set()

    def _slice_event(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            key = self._pool_of(obj)
            current = self.slices.get(str(obj["metadata"]["name"]))
            if current is None or _rv(current) <= _rv(obj):
                self._forget_slice(str(obj["metadata"]["name"]))
        else:
            self._cache_slice(obj)
            key = self._pool_of(obj)
        if key is not None:
            self.pools.add(key)

    async def _sync_pool(self, key: PoolKey) -> None:
        driver_name, node = key
        driver = self.drivers[driver_name]
        inventory = driver.inventory(node)
        self._health_changed(key, inventory.devices)
        existing = [self.slices[n] for n in sorted(self.pool_slices.get(key, ())) if n in self.slices]
        desired = desired_slices(
            driver=driver_name,
            node=node,
            inventory=inventory,
            published=published_devices(existing),
            now=datetime.now(UTC),
        )
        uid = self.node_uids.get(node)
        owner = (
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
            if uid
            else None
        )
        plan = plan_pool(desired, existing, labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE}, owner=owner)
        metrics.PUBLISHED_DEVICES.labels(driver=driver_name).set(
            len(inventory.devices) * len(self.config.nodes)
        )
        if plan.empty:
            self._published(key)
            return
        for body in plan.create:
            try:
                self._cache_slice(await self.kube.create(RESOURCE_SLICES, body))
            except AlreadyExistsError as exc:
                raise ConflictError(
                    f"slice {body['metadata']['name']} exists but is not cached yet", status=409
                ) from exc
            metrics.SLICE_WRITES.labels(operation="create").inc()
        for body in plan.update:
            try:
                self._cache_slice(await self.kube.replace(RESOURCE_SLICES, body))
            except NotFoundError:
                body["metadata"].pop("resourceVersion", None)
                self._cache_slice(await self.kube.create(RESOURCE_SLICES, body))
            metrics.SLICE_WRITES.labels(operation="update").inc()
        for name, version in plan.delete:
            await self.kube.delete(RESOURCE_SLICES, name, resource_version=version)
            self._forget_slice(name)
            metrics.SLICE_WRITES.labels(operation="delete").inc()
        self._published(key)
        log.info(
            "Published pool",
            driver=driver_name,
            pool=node,
            generation=plan.generation,
            slices=len(desired),
            devices=len(inventory.devices),
            created=len(plan.create),
            updated=len(plan.update),
            deleted=len(plan.delete),
        )

    def _health_changed(self, key: PoolKey, devices: Sequence[Any]) -> None:
        """Queue the node's prepared claims when the pool's unhealthy devices changed."""
        unhealthy = frozenset((d.name, p) for d in devices if (p := device_problem(d.taints)))
        if self._unhealthy.get(key, frozenset()) == unhealthy:
            return
        self._unhealthy[key] = unhealthy
        for uid in self.preparers[key[1]].prepared_uids():
            self.claim_queue.add(uid)

    # ---- health of prepared claims

    def _claim_problems(self, claim: Mapping[str, Any]) -> dict[DeviceKey, str]:
        """The unhealthy devices among the claim's prepared devices on this agent's nodes."""
        found: dict[DeviceKey, str] = {}
        uid = str(claim["metadata"].get("uid"))
        for node, preparer in self.preparers.items():
            if preparer.checkpoint.get(uid) is None:
                continue
            for result in preparer.my_results(claim):
                driver = self.drivers[str(result["driver"])]
                device = driver.inventory(node).device(str(result["device"]))
                problem = device_problem(device.taints) if device is not None else None
                if problem:
                    found[(str(result["driver"]), node, str(result["device"]))] = problem
        return found

    def _told_unhealthy(self, node: str, obj: Mapping[str, Any]) -> bool:
        """Whether the claim's status still says one of this node's devices is unhealthy."""
        return any(
            c.get("type") == HEALTHY_CONDITION
            for e in (obj.get("status") or {}).get("devices") or []
            if self._owned_entry(e, node)
            for c in e.get("conditions") or []
        )

    # ---- claims

    def _concerns_us(self, uid: str, obj: Mapping[str, Any] | None) -> bool:
        if any(p.checkpoint.get(uid) is not None for p in self.preparers.values()):
            return True
        if obj is None:
            return False
        if any(p.my_results(obj) for p in self.preparers.values()):
            return True
        return any(self._owned_entry(e) for e in (obj.get("status") or {}).get("devices") or [])

    def _owned_entry(self, entry: Mapping[str, Any], node: str | None = None) -> bool:
        pool = entry.get("pool")
        return entry.get("driver") in self.drivers and (pool == node if node else pool in self.preparers)

    def _claims_listed(self, items: list[Obj]) -> None:
        self.claims = {str(o["metadata"]["uid"]): o for o in items}
        for uid, obj in self.claims.items():
            if self._concerns_us(uid, obj):
                self.claim_queue.add(uid)
        for preparer in self.preparers.values():
            for uid in preparer.prepared_uids():
                self.claim_queue.add(uid)
        self.claims_listed.set()

    def _claim_event(self, kind: str, obj: Obj) -> None:
        uid = str(obj["metadata"]["uid"])
        if kind == "DELETED":
            self.claims.pop(uid, None)
        else:
            old = self.claims.get(uid)
            if old is not None and _rv(old) > _rv(obj):
                return
            self.claims[uid] = obj
        if self._concerns_us(uid, None if kind == "DELETED" else obj):
            self.claim_queue.add(uid)

    async def _live_claim(self, uid: str) -> Obj | None:
        """The claim `uid` as the API has it now, for a claim this agent prepared but its
        watch does not show: deallocated or deleted (the usual case), or allocated before
        the operator recorded claims' nodes (then it stays prepared)."""
        record = next((r for p in self.preparers.values() if (r := p.checkpoint.get(uid)) is not None), None)
        if record is None:
            return None
        obj = await self.kube.get_or_none(RESOURCE_CLAIMS, record.name, namespace=record.namespace)
        return obj if obj is not None and obj["metadata"].get("uid") == uid else None

    async def _sync_claim(self, uid: str) -> None:
        obj = self.claims.get(uid)
        if obj is None:
            obj = await self._live_claim(uid)
        for node, preparer in self.preparers.items():
            results = preparer.my_results(obj) if obj else []
            if results and obj is not None:
                await self._prepare(node, preparer, obj)
            else:
                await self._unprepare(node, preparer, uid, obj)
        metrics.PREPARED_CLAIMS.set(sum(len(p.prepared_uids()) for p in self.preparers.values()))

    async def _prepare(self, node: str, preparer: NodePreparer, obj: Obj) -> None:
        claim = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        started = time.perf_counter()
        # File writes and fsyncs: in a thread, so the loop keeps serving watches and syncs.
        outcome = await asyncio.to_thread(preparer.prepare, obj)
        health = {k: v for k, v in self._claim_problems(obj).items() if k[1] == node} if outcome.ok else {}
        if health or self._told_unhealthy(node, obj):
            await self.pod_health.sync(obj)  # the pods first: the claim's status records they were told
        await self._write_status(node, obj, outcome, health)
        uid = str(obj["metadata"]["uid"])
        if outcome.ok:
            self._announced.pop(uid, None)
            if not outcome.wrote:
                return  # already prepared: nothing happened worth counting
        else:
            error = next(d.error for d in outcome.devices if d.error) or ""
            attempt = (_allocation_key(obj), error)
            if self._announced.get(uid) == attempt:
                return  # this allocation's failure was announced: a re-sync is no new attempt
            self._announced[uid] = attempt
        result = "success" if outcome.ok else "error"
        metrics.PREPARE_TOTAL.labels(result=result).inc()
        metrics.PREPARE_DURATION.labels(result=result).observe(time.perf_counter() - started)
        if outcome.ok:
            log.info(
                "Prepared claim",
                claim=claim,
                uid=obj["metadata"]["uid"],
                node=node,
                devices=len(outcome.devices),
            )
            names = ", ".join(natural_sorted(str(d.result.get("device")) for d in outcome.devices))
            notes = [n for d in outcome.devices for n in d.notes]
            message = f"Prepared {names} on node {node}" + (f"; {'; '.join(notes)}" if notes else "")
            await self._event(obj, "Prepared", message, node=node, type_="Normal")
        else:
            error = next(d.error for d in outcome.devices if d.error)
            log.warning("Preparing claim failed", claim=claim, node=node, error=error)
            await self._event(
                obj, REASON_FAILED_PREPARE, f"Preparing on node {node} failed: {error}", node=node
            )

    async def _event(
        self, obj: Obj, reason: str, message: str, *, node: str, type_: EventType = "Warning"
    ) -> None:
        """An Event on the claim, so `kubectl describe` shows what the node did; best effort.
        Reported from the node, as the kubelet reports its Events (the agent's Event policy
        accepts no other instance)."""
        try:
            await self.kube.emit_event(
                obj, reason=reason, message=message, type=type_, component=EVENT_COMPONENT, instance=node
            )
        except KubeError as exc:
            log.warning("Could not record event", reason=reason, status=exc.status, error=str(exc))

    async def _unprepare(self, node: str, preparer: NodePreparer, uid: str, obj: Obj | None) -> None:
        self._announced.pop(uid, None)
        started = time.perf_counter()
        record = preparer.checkpoint.get(uid)
        try:
            removed = await asyncio.to_thread(preparer.unprepare, uid)
        except OSError:
            metrics.UNPREPARE_TOTAL.labels(result="error").inc()
            raise
        if removed:
            metrics.UNPREPARE_TOTAL.labels(result="success").inc()
            metrics.UNPREPARE_DURATION.labels(result="success").observe(time.perf_counter() - started)
            claim = f"{record.namespace}/{record.name}" if record else uid
            log.info("Unprepared claim", claim=claim, uid=uid, node=node)
        if obj is not None and any(
            self._owned_entry(e, node) for e in (obj.get("status") or {}).get("devices") or []
        ):
            await self._write_status(node, obj, None)

    async def _write_status(
        self,
        node: str,
        obj: Obj,
        outcome: PrepareOutcome | None,
        health: Mapping[DeviceKey, str] | None = None,
    ) -> None:
        """Merge this node's entries into `status.devices` (remove them when `outcome` is
        None), conditional on the resourceVersion; re-read and retry on conflict."""
        meta = obj["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        results = [d.result for d in outcome.devices] if outcome else []
        for _ in range(8):
            existing = list((obj.get("status") or {}).get("devices") or [])
            mine = (
                device_entries(outcome.devices, existing=existing, now=datetime.now(UTC), health=health)
                if outcome
                else []
            )
            merged = merge_device_statuses(existing, mine, owned=lambda e: self._owned_entry(e, node))
            if merged == existing:
                return
            patch = {
                "metadata": {"resourceVersion": meta["resourceVersion"]},
                "status": {"devices": merged or None},
            }
            try:
                updated = await self.kube.patch(
                    RESOURCE_CLAIMS, name, patch, namespace=namespace, subresource="status"
                )
            except NotFoundError:
                return
            except ConflictError:
                got = await self.kube.get_or_none(RESOURCE_CLAIMS, name, namespace=namespace)
                if got is None:
                    return
                obj = got
                meta = obj["metadata"]
                if outcome is not None and self.preparers[node].my_results(obj) != results:
                    return
                continue
            if str(meta["uid"]) in self.claims:  # only what the watch shows is cached
                self._claim_event("MODIFIED", updated)
            return
        raise RuntimeError(f"claim {namespace}/{name}: status.devices kept changing under the agent")
