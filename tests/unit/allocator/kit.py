"""Builders and a runner for the allocator's table-driven tests.

The table cases are written as plain manifest-shaped dicts (what a user writes in YAML,
`apiVersion: resource.k8s.io/v1`), built with the short helpers below, plus an expected
outcome: the devices each claim gets, "does not fit", or a fatal input error. They are
converted to `draco.api` models only when a case runs, so the data stays readable and
independent of the model code under test.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

API = "resource.k8s.io/v1"
NS = "default"

GPU = "gpu.example.com"
NIC = "nic.example.com"
FPGA = "fpga.example.com"

# ---------------------------------------------------------------------------------------
# Object builders (plain dicts, camelCase like the API)
# ---------------------------------------------------------------------------------------

Json = dict[str, Any]


def attr_value(value: Any) -> Json:
    """A DeviceAttribute from a Python value: int, bool, str, `ver("1.2.3")`, or a list."""
    if isinstance(value, dict):  # already shaped
        return dict(value)
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, list):
        if not value:
            raise ValueError("list attributes must not be empty")
        first = value[0]
        if isinstance(first, bool):
            return {"bools": list(value)}
        if isinstance(first, int):
            return {"ints": list(value)}
        if isinstance(first, dict) and "version" in first:
            return {"versions": [v["version"] for v in value]}
        return {"strings": list(value)}
    raise TypeError(f"unsupported attribute value {value!r}")


def ver(text: str) -> Json:
    """A version attribute value."""
    return {"version": text}


def dev(
    name: str,
    *,
    attrs: Mapping[str, Any] | None = None,
    capacity: Mapping[str, Any] | None = None,
    taints: Sequence[Json] | None = None,
    consumes: Mapping[str, Mapping[str, str]] | None = None,
    multi: bool | None = None,
    binding: Sequence[str] | None = None,
    binding_failure: Sequence[str] | None = None,
    binds_to_node: bool | None = None,
    node_name: str | None = None,
    node_selector: Json | None = None,
    all_nodes: bool | None = None,
) -> Json:
    """A Device. `capacity` values are quantities or `{"value":..., "requestPolicy":...}`;
    `consumes` maps a counter set to `{counter: quantity}`."""
    d: Json = {"name": name}
    if attrs:
        d["attributes"] = {k: attr_value(v) for k, v in attrs.items()}
    if capacity:
        d["capacity"] = {
            k: (dict(v) if isinstance(v, dict) else {"value": str(v)}) for k, v in capacity.items()
        }
    if taints:
        d["taints"] = list(taints)
    if consumes:
        d["consumesCounters"] = [
            {"counterSet": cs, "counters": {c: {"value": str(q)} for c, q in counters.items()}}
            for cs, counters in consumes.items()
        ]
    if multi is not None:
        d["allowMultipleAllocations"] = multi
    if binding:
        d["bindingConditions"] = list(binding)
        d["bindingFailureConditions"] = list(binding_failure or ["failed"])
    if binds_to_node is not None:
        d["bindsToNode"] = binds_to_node
    if node_name is not None:
        d["nodeName"] = node_name
    if node_selector is not None:
        d["nodeSelector"] = node_selector
    if all_nodes is not None:
        d["allNodes"] = all_nodes
    return d


def devs(count: int, *, prefix: str = "dev-", start: int = 0, **kwargs: Any) -> list[Json]:
    """`count` identical devices named prefix0, prefix1, ..."""
    return [dev(f"{prefix}{i}", **kwargs) for i in range(start, start + count)]


def cap(
    value: str | int,
    *,
    default: str | int | None = None,
    values: Sequence[str | int] | None = None,
    min: str | int | None = None,
    max: str | int | None = None,
    step: str | int | None = None,
) -> Json:
    """A DeviceCapacity with an optional request policy."""
    c: Json = {"value": str(value)}
    if default is not None or values is not None or min is not None:
        policy: Json = {}
        if default is not None:
            policy["default"] = str(default)
        if values is not None:
            policy["validValues"] = [str(v) for v in values]
        if min is not None:
            rng: Json = {"min": str(min)}
            if max is not None:
                rng["max"] = str(max)
            if step is not None:
                rng["step"] = str(step)
            policy["validRange"] = rng
        c["requestPolicy"] = policy
    return c


def taint(key: str, effect: str, value: str | None = None) -> Json:
    t: Json = {"key": key, "effect": effect}
    if value is not None:
        t["value"] = value
    return t


def tol(
    key: str | None = None,
    *,
    op: str | None = None,
    value: str | None = None,
    effect: str | None = None,
    seconds: int | None = None,
) -> Json:
    t: Json = {}
    if key is not None:
        t["key"] = key
    if op is not None:
        t["operator"] = op
    if value is not None:
        t["value"] = value
    if effect is not None:
        t["effect"] = effect
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def counter_set(name: str, counters: Mapping[str, str | int]) -> Json:
    return {"name": name, "counters": {c: {"value": str(q)} for c, q in counters.items()}}


def node_sel(*terms: Json) -> Json:
    """A NodeSelector from terms built with `term(...)`."""
    return {"nodeSelectorTerms": list(terms)}


def term(
    *,
    labels: Mapping[str, Sequence[str]] | None = None,
    op: str = "In",
    fields: Mapping[str, Sequence[str]] | None = None,
) -> Json:
    t: Json = {}
    if labels is not None:
        t["matchExpressions"] = [{"key": k, "operator": op, "values": list(v)} for k, v in labels.items()]
    if fields is not None:
        t["matchFields"] = [{"key": k, "operator": "In", "values": list(v)} for k, v in fields.items()]
    return t


def slice_(
    name: str | None = None,
    *,
    node: str | None = "node-1",
    driver: str = GPU,
    pool: str | None = None,
    generation: int = 0,
    count: int = 1,
    devices: Sequence[Json] | None = None,
    all_nodes: bool = False,
    node_selector: Json | None = None,
    per_device: bool = False,
    shared_counters: Sequence[Json] | None = None,
) -> Json:
    """A ResourceSlice. By default local to node-1, pool named after the node.

    Pass `node=None` together with one of `all_nodes`, `node_selector`, `per_device`.
    """
    pool_name = pool if pool is not None else (node or "shared")
    spec: Json = {
        "driver": driver,
        "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": count},
    }
    if all_nodes:
        spec["allNodes"] = True
    elif node_selector is not None:
        spec["nodeSelector"] = node_selector
    elif per_device:
        spec["perDeviceNodeSelection"] = True
    elif node is not None:
        spec["nodeName"] = node
    if devices is not None:
        spec["devices"] = list(devices)
    if shared_counters is not None:
        spec["sharedCounters"] = list(shared_counters)
    slice_name = name or f"{pool_name.replace('/', '-')}-{driver.split('.')[0]}-g{generation}"
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": slice_name}, "spec": spec}


def cel(expression: str) -> Json:
    return {"cel": {"expression": expression}}


def opaque(driver: str, params: Mapping[str, Any]) -> Json:
    return {"opaque": {"driver": driver, "parameters": dict(params)}}


def device_class(
    name: str, *, driver: str | None = GPU, selectors: Sequence[str] = (), config: Sequence[Json] = ()
) -> Json:
    """A DeviceClass. `driver` adds a selector on the driver name (None: no such selector)."""
    sels = []
    if driver is not None:
        sels.append(cel(f'device.driver == "{driver}"'))
    sels.extend(cel(s) for s in selectors)
    spec: Json = {}
    if sels:
        spec["selectors"] = sels
    if config:
        spec["config"] = list(config)
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _exact(
    cls: str,
    count: int | None,
    mode: str | None,
    selectors: Sequence[str],
    admin: bool | None,
    tolerations: Sequence[Json] | None,
    capacity: Mapping[str, str | int] | None,
) -> Json:
    e: Json = {"deviceClassName": cls}
    if mode is not None:
        e["allocationMode"] = mode
    if count is not None:
        e["count"] = count
    if selectors:
        e["selectors"] = [cel(s) for s in selectors]
    if admin is not None:
        e["adminAccess"] = admin
    if tolerations:
        e["tolerations"] = list(tolerations)
    if capacity:
        e["capacity"] = {"requests": {k: str(v) for k, v in capacity.items()}}
    return e


def req(
    name: str,
    cls: str = "gpu",
    *,
    count: int | None = None,
    all: bool = False,
    selectors: Sequence[str] = (),
    admin: bool | None = None,
    tolerations: Sequence[Json] | None = None,
    capacity: Mapping[str, str | int] | None = None,
) -> Json:
    """An exact DeviceRequest (ExactCount with count 1 unless told otherwise)."""
    mode = "All" if all else ("ExactCount" if count is not None else None)
    return {"name": name, "exactly": _exact(cls, count, mode, selectors, admin, tolerations, capacity)}


def sub(
    name: str,
    cls: str = "gpu",
    *,
    count: int | None = None,
    all: bool = False,
    selectors: Sequence[str] = (),
    tolerations: Sequence[Json] | None = None,
    capacity: Mapping[str, str | int] | None = None,
) -> Json:
    """A DeviceSubRequest of a firstAvailable list."""
    mode = "All" if all else ("ExactCount" if count is not None else None)
    s = _exact(cls, count, mode, selectors, None, tolerations, capacity)
    s["name"] = name
    return s


def first(name: str, *subs: Json) -> Json:
    """A prioritized-list DeviceRequest."""
    return {"name": name, "firstAvailable": list(subs)}


def match(attribute: str, *requests: str) -> Json:
    c: Json = {"matchAttribute": attribute}
    if requests:
        c["requests"] = list(requests)
    return c


def distinct(attribute: str, *requests: str) -> Json:
    c: Json = {"distinctAttribute": attribute}
    if requests:
        c["requests"] = list(requests)
    return c


def claim_config(driver: str, params: Mapping[str, Any], *requests: str) -> Json:
    c: Json = opaque(driver, params)
    if requests:
        c["requests"] = list(requests)
    return c


def claim(
    name: str,
    *requests: Json,
    constraints: Sequence[Json] = (),
    config: Sequence[Json] = (),
    namespace: str = NS,
) -> Json:
    devices: Json = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    if config:
        devices["config"] = list(config)
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {"devices": devices},
    }


def allocated(
    name: str,
    *results: Json,
    namespace: str = NS,
    node: str | None = "node-1",
    requests: Sequence[Json] | None = None,
) -> Json:
    """An already-allocated claim. `results` are `res(...)` dicts; by default the spec
    holds one plain request per distinct request name (class "gpu")."""
    if requests is None:
        names: list[str] = []
        for r in results:
            base = r["request"].split("/")[0]
            if base not in names:
                names.append(base)
        requests = [
            req(n, admin=True if any(r.get("adminAccess") for r in results if r["request"] == n) else None)
            for n in names
        ]
    c = claim(name, *requests, namespace=namespace)
    allocation: Json = {"devices": {"results": [dict(r) for r in results]}}
    if node is not None:
        allocation["nodeSelector"] = local_selector(node)
    c["status"] = {
        "allocation": allocation,
        "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"uid-pod-{name}"}],
    }
    return c


def taint_rule(
    name: str,
    taint_: Json,
    *,
    driver: str | None = None,
    pool: str | None = None,
    device: str | None = None,
    no_selector: bool = False,
) -> Json:
    spec: Json = {"taint": taint_}
    if not no_selector:
        selector: Json = {}
        if driver is not None:
            selector["driver"] = driver
        if pool is not None:
            selector["pool"] = pool
        if device is not None:
            selector["device"] = device
        spec["deviceSelector"] = selector
    return {"apiVersion": API, "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec}


def local_selector(node: str) -> Json:
    return {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }


# ---------------------------------------------------------------------------------------
# Expected outcomes
# ---------------------------------------------------------------------------------------


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


LOCAL = _Sentinel("LOCAL")  # node selector pinned to the node under test
ANY = _Sentinel("ANY")  # not checked
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def res(request: str, device: str, *, driver: str = GPU, pool: str = "node-1", **extra: Any) -> Json:
    """An expected (or pre-existing) DeviceRequestAllocationResult.

    `extra` uses API field names: adminAccess, tolerations, bindingConditions,
    bindingFailureConditions, shareID (a string, or ANY for "some UUID"), consumedCapacity.
    """
    r: Json = {"request": request, "driver": driver, "pool": pool, "device": device}
    r.update(extra)
    return r


@dataclass(frozen=True)
class ClaimExpect:
    results: list[Json]
    config: list[Json] | _Sentinel = ANY
    node_selector: Json | _Sentinel | None = LOCAL


@dataclass(frozen=True)
class Ok:
    claims: dict[str, ClaimExpect]


@dataclass(frozen=True)
class Unfit:
    contains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Error:
    contains: tuple[str, ...] = ()


Outcome = Ok | Unfit | Error


def ok(
    *results: Json,
    claim: str = "claim-0",
    config: list[Json] | _Sentinel = ANY,
    node_selector: Json | _Sentinel | None = LOCAL,
) -> Ok:
    """Expected success for a single claim."""
    return Ok({claim: ClaimExpect(list(results), config, node_selector)})


def ok_many(**claims: list[Json] | ClaimExpect) -> Ok:
    """Expected success for several claims; keys are claim names with `_` for `-`."""
    out: dict[str, ClaimExpect] = {}
    for key, value in claims.items():
        name = key.replace("_", "-")
        out[name] = value if isinstance(value, ClaimExpect) else ClaimExpect(list(value))
    return Ok(out)


def expect(
    *results: Json, config: list[Json] | _Sentinel = ANY, node_selector: Json | _Sentinel | None = LOCAL
) -> ClaimExpect:
    return ClaimExpect(list(results), config, node_selector)


def unfit(*contains: str) -> Unfit:
    return Unfit(tuple(contains))


def error(*contains: str) -> Error:
    return Error(tuple(contains))


def cfg(source: str, driver: str, params: Mapping[str, Any], requests: Sequence[str] | None = None) -> Json:
    """An expected DeviceAllocationConfiguration (source "FromClass" or "FromClaim")."""
    c: Json = {"source": source, "opaque": {"driver": driver, "parameters": dict(params)}}
    c["requests"] = list(requests) if requests is not None else None
    return c


@dataclass
class Case:
    id: str
    claims: list[Json]
    expected: Outcome
    slices: list[Json] = field(default_factory=list)
    classes: list[Json] = field(default_factory=list)
    allocated: list[Json] = field(default_factory=list)
    taint_rules: list[Json] = field(default_factory=list)
    node: str = "node-1"
    labels: dict[str, str] = field(default_factory=lambda: {"zone": "a", "rack": "r1"})
    xfail: str | None = None


DEFAULT_CLASSES = [
    device_class("gpu", driver=GPU),
    device_class("nic", driver=NIC),
    device_class("fpga", driver=FPGA),
]


def case(
    id: str,
    *,
    claims: Sequence[Json],
    expected: Outcome,
    slices: Sequence[Json] = (),
    classes: Sequence[Json] | None = None,
    allocated: Sequence[Json] = (),
    taint_rules: Sequence[Json] = (),
    node: str = "node-1",
    labels: Mapping[str, str] | None = None,
    xfail: str | None = None,
) -> Case:
    return Case(
        id=id,
        claims=list(claims),
        expected=expected,
        slices=list(slices),
        classes=list(DEFAULT_CLASSES if classes is None else classes),
        allocated=list(allocated),
        taint_rules=list(taint_rules),
        node=node,
        labels=dict({"zone": "a", "rack": "r1"} if labels is None else labels),
        xfail=xfail,
    )


# ---------------------------------------------------------------------------------------
# Quantities (an independent parser, for comparing consumedCapacity)
# ---------------------------------------------------------------------------------------

_SUFFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QTY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def qty(text: Any) -> Decimal:
    """The numeric value of a Kubernetes quantity string (or of a number)."""
    if isinstance(text, int | float | Decimal):
        return Decimal(text)
    s = str(text).strip()
    m = _QTY.match(s)
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    number = Decimal(m.group(1))
    if m.group(2):
        number *= Decimal(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]


# ---------------------------------------------------------------------------------------
# Running a case against draco.allocator
# ---------------------------------------------------------------------------------------


def _falsy(value: Any) -> bool:
    return value is None or value is False or value == [] or value == {}


def _as_dict(model: Any) -> Json:
    if isinstance(model, dict):
        return model
    to_dict = getattr(model, "to_dict", None)
    if to_dict is not None:
        return dict(to_dict())
    return dict(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


def _check_result(actual: Json, expected: Json, where: str) -> None:
    for key in ("request", "driver", "pool", "device"):
        assert actual.get(key) == expected[key], (
            f"{where}: {key} is {actual.get(key)!r}, want {expected[key]!r}"
        )
    for key in ("adminAccess", "tolerations", "bindingConditions", "bindingFailureConditions"):
        want = expected.get(key)
        got = actual.get(key)
        if want is ANY:
            continue
        if _falsy(want):
            assert _falsy(got), f"{where}: {key} is {got!r}, want it unset"
        else:
            assert _normalise(got) == _normalise(want), f"{where}: {key} is {got!r}, want {want!r}"
    want_share = expected.get("shareID")
    got_share = actual.get("shareID")
    if want_share is None:
        assert not got_share, f"{where}: shareID is {got_share!r}, want it unset"
    elif want_share is ANY:
        assert isinstance(got_share, str) and UUID_RE.match(got_share), (
            f"{where}: shareID {got_share!r} is not a UUID"
        )
    else:
        assert got_share == want_share, f"{where}: shareID is {got_share!r}, want {want_share!r}"
    want_cc = expected.get("consumedCapacity")
    got_cc = actual.get("consumedCapacity")
    if want_cc is None:
        assert _falsy(got_cc), f"{where}: consumedCapacity is {got_cc!r}, want it unset"
    elif want_cc is not ANY:
        got_n = {k: qty(v) for k, v in (got_cc or {}).items()}
        want_n = {k: qty(v) for k, v in want_cc.items()}
        assert got_n == want_n, f"{where}: consumedCapacity is {got_cc!r}, want {want_cc!r}"


def _normalise(value: Any) -> Any:
    """Drop empty/None entries so `{"operator": "Equal"}` defaults compare equal."""
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def _tolerations_with_defaults(tols: Any) -> Any:
    if not tols:
        return tols
    out = []
    for t in tols:
        t = dict(t)
        t.setdefault("operator", "Equal")
        out.append(t)
    return out


def check_allocation(result: Any, want: ClaimExpect, *, node: str, where: str) -> None:
    actual = _as_dict(result)
    got_results = list((actual.get("devices") or {}).get("results") or [])
    summary = [(r.get("request"), r.get("driver"), r.get("pool"), r.get("device")) for r in got_results]
    assert len(got_results) == len(want.results), (
        f"{where}: got {len(got_results)} results {summary}, want {len(want.results)}: "
        f"{[(r['request'], r['driver'], r['pool'], r['device']) for r in want.results]}"
    )
    for i, (a, e) in enumerate(zip(got_results, want.results, strict=True)):
        if "tolerations" in a and "tolerations" in e and e["tolerations"] is not ANY:
            a = dict(a)
            a["tolerations"] = _tolerations_with_defaults(a["tolerations"])
            e = dict(e)
            e["tolerations"] = _tolerations_with_defaults(e["tolerations"])
        _check_result(a, e, f"{where} results[{i}] (got {summary})")
    if want.config is not ANY:
        got_config = list((actual.get("devices") or {}).get("config") or [])
        norm_got = [
            {
                "source": c.get("source"),
                "requests": c.get("requests") or None,
                "opaque": _normalise(c.get("opaque")),
            }
            for c in got_config
        ]
        assert isinstance(want.config, list)
        norm_want = [
            {"source": c["source"], "requests": c["requests"] or None, "opaque": _normalise(c["opaque"])}
            for c in want.config
        ]
        assert norm_got == norm_want, f"{where}: config is {norm_got}, want {norm_want}"
    if want.node_selector is not ANY:
        expected_selector = local_selector(node) if want.node_selector is LOCAL else want.node_selector
        got_selector = actual.get("nodeSelector")
        if expected_selector is None:
            assert _falsy(got_selector), f"{where}: nodeSelector is {got_selector!r}, want nil"
        else:
            assert _normalise_selector(got_selector) == _normalise_selector(expected_selector), (
                f"{where}: nodeSelector is {got_selector!r}, want {expected_selector!r}"
            )


def _normalise_selector(selector: Any) -> Any:
    if not selector:
        return None
    terms = []
    for t in selector.get("nodeSelectorTerms") or []:
        exprs = sorted(
            (e["key"], e["operator"], tuple(e.get("values") or ())) for e in t.get("matchExpressions") or []
        )
        fields = sorted(
            (e["key"], e["operator"], tuple(e.get("values") or ())) for e in t.get("matchFields") or []
        )
        terms.append((tuple(exprs), tuple(fields)))
    return terms


def build_inventory(c: Case) -> Any:
    from draco.allocator import Inventory
    from draco.api import DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice

    return Inventory.build(
        classes=[DeviceClass.from_dict(x) for x in c.classes],
        slices=[ResourceSlice.from_dict(x) for x in c.slices],
        taint_rules=[DeviceTaintRule.from_dict(x) for x in c.taint_rules],
        allocated_claims=[ResourceClaim.from_dict(x) for x in c.allocated],
    )


def claim_key(c: Json) -> str:
    return f"{c['metadata'].get('namespace', NS)}/{c['metadata']['name']}"


def run_case(c: Case) -> None:
    """Allocate the case's claims on its node and compare with the expected outcome."""
    from draco.allocator import Allocated, Node, allocate
    from draco.allocator import Unfit as UnfitOutcome
    from draco.api import ResourceClaim
    from draco.errors import AllocationInputError

    inventory = build_inventory(c)
    claims = [ResourceClaim.from_dict(x) for x in c.claims]
    node = Node(c.node, dict(c.labels))
    if isinstance(c.expected, Error):
        try:
            out = allocate(inventory=inventory, node=node, claims=claims)
        except AllocationInputError as exc:
            message = str(exc).lower()
            for needle in c.expected.contains:
                assert needle.lower() in message, f"error {exc!s} does not mention {needle!r}"
            return
        raise AssertionError(f"expected an AllocationInputError, got {out!r}")
    out = allocate(inventory=inventory, node=node, claims=claims)
    if isinstance(c.expected, Unfit):
        assert isinstance(out, UnfitOutcome), f"expected Unfit, got {_summary(out)}"
        text = (
            str(getattr(out, "explanation", "")) + " " + " ".join(map(str, getattr(out, "reasons", ())))
        ).lower()
        for needle in c.expected.contains:
            assert needle.lower() in text, f"explanation {text!r} does not mention {needle!r}"
        return
    assert isinstance(out, Allocated), f"expected Allocated, got {out!r}"
    keys = [claim_key(x) for x in c.claims]
    assert set(out.results) == set(keys), f"results for {sorted(out.results)}, want {sorted(keys)}"
    for name, want in c.expected.claims.items():
        key = f"{NS}/{name}" if "/" not in name else name
        check_allocation(out.results[key], want, node=c.node, where=key)


def _summary(out: Any) -> str:
    results = getattr(out, "results", None)
    if not results:
        return repr(out)
    parts = []
    for key, alloc in results.items():
        d = _as_dict(alloc)
        parts.append(
            f"{key}: "
            + ", ".join(
                f"{r.get('request')}={r.get('pool')}/{r.get('device')}"
                for r in (d.get("devices") or {}).get("results") or []
            )
        )
    return "Allocated(" + "; ".join(parts) + ")"


def params(cases: Iterable[Case]) -> list[Any]:
    """pytest parameters for a list of cases, ids from the case ids, xfail where marked."""
    import pytest

    out = []
    seen: set[str] = set()
    for c in cases:
        assert c.id not in seen, f"duplicate case id {c.id}"
        seen.add(c.id)
        marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out
