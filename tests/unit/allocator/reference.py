"""A tiny brute-force reference allocator for the property tests.

It works on a small abstract model of an inventory and claims (a handful of devices),
tries every combination with itertools in the order the real allocator must use (pools
by driver and name, devices in slice order, subrequests in list order, combinations
without permutations), and returns the first complete solution or None. It shares no
code with `draco.allocator`; the model is turned into manifests with the table kit.

Deliberately limited to what can be enumerated cheaply: admin access only where no
counters or multi-allocatable devices exist, no binding conditions, every pool complete
and valid.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import kit

DOMAIN = "example.com"
BLOCKING = ("NoSchedule", "NoExecute")

# Request selectors: CEL text and the same predicate in Python.
SELECTORS: list[tuple[str | None, Any]] = [
    (None, lambda d: True),
    (f'device.attributes["{DOMAIN}"].model == "a"', lambda d: d.model == "a"),
    (f'device.attributes["{DOMAIN}"].numa == 1', lambda d: d.numa == 1),
    (
        f'device.attributes["{DOMAIN}"].numa == 0 || device.attributes["{DOMAIN}"].model == "b"',
        lambda d: d.numa == 0 or d.model == "b",
    ),
]

# Toleration sets a request can carry.
TOLERATIONS: list[list[dict[str, Any]]] = [
    [],
    [kit.tol("k1", op="Exists")],
    [kit.tol("k2", op="Exists", effect="NoExecute")],
    [kit.tol(op="Exists")],
    [kit.tol("k1", op="Equal", value="v"), kit.tol("k2", op="Exists", effect="NoSchedule")],
]

CLASSES = {"gpu": kit.GPU, "nic": kit.NIC, "any": None}


@dataclass(frozen=True)
class Dev:
    driver: str
    pool: str
    name: str
    numa: int
    model: str
    links: tuple[str, ...]
    taints: tuple[tuple[str, str | None, str], ...] = ()  # key, value, effect
    multi: bool = False
    mem: int | None = None  # capacity "mem"
    consumes: int | None = None  # draws this much of the pool's counter "mem"
    # requestPolicy of "mem" (multi-allocatable devices only): ("default", d),
    # ("range", default, min, step or 0, max or 0) or ("values", default, v1, v2, ...).
    policy: tuple[Any, ...] | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True)
class Pool:
    driver: str
    name: str
    node: str | None  # None: allNodes
    devices: tuple[Dev, ...]
    counter: int | None = None  # value of counter set "cs", counter "mem"


@dataclass(frozen=True)
class Alt:
    """An exact request or one subrequest."""

    cls: str
    count: int = 1
    all: bool = False
    selector: int = 0
    tolerations: int = 0
    cap: int | None = None
    admin: bool = False


@dataclass(frozen=True)
class Request:
    name: str
    alts: tuple[Alt, ...]
    prioritized: bool = False

    def result_name(self, index: int) -> str:
        return f"{self.name}/s{index}" if self.prioritized else self.name


@dataclass(frozen=True)
class Constraint:
    kind: str  # "match" | "distinct"
    attribute: str  # "numa" | "model" | "links"
    requests: tuple[str, ...] = ()


@dataclass(frozen=True)
class Claim:
    name: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class Existing:
    """Devices of existing claims: dedicated, or shares (device key, mem) of multi devices."""

    dedicated: tuple[tuple[str, str, str], ...] = ()
    shares: tuple[tuple[tuple[str, str, str], int], ...] = ()
    admin: tuple[tuple[str, str, str], ...] = ()  # admin-access results: block nothing


@dataclass
class World:
    pools: list[Pool]
    claims: list[Claim]
    existing: Existing = field(default_factory=Existing)
    node: str = "node-1"

    # ------------------------------------------------------------------ views
    def node_devices(self) -> list[Dev]:
        """Devices usable on the node, in the order the allocator must try them."""
        out: list[Dev] = []
        for pool in sorted(self.pools, key=lambda p: (p.driver, p.name)):
            if pool.node is None or pool.node == self.node:
                out.extend(pool.devices)
        return out

    def pool_of(self, dev: Dev) -> Pool:
        return next(p for p in self.pools if p.driver == dev.driver and p.name == dev.pool)

    def device(self, key: tuple[str, str, str]) -> Dev:
        for pool in self.pools:
            for d in pool.devices:
                if d.key == key:
                    return d
        raise KeyError(key)


# ---------------------------------------------------------------------- checks


def selected(alt: Alt, dev: Dev) -> bool:
    driver = CLASSES[alt.cls]
    if driver is not None and dev.driver != driver:
        return False
    return bool(SELECTORS[alt.selector][1](dev))


def tolerated(dev: Dev, alt: Alt) -> bool:
    for key, value, effect in dev.taints:
        if effect not in BLOCKING:
            continue
        if not any(_tolerates(t, key, value, effect) for t in TOLERATIONS[alt.tolerations]):
            return False
    return True


def _tolerates(t: dict[str, Any], key: str, value: str | None, effect: str) -> bool:
    if t.get("key") and t["key"] != key:
        return False
    if t.get("effect") and t["effect"] != effect:
        return False
    if t.get("operator", "Equal") == "Exists":
        return True
    return (t.get("value") or "") == (value or "")


def _attr(dev: Dev, name: str) -> Any:
    return getattr(dev, name)


def _as_set(value: Any) -> frozenset[Any]:
    return frozenset(value) if isinstance(value, tuple) else frozenset([value])


def constraint_holds(c: Constraint, devices: Sequence[Dev]) -> bool:
    values = [_attr(d, c.attribute) for d in devices]
    if len(values) < 2:
        return True
    if c.kind == "match":
        common = _as_set(values[0])
        for v in values[1:]:
            common &= _as_set(v)
        return bool(common)
    sets = [_as_set(v) for v in values]
    return all(not (a & b) for a, b in itertools.combinations(sets, 2))


Pick = tuple[str, Alt, tuple[Dev, ...]]  # result request name, alternative, devices


def feasible(world: World, picks: Sequence[Sequence[Pick]]) -> bool:
    """Whether these picks (per claim) can all be allocated together: in use, capacity,
    counters, taints, selectors and constraints."""
    existing_dedicated = set(world.existing.dedicated)
    picked: set[tuple[str, str, str]] = set()  # in this attempt, by any claim
    share_use: dict[tuple[str, str, str], int] = defaultdict(int)
    charged: set[tuple[str, str, str]] = set()
    counter_use: dict[tuple[str, str], int] = defaultdict(int)

    def charge(dev: Dev) -> bool:
        if dev.consumes is None or dev.key in charged:
            return True
        charged.add(dev.key)
        pool = world.pool_of(dev)
        counter_use[(pool.driver, pool.name)] += dev.consumes
        return pool.counter is not None and counter_use[(pool.driver, pool.name)] <= pool.counter

    # Existing claims only use counters up; they may even overdraw them (the slice
    # changed after they were allocated). Only new picks are checked.
    for key in world.existing.dedicated:
        charge(world.device(key))
    for key, amount in world.existing.shares:
        share_use[key] += amount
        charge(world.device(key))

    for claim_index, claim_picks in enumerate(picks):
        picked_by_claim: set[tuple[str, str, str]] = set()
        for _name, alt, devices in claim_picks:
            for dev in devices:
                if not selected(alt, dev) or not tolerated(dev, alt):
                    return False
                if dev.multi:
                    amount = consumption(alt, dev)
                    if dev.key in existing_dedicated or dev.mem is None or amount is None:
                        return False
                    share_use[dev.key] += amount
                    if share_use[dev.key] > dev.mem:
                        return False
                else:
                    # Admin access ignores devices in use, except its own claim's picks;
                    # its own picks still count as in use for everyone else.
                    if alt.admin:
                        if dev.key in picked_by_claim:
                            return False
                    elif dev.key in existing_dedicated or dev.key in picked:
                        return False
                    picked.add(dev.key)
                    picked_by_claim.add(dev.key)
                    if alt.cap is not None and (dev.mem is None or alt.cap > dev.mem):
                        return False
                if not charge(dev):
                    return False
        claim = world.claims[claim_index]
        for c in claim.constraints:
            members = [
                d
                for name, _alt, devices in claim_picks
                if not c.requests or name.split("/")[0] in c.requests
                for d in devices
            ]
            if not constraint_holds(c, members):
                return False
    return True


def consumption(alt: Alt, dev: Dev) -> int | None:
    """How much of "mem" one share takes for this request (None: the policy forbids it)."""
    assert dev.mem is not None
    policy = dev.policy
    default = policy[1] if policy else None
    if alt.cap is None:
        return default if default is not None else dev.mem
    amount = alt.cap
    if policy is None or policy[0] == "default":
        return amount
    if policy[0] == "range":
        _, _, low, step, high = policy
        if amount < low:
            amount = low
        elif step:
            amount = low + -(-(amount - low) // step) * step
        if amount == default:
            return amount
        if (high and amount > high) or (step and (amount - low) % step):
            return None
        return amount
    values = sorted(policy[2:])
    amount = next((v for v in values if v >= amount), amount)
    return amount if amount == default or amount in values else None


def _capacity(dev: Dev) -> Any:
    if dev.policy is None:
        return str(dev.mem)
    kind, default, *rest = dev.policy
    if kind == "default":
        return kit.cap(dev.mem, default=default)
    if kind == "range":
        low, step, high = rest
        return kit.cap(dev.mem, default=default, min=low, step=step or None, max=high or None)
    return kit.cap(dev.mem, default=default, values=rest)


# ------------------------------------------------------------------ the search


def all_mode_set(world: World, alt: Alt) -> tuple[Dev, ...]:
    """The devices an "All" (sub)request must take: every selected device of the node
    that passes the capacity check against existing claims (it has the requested
    capacity, and room for it)."""
    existing_share: dict[tuple[str, str, str], int] = defaultdict(int)
    for key, amount in world.existing.shares:
        existing_share[key] += amount
    out = []
    for dev in world.node_devices():
        if not selected(alt, dev):
            continue
        if alt.cap is not None and (dev.mem is None or (not dev.multi and alt.cap > dev.mem)):
            continue  # the capacity check leaves it out of the set
        if dev.multi and dev.mem is not None:
            want = consumption(alt, dev)
            if want is None or existing_share[dev.key] + want > dev.mem:
                continue
        out.append(dev)
    return tuple(out)


def _choices(world: World, alt: Alt) -> Iterator[tuple[Dev, ...]]:
    if alt.all:
        devices = all_mode_set(world, alt)
        if devices:
            yield devices
        return
    candidates = [d for d in world.node_devices() if selected(alt, d)]
    yield from itertools.combinations(candidates, alt.count)


def first_solution(world: World) -> list[list[Pick]] | None:
    """The first solution in the allocator's search order, or None when nothing fits."""
    slots = [(ci, r) for ci, claim in enumerate(world.claims) for r in claim.requests]

    def go(index: int, picks: list[list[Pick]]) -> list[list[Pick]] | None:
        if index == len(slots):
            return [list(p) for p in picks]
        claim_index, request = slots[index]
        for alt_index, alt in enumerate(request.alts):
            name = request.result_name(alt_index)
            for devices in _choices(world, alt):
                picks[claim_index].append((name, alt, devices))
                if feasible(world, picks):
                    found = go(index + 1, picks)
                    if found is not None:
                        return found
                picks[claim_index].pop()
        return None

    return go(0, [[] for _ in world.claims])


# ------------------------------------------------------------ to manifests


def _share_id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def to_case(world: World) -> kit.Case:
    """The world as a table case (the expected outcome is filled in by the caller)."""
    slices = []
    for pool in world.pools:
        node_kwargs: dict[str, Any] = {"node": pool.node} if pool.node else {"node": None, "all_nodes": True}
        devices = [
            kit.dev(
                d.name,
                attrs={
                    f"{DOMAIN}/numa": d.numa,
                    f"{DOMAIN}/model": d.model,
                    f"{DOMAIN}/links": list(d.links),
                },
                capacity={"mem": _capacity(d)} if d.mem is not None else None,
                taints=[kit.taint(k, e, value=v) for k, v, e in d.taints] or None,
                multi=True if d.multi else None,
                consumes={"cs": {"mem": str(d.consumes)}} if d.consumes is not None else None,
            )
            for d in pool.devices
        ]
        base = f"{pool.driver.split('.')[0]}-{pool.name}"
        if pool.counter is not None:
            slices.append(
                kit.slice_(
                    f"{base}-a",
                    driver=pool.driver,
                    pool=pool.name,
                    count=2,
                    shared_counters=[kit.counter_set("cs", {"mem": str(pool.counter)})],
                    **node_kwargs,
                )
            )
            slices.append(
                kit.slice_(
                    f"{base}-b", driver=pool.driver, pool=pool.name, count=2, devices=devices, **node_kwargs
                )
            )
        else:
            slices.append(
                kit.slice_(f"{base}-b", driver=pool.driver, pool=pool.name, devices=devices, **node_kwargs)
            )

    def alt_fields(alt: Alt) -> dict[str, Any]:
        sel = SELECTORS[alt.selector][0]
        return {
            "count": None if alt.all else alt.count,
            "all": alt.all,
            "selectors": [sel] if sel else [],
            "tolerations": TOLERATIONS[alt.tolerations] or None,
            "capacity": {"mem": str(alt.cap)} if alt.cap is not None else None,
        }

    def admin_field(alt: Alt) -> dict[str, Any]:
        return {"admin": True} if alt.admin else {}

    claims = []
    for claim in world.claims:
        requests = []
        for r in claim.requests:
            if r.prioritized:
                requests.append(
                    kit.first(
                        r.name, *[kit.sub(f"s{i}", a.cls, **alt_fields(a)) for i, a in enumerate(r.alts)]
                    )
                )
            else:
                requests.append(
                    kit.req(r.name, r.alts[0].cls, **alt_fields(r.alts[0]), **admin_field(r.alts[0]))
                )
        constraints = [
            (kit.match if c.kind == "match" else kit.distinct)(f"{DOMAIN}/{c.attribute}", *c.requests)
            for c in claim.constraints
        ]
        claims.append(kit.claim(claim.name, *requests, constraints=constraints))

    allocated = []
    n = 0
    for key in world.existing.dedicated:
        n += 1
        driver, pool, device = key
        allocated.append(kit.allocated(f"old-{n}", kit.res("r", device, driver=driver, pool=pool)))
    for key, amount in world.existing.shares:
        n += 1
        driver, pool, device = key
        allocated.append(
            kit.allocated(
                f"old-{n}",
                kit.res(
                    "r",
                    device,
                    driver=driver,
                    pool=pool,
                    shareID=_share_id(n),
                    consumedCapacity={"mem": str(amount)},
                ),
            )
        )
    for key in world.existing.admin:
        n += 1
        driver, pool, device = key
        allocated.append(
            kit.allocated(f"old-{n}", kit.res("r", device, driver=driver, pool=pool, adminAccess=True))
        )
    classes = [
        kit.device_class("gpu", driver=kit.GPU),
        kit.device_class("nic", driver=kit.NIC),
        kit.device_class("any", driver=None),
    ]
    return kit.case(
        "property",
        claims=claims,
        classes=classes,
        slices=slices,
        allocated=allocated,
        expected=kit.unfit(),
        node=world.node,
    )
