"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.

Several `draco operator` replicas may run; only the one holding the Lease runs the
controllers. The rules are client-go's `leaderelection` package, so a draco Lease reads
like kube-scheduler's or kube-controller-manager's:

- A candidate GETs the Lease and creates it when there is none. A Lease whose holder is
  someone else is left alone until it has not changed for `leaseDurationSeconds` *as
  measured on this candidate's own monotonic clock* since it last saw it change: the
  holder's `renewTime` is never compared with our clock, so clock skew cannot shorten a
  lease. An empty holder (a released Lease) is free at once.
- Taking the Lease writes holder, `acquireTime`, `renewTime` and `leaseTransitions + 1`
  with the resourceVersion read (a concurrent candidate gets a conflict and loses).
  Renewing keeps `acquireTime` and the transition count.
- The leader renews every retry period. If it cannot renew for the renew deadline (10 s,
  less than the 15 s lease), it stops leading before anyone else may start: the caller's
  `on_lost` runs, and `draco operator` exits the process at once (client-go's controllers
  `klog.Fatal` there too), so nothing it had in flight can still write.
- On a clean stop the leader releases the Lease (empty holder, duration 1 s) so that a
  standby takes over at once instead of waiting out the lease.

The decisions are the pure `Election` (clock injected, unit-tested); `LeaderElector` does
the I/O. `ElectionThread` runs the elector on its own thread and event loop, with its own
API client: renewals then never wait behind a busy operator loop, and losing the lease
ends the process even when that loop is stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from prometheus_client import Gauge

from draco.kube.client import ConflictError, Kube, KubeError, NotFoundError, Obj, Resource, connect
from draco.logs import get_logger
from draco.runtime.metrics import REGISTRY

__all__ = [
    "DEFAULT_LEASE_NAME",
    "LEADER_STATUS",
    "LEASES",
    "Election",
    "ElectionConfig",
    "ElectionThread",
    "LeaderElector",
    "LeaseRecord",
    "default_identity",
    "default_lease_namespace",
    "jittered",
    "lease_spec",
    "micro_time_now",
    "record_of",
]

log = get_logger(__name__)

LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
DEFAULT_LEASE_NAME: Final = "draco-operator"
#: client-go's JitterFactor: a candidate retries after retry_period * (1 + rand * 1.2).
JITTER_FACTOR: Final = 1.2
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: How long past the renew deadline a leader may go unrenewed before /healthz fails
#: (kube-controller-manager gives its leader-election healthz check 20 s).
HEALTH_TOLERANCE_S: Final = 20.0

#: client-go's gauge: 1 while this process holds the lease `name`.
LEADER_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease.",
    ["name"],
    registry=REGISTRY,
)

Clock = Callable[[], float]
WallClock = Callable[[], str]


def micro_time_now() -> str:
    """Now as a MicroTime (`2006-01-02T15:04:05.000000Z`), the Lease's time format."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """client-go's convention: the pod's name (its hostname in a pod) plus a random
    suffix, so a restarted process never mistakes its predecessor's lease for its own."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "draco-operator"
    return f"{base}_{secrets.token_hex(6)}"


def default_lease_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's own namespace (from its service-account mount), else `default`."""
    try:
        namespace = path.read_text().strip()
    except OSError:
        return "default"
    return namespace or "default"


@dataclass(frozen=True, kw_only=True)
class ElectionConfig:
    """Which Lease, who we are, and client-go's timings (defaults: 15 s, 10 s, 2 s)."""

    name: str
    namespace: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        # The same checks as client-go's NewLeaderElector.
        if not self.name or not self.namespace:
            raise ValueError("leader election needs a lease name and namespace")
        if not self.identity:
            raise ValueError("leader election needs a holder identity")
        if min(self.lease_duration_s, self.renew_deadline_s, self.retry_period_s) <= 0:
            raise ValueError("lease duration, renew deadline and retry period must be more than 0")
        if self.lease_duration_s <= self.renew_deadline_s:
            raise ValueError("the lease duration must be more than the renew deadline")
        if self.renew_deadline_s <= JITTER_FACTOR * self.retry_period_s:
            raise ValueError(f"the renew deadline must be more than {JITTER_FACTOR} times the retry period")


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's spec (client-go's LeaderElectionRecord)."""

    holder: str = ""
    lease_duration_s: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0


def record_of(lease: Obj) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def lease_spec(record: LeaseRecord) -> Obj:
    spec: Obj = {
        "holderIdentity": record.holder or None,
        "leaseDurationSeconds": record.lease_duration_s,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time:
        spec["acquireTime"] = record.acquire_time
    if record.renew_time:
        spec["renewTime"] = record.renew_time
    return spec


class Election:
    """The decisions of one candidate, without I/O (client-go's tryAcquireOrRenew).

    `clock` is monotonic seconds; `wall` gives the MicroTime written into the Lease.
    """

    def __init__(
        self, config: ElectionConfig, *, clock: Clock = time.monotonic, wall: WallClock = micro_time_now
    ):
        self.config = config
        self.clock = clock
        self.wall = wall
        self.observed: LeaseRecord | None = None
        #: When (our clock) the observed record last changed, or was last written by us.
        self.observed_at = 0.0

    @property
    def is_leader(self) -> bool:
        return self.observed is not None and self.observed.holder == self.config.identity

    @property
    def holder(self) -> str:
        return self.observed.holder if self.observed is not None else ""

    def observe(self, record: LeaseRecord) -> None:
        """Note the Lease as read; the clock restarts only when it changed."""
        if record != self.observed:
            self.observed = record
            self.observed_at = self.clock()

    def lease_valid(self) -> bool:
        """Whether the observed holder's lease still runs on our clock."""
        if self.observed is None:
            return False
        return self.observed_at + self.observed.lease_duration_s > self.clock()

    def to_create(self) -> LeaseRecord:
        """The record of a new Lease: ours, first transition."""
        now = self.wall()
        return LeaseRecord(
            holder=self.config.identity,
            lease_duration_s=_whole_seconds(self.config.lease_duration_s),
            acquire_time=now,
            renew_time=now,
            transitions=0,
        )

    def to_write(self, current: LeaseRecord) -> LeaseRecord | None:
        """What to write over `current` to take or keep the lease, or None when its
        holder (someone else) may still be leading."""
        self.observe(current)
        if current.holder and current.holder != self.config.identity and self.lease_valid():
            return None
        now = self.wall()
        if current.holder == self.config.identity:
            return replace(
                current, lease_duration_s=_whole_seconds(self.config.lease_duration_s), renew_time=now
            )
        return LeaseRecord(
            holder=self.config.identity,
            lease_duration_s=_whole_seconds(self.config.lease_duration_s),
            acquire_time=now,
            renew_time=now,
            transitions=current.transitions + 1,
        )

    def written(self, record: LeaseRecord) -> None:
        """Our write of `record` went through."""
        self.observed = record
        self.observed_at = self.clock()

    def to_release(self) -> LeaseRecord | None:
        """client-go's release record (no holder, 1 s) when we hold the lease, else None."""
        if self.observed is None or not self.is_leader:
            return None
        now = self.wall()
        return LeaseRecord(
            holder="",
            lease_duration_s=1,
            acquire_time=now,
            renew_time=now,
            transitions=self.observed.transitions,
        )

    def renew_overdue(self, *, round_started: float) -> bool:
        """Whether a renew round that began at `round_started` has run past the deadline."""
        return self.clock() - round_started >= self.config.renew_deadline_s

    def healthy(self, *, tolerance_s: float = 0.0) -> bool:
        """client-go's healthz adaptor: a leader whose last renewal is older than the renew
        deadline (plus `tolerance_s`) is stuck; a standby is always healthy."""
        if not self.is_leader:
            return True
        return self.clock() - self.observed_at <= self.config.renew_deadline_s + tolerance_s


def _whole_seconds(seconds: float) -> int:
    return max(1, int(seconds))


def jittered(period: float, *, rng: random.Random | None = None) -> float:
    """client-go's wait.Jitter(period, JitterFactor)."""
    return period + (rng or random).random() * JITTER_FACTOR * period


class LeaderElector:
    """Runs the election against the API (see the module docstring).

    `on_started` runs once the lease is ours, `on_lost` when the renew deadline passes,
    `on_new_leader` whenever another holder is observed; all run on the elector's loop.
    """

    def __init__(
        self,
        config: ElectionConfig,
        *,
        kube: Kube,
        on_started: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
        on_new_leader: Callable[[str], None] = lambda holder: None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self.kube = kube
        self.election = Election(config, clock=clock)
        self.on_started = on_started
        self.on_lost = on_lost
        self.on_new_leader = on_new_leader
        self.clock = clock
        self.sleep = sleep
        self._reported_holder = ""
        self._lease: Obj | None = None

    async def run(self, stop: asyncio.Event) -> bool:
        """Acquire, then renew until `stop` is set (returns True: stopped while leading or
        waiting) or the lease is lost (returns False after `on_lost`)."""
        LEADER_STATUS.labels(self.config.name).set(0)
        log.info(
            "Waiting for leadership",
            lease=f"{self.config.namespace}/{self.config.name}",
            identity=self.config.identity,
        )
        while not stop.is_set():
            if await self.try_acquire_or_renew(budget_s=self.config.renew_deadline_s):
                break
            if await _wait(stop, jittered(self.config.retry_period_s)):
                return True
        else:
            return True
        LEADER_STATUS.labels(self.config.name).set(1)
        log.info(
            "Became leader",
            lease=f"{self.config.namespace}/{self.config.name}",
            identity=self.config.identity,
            transitions=self.election.observed.transitions if self.election.observed else 0,
        )
        self.on_started()
        while True:
            if await _wait(stop, self.config.retry_period_s):
                return True
            if not await self._renew(stop):
                if stop.is_set():
                    return True
                LEADER_STATUS.labels(self.config.name).set(0)
                log.error(
                    "Leadership lost",
                    lease=f"{self.config.namespace}/{self.config.name}",
                    identity=self.config.identity,
                    holder=self.election.holder,
                    renew_deadline_s=self.config.renew_deadline_s,
                )
                self.on_lost()
                return False

    async def _renew(self, stop: asyncio.Event) -> bool:
        """One renew round: retry every retry period until the renew deadline."""
        started = self.clock()
        while not stop.is_set():
            left = self.config.renew_deadline_s - (self.clock() - started)
            if left <= 0:
                return False
            if await self.try_acquire_or_renew(budget_s=left):
                return True
            if not self.election.is_leader and self.election.lease_valid():
                return False  # someone else holds it now: no point in waiting for the deadline
            if self.election.renew_overdue(round_started=started):
                return False
            await _wait(stop, min(self.config.retry_period_s, max(0.0, left)))
        return False

    async def try_acquire_or_renew(self, *, budget_s: float) -> bool:
        """One attempt: True when the lease is ours after it. API errors count as a failed attempt."""
        try:
            return await asyncio.wait_for(self._attempt(), timeout=max(budget_s, 0.001))
        except TimeoutError:
            log.warning("Lease request timed out", lease=self.config.name, timeout_s=round(budget_s, 3))
        except ConflictError:
            log.debug("Lease changed while we wrote it", lease=self.config.name)
        except KubeError as exc:
            log.warning("Lease request failed", lease=self.config.name, status=exc.status, error=str(exc))
        except Exception as exc:  # a candidate must keep trying, whatever broke
            log.warning("Lease request failed", lease=self.config.name, error=repr(exc))
        return False

    async def _attempt(self) -> bool:
        if self.election.is_leader and self._lease is not None:
            # client-go's fast path: the leader renews over the Lease it last wrote, without
            # reading it first (half the requests); if anyone else wrote it since, the
            # resourceVersion conflicts and the Lease is read as below.
            last = self._lease
            renewal = self.election.to_write(record_of(last))
            if renewal is not None:
                try:
                    written = await self.kube.replace(
                        LEASES, {**last, "spec": {**(last.get("spec") or {}), **lease_spec(renewal)}}
                    )
                except (ConflictError, NotFoundError):
                    self._lease = None
                else:
                    self._lease = written
                    self.election.written(renewal)
                    return True
        try:
            lease = await self.kube.get(LEASES, self.config.name, namespace=self.config.namespace)
        except NotFoundError:
            record = self.election.to_create()
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": lease_spec(record),
            }
            self._lease = await self.kube.create(LEASES, body, namespace=self.config.namespace)
            self.election.written(record)
            return True
        current = record_of(lease)
        wanted = self.election.to_write(current)
        self._report_holder(current.holder)
        if wanted is None:
            return False
        written = await self.kube.replace(
            LEASES, {**lease, "spec": {**(lease.get("spec") or {}), **lease_spec(wanted)}}
        )
        self._lease = written
        self.election.written(wanted)
        return True

    def _report_holder(self, holder: str) -> None:
        if holder and holder != self._reported_holder and holder != self.config.identity:
            self._reported_holder = holder
            log.info("New leader observed", lease=self.config.name, holder=holder)
            self.on_new_leader(holder)

    async def release(self) -> bool:
        """Give the lease up if we hold it (client-go's ReleaseOnCancel)."""
        record = self.election.to_release()
        if record is None:
            return False
        try:
            lease = await asyncio.wait_for(
                self.kube.get(LEASES, self.config.name, namespace=self.config.namespace),
                timeout=self.config.renew_deadline_s,
            )
            if record_of(lease).holder != self.config.identity:
                return False
            await asyncio.wait_for(
                self.kube.replace(
                    LEASES, {**lease, "spec": {**(lease.get("spec") or {}), **lease_spec(record)}}
                ),
                timeout=self.config.renew_deadline_s,
            )
        except (KubeError, TimeoutError) as exc:
            log.warning("Could not release the lease", lease=self.config.name, error=str(exc))
            return False
        self.election.written(record)
        LEADER_STATUS.labels(self.config.name).set(0)
        log.info(
            "Released leadership",
            lease=f"{self.config.namespace}/{self.config.name}",
            identity=self.config.identity,
        )
        return True


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds` unless `stop` is set first; True when it was."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True


class ElectionThread:
    """A `LeaderElector` on a thread of its own, driven from the operator's loop.

    `wait_leading()` returns once this process holds the lease; `stop()` releases it (if
    held) and ends the thread. `on_lost` runs on the election thread: the operator's
    exits the process there, without waiting for its own (maybe busy) loop.
    """

    def __init__(
        self,
        config: ElectionConfig,
        *,
        on_lost: Callable[[], None],
        connect_kube: Callable[[], Awaitable[Kube]] | None = None,
    ) -> None:
        self.config = config
        self._on_lost = on_lost
        self._connect = connect_kube or (lambda: connect(field_manager="draco-leader-election"))
        self._thread = threading.Thread(target=self._main, name="leader-election", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._leading = threading.Event()
        self._ended = threading.Event()
        self.elector: LeaderElector | None = None
        self.error: BaseException | None = None

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    @property
    def alive(self) -> bool:
        """False once the election thread ended (then nobody renews: not healthy)."""
        return not self._ended.is_set()

    def healthy(self) -> bool:
        elector = self.elector
        return self.alive and (elector is None or elector.election.healthy(tolerance_s=HEALTH_TOLERANCE_S))

    def holder(self) -> str:
        elector = self.elector
        return elector.election.holder if elector is not None else ""

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    async def wait_leading(self) -> bool:
        """True once leading; False if the thread ended first."""
        loop = asyncio.get_running_loop()
        while not self._leading.is_set():
            if self._ended.is_set():
                return False
            await loop.run_in_executor(None, self._leading.wait, 0.5)
        return True

    def stop(self, timeout: float = 15.0) -> None:
        """Release the lease if held and end the thread (blocks up to `timeout`)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not self._ended.is_set():
            # (RuntimeError: the thread's loop closed meanwhile, nothing left to stop.)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # recorded for the owner; liveness reports a dead thread
            self.error = exc
            log.error("Leader election stopped", error=repr(exc))
        finally:
            self._ended.set()
            self._started.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        kube = await self._connect()
        try:
            self.elector = LeaderElector(
                self.config, kube=kube, on_started=self._leading.set, on_lost=self._lost
            )
            if await self.elector.run(self._stop):
                await self.elector.release()
        finally:
            await kube.close()

    def _lost(self) -> None:
        self._leading.clear()
        self._on_lost()
