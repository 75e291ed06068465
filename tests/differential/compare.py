"""Judging draco against upstream on one problem: the category of the outcome.

Both answer the problem. Then:

- the selectors of the problem are judged by both CEL environments on every device (true,
  false, runtime error or compile error must agree);
- equal outcome kinds agree; when both allocate, draco's results must equal upstream's
  first fit (share ids aside), else draco's choice must at least be one upstream accepts:
  the problem is re-run upstream with every request pinned to the devices draco chose
  (and the other subrequests of a ``firstAvailable`` disabled), which must allocate them
  with the same results;
- different outcomes are accepted only where a departure named in
  ``draco.allocator``'s docstring explains them, and only when its precondition holds in
  the problem (see :data:`DEPARTURES`);
- where allocated devices over-commit a pool's counters (the departure "over-committed
  counters"), draco is held by the rules above to what upstream answers with those
  counters relieved (raised to what the allocated devices use), not to upstream's answer
  on the problem itself.

Anything else is a *mismatch*, which fails the test.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .upstream import Json, Outcome, Upstream, solve_draco

#: Departures (by their name in the allocator's docstring) a category may cite, in
#: brackets at its end.
DEPARTURES = (
    "eager selector evaluation",
    "invalid pool is unfit",
    "over-committed counters",
    "search budget",
)

PIN_DOMAIN = "check.example.com"


@dataclass
class Verdict:
    category: str
    mismatch: bool = False
    detail: str = ""


# --- CEL ---------------------------------------------------------------------------------


def _expressions(problem: Json) -> list[str]:
    found: list[str] = []
    for device_class in problem["classes"]:
        for selector in (device_class.get("spec") or {}).get("selectors") or []:
            found.append(selector["cel"]["expression"])
    for claim in problem["claims"]:
        for request in claim["spec"]["devices"]["requests"]:
            for part in [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]:
                for selector in part.get("selectors") or []:
                    found.append(selector["cel"]["expression"])
    return list(dict.fromkeys(found))


def cel_mismatches(problem: Json, upstream: Upstream) -> list[str]:
    """Where draco's CEL and upstream's judge a selector on a device differently."""
    from draco.allocator import Inventory, SelectorCache
    from draco.errors import CELError

    expressions = _expressions(problem)
    slices = copy.deepcopy(problem["slices"])
    devices = [(s["spec"]["driver"], d) for s in slices for d in s["spec"].get("devices") or []]
    if not expressions or not devices:
        return []
    answer = upstream.judge(
        {
            "id": problem["id"],
            "op": "cel",
            "features": problem.get("features") or {},
            "expressions": expressions,
            "devices": [{"driver": driver, "device": device} for driver, device in devices],
        }
    )
    cache = SelectorCache()
    inventory = Inventory.build(classes=[], slices=slices, cache=cache)
    records = {id(record.raw): record for record in inventory.devices}
    problems: list[str] = []
    for row, expression in zip(answer, expressions, strict=True):
        for verdict, (_, device) in zip(row, devices, strict=True):
            record = records.get(id(device))
            if record is None:
                continue  # not indexed (slice without node selection)
            try:
                result: Any = cache.evaluate(expression, record)
            except CELError as exc:
                result = ("compile", exc)
            if isinstance(result, tuple):
                mine = "compile error"
            elif isinstance(result, CELError):
                mine = "runtime error"
            else:
                mine = str(bool(result))
            if verdict.get("compileError"):
                theirs = "compile error"
            elif verdict.get("error"):
                theirs = "runtime error"
            else:
                theirs = str(bool(verdict.get("match")))
            if mine != theirs:
                problems.append(
                    f"{expression!r} on {record.describe()}: draco {mine}, upstream {theirs} "
                    f"({verdict.get('error') or verdict.get('compileError') or ''})"
                )
    return problems


# --- departure preconditions -------------------------------------------------------------


def _quantity(text: str) -> Any:
    from draco.api.quantity import Quantity

    return Quantity(str(text))


def overcommitted_counters(problem: Json) -> bool:
    """Some pool's allocated devices consume more of a counter than the pool has."""
    return bool(_overcommitted(problem))


def _overcommitted(problem: Json) -> dict[tuple[str, str, str, str], int]:
    """Counters (driver, pool, set, name) that allocated devices over-commit, with usage.

    A pool may publish one name on several nodes: every device under an allocated name
    charges its counters, as upstream's device IDs are names. Only a pool's newest
    generation counts."""
    newest: dict[tuple[str, str], int] = {}
    for s in problem["slices"]:
        spec = s["spec"]
        key = (spec["driver"], spec["pool"]["name"])
        newest[key] = max(newest.get(key, 0), int(spec["pool"].get("generation") or 0))
    totals: dict[tuple[str, str, str, str], int] = {}
    consumes: dict[tuple[str, str, str], list[Json]] = {}
    for s in problem["slices"]:
        spec = s["spec"]
        key = (spec["driver"], spec["pool"]["name"])
        if int(spec["pool"].get("generation") or 0) != newest[key]:
            continue
        for counter_set in spec.get("sharedCounters") or []:
            for name, counter in (counter_set.get("counters") or {}).items():
                totals[(*key, counter_set["name"], name)] = _quantity(counter["value"]).nanos
        for device in spec.get("devices") or []:
            consumes.setdefault((*key, device["name"]), []).extend(device.get("consumesCounters") or [])
    used: dict[tuple[str, str, str, str], int] = {}
    allocated: set[tuple[str, str, str]] = set()
    for claim in problem.get("allocated") or []:
        for result in claim["status"]["allocation"]["devices"]["results"]:
            if not result.get("adminAccess"):
                allocated.add((result["driver"], result["pool"], result["device"]))
    for driver, pool, device in allocated:
        for consumption in consumes.get((driver, pool, device), []):
            for name, counter in (consumption.get("counters") or {}).items():
                key = (driver, pool, consumption["counterSet"], name)
                used[key] = used.get(key, 0) + _quantity(counter["value"]).nanos
    return {key: amount for key, amount in used.items() if amount > totals.get(key, 0)}


def relieved(problem: Json) -> Json:
    """``problem`` with each over-committed counter raised to what allocated devices use:
    nothing is left of it, but it no longer blocks the pool's other counters upstream."""
    out = copy.deepcopy(problem)
    over = _overcommitted(problem)
    for s in out["slices"]:
        spec = s["spec"]
        for counter_set in spec.get("sharedCounters") or []:
            for name, counter in (counter_set.get("counters") or {}).items():
                used = over.get((spec["driver"], spec["pool"]["name"], counter_set["name"], name))
                if used is not None:
                    counter["value"] = f"{used}n"
    return out


_CEL_ERROR = re.compile(r"selector #\d+ on device (?P<device>\S+): CEL runtime error")


# --- results -----------------------------------------------------------------------------


def _normalise(allocation: Json) -> Json:
    """An AllocationResult without what may differ: share ids (random upstream) and
    empty fields."""
    out = copy.deepcopy(allocation)
    for result in (out.get("devices") or {}).get("results") or []:
        if result.get("shareID"):
            result["shareID"] = "<share>"
        for key in [k for k, v in result.items() if v in (None, [], {}, False)]:
            del result[key]
    devices = out.get("devices") or {}
    if not devices.get("config"):
        devices.pop("config", None)
    if not out.get("nodeSelector"):
        out.pop("nodeSelector", None)
    out.pop("allocationTimestamp", None)
    return out


def _devices(outcome: Outcome) -> list[list[tuple[str, str, str, str]]]:
    return [
        [
            (r["request"], r["driver"], r["pool"], r["device"])
            for r in (a.get("devices") or {}).get("results") or []
        ]
        for a in outcome.results
    ]


def pinned(problem: Json, draco: Outcome) -> Json:
    """``problem`` with each request restricted to the devices draco chose for it."""
    out = copy.deepcopy(problem)
    out["id"] = f"{problem['id']}-pinned"
    for s in out["slices"]:
        spec = s["spec"]
        for device in spec.get("devices") or []:
            attributes = device.setdefault("attributes", {})
            attributes[f"{PIN_DOMAIN}/id"] = {
                "string": f"{spec['driver']}/{spec['pool']['name']}/{device['name']}"
            }
    for claim, allocation in zip(out["claims"], draco.results, strict=True):
        chosen: dict[str, list[str]] = {}
        for result in allocation["devices"]["results"]:
            chosen.setdefault(result["request"], []).append(
                f"{result['driver']}/{result['pool']}/{result['device']}"
            )
        for request in claim["spec"]["devices"]["requests"]:
            if request.get("exactly") is not None:
                _pin(request["exactly"], chosen.get(request["name"], []))
                continue
            for sub in request["firstAvailable"]:
                name = f"{request['name']}/{sub['name']}"
                if name in chosen:
                    _pin(sub, chosen[name])
                else:
                    sub["selectors"] = [{"cel": {"expression": "false"}}]
    return out


def _pin(request: Json, ids: list[str]) -> None:
    if request.get("allocationMode") == "All":
        return  # "all" is decided by the selectors; pinning would change what it means
    listed = ", ".join(f'"{i}"' for i in ids)
    expression = f'device.attributes["{PIN_DOMAIN}"].?id.orValue("") in [{listed}]'
    request["selectors"] = [*(request.get("selectors") or []), {"cel": {"expression": expression}}]


# --- judging -----------------------------------------------------------------------------


def judge(problem: Json, upstream: Upstream) -> Verdict:
    """Run ``problem`` through both allocators and say which category it falls into."""
    cel = cel_mismatches(problem, upstream)
    if cel:
        return Verdict("MISMATCH cel", mismatch=True, detail="; ".join(cel[:5]))
    theirs = upstream.solve(problem)
    mine = solve_draco(problem)
    if not overcommitted_counters(problem):
        return _judge_outcomes(problem, upstream, theirs, mine)
    # Over-committed counters block the pool's other counter-consuming devices upstream
    # only (a departure). With those counters relieved (used up, no longer over-committed)
    # upstream answers what draco must answer, in everything: outcome, first fit, results,
    # the input error an "All" request meets.
    reference = relieved(problem)
    theirs_relieved = upstream.solve(reference)
    verdict = _judge_outcomes(reference, upstream, theirs_relieved, mine)
    if verdict.mismatch:
        return Verdict(f"{verdict.category} (counters relieved)", mismatch=True, detail=verdict.detail)
    if (theirs.kind, _devices(theirs)) == (theirs_relieved.kind, _devices(theirs_relieved)):
        return verdict  # relieving changed nothing upstream: the departure played no part
    if theirs.kind == mine.kind == "allocated":
        return Verdict("allocated, other first fit [over-committed counters]")
    return Verdict(
        f"draco {mine.kind}, upstream {theirs.kind} [over-committed counters]",
        detail=f"upstream {theirs.kind}: {theirs.message[:300]} / draco {mine.kind}: {mine.message[:300]}",
    )


def _judge_outcomes(problem: Json, upstream: Upstream, theirs: Outcome, mine: Outcome) -> Verdict:
    if "timeout" in (theirs.kind, mine.kind):
        return Verdict(
            f"timeout (upstream {theirs.kind}, draco {mine.kind}) [search budget]",
            detail=f"{theirs.message} / {mine.message}",
        )
    if theirs.kind == "node-error" and mine.kind == "unfit" and "is invalid" in mine.message:
        return Verdict("unfit, upstream node error [invalid pool is unfit]")
    if theirs.kind == mine.kind == "allocated":
        return _both_allocated(problem, upstream, theirs, mine)
    if theirs.kind == mine.kind:
        return Verdict(mine.kind)
    detail = f"upstream {theirs.kind}: {theirs.message[:300]} / draco {mine.kind}: {mine.message[:300]}"
    if mine.kind == "error":
        match = _CEL_ERROR.search(mine.message)
        if match and _upstream_cel_errors_on(problem, upstream, match.group("device")):
            return Verdict(f"draco error, upstream {theirs.kind} [eager selector evaluation]", detail=detail)
    return Verdict(f"MISMATCH draco {mine.kind}, upstream {theirs.kind}", mismatch=True, detail=detail)


def _upstream_cel_errors_on(problem: Json, upstream: Upstream, device_id: str) -> bool:
    """Whether upstream's CEL also fails on ``device_id`` with one of the problem's selectors."""
    driver, pool, name = device_id.split("/", 2)
    devices = [
        d
        for s in problem["slices"]
        if s["spec"]["driver"] == driver and s["spec"]["pool"]["name"] == pool
        for d in s["spec"].get("devices") or []
        if d["name"] == name
    ]
    if not devices:
        return False
    answer = upstream.judge(
        {
            "id": problem["id"],
            "op": "cel",
            "features": problem.get("features") or {},
            "expressions": _expressions(problem),
            "devices": [{"driver": driver, "device": d} for d in devices],
        }
    )
    return any(verdict.get("error") for row in answer for verdict in row)


def _both_allocated(problem: Json, upstream: Upstream, theirs: Outcome, mine: Outcome) -> Verdict:
    if _devices(theirs) == _devices(mine):
        for index, (a, b) in enumerate(zip(theirs.results, mine.results, strict=True)):
            if _normalise(a) != _normalise(b):
                return Verdict(
                    "MISMATCH same devices, different results",
                    mismatch=True,
                    detail=f"claim #{index}: upstream {_normalise(a)} / draco {_normalise(b)}",
                )
        return Verdict("allocated, same as upstream")
    check = upstream.solve(pinned(problem, mine))
    if check.kind != "allocated":
        return Verdict(
            "MISMATCH draco's allocation rejected by upstream",
            mismatch=True,
            detail=f"upstream {_devices(theirs)}, draco {_devices(mine)}; pinned: {check.kind} {check.message[:300]}",
        )
    for index, (a, b) in enumerate(zip(check.results, mine.results, strict=True)):
        a = copy.deepcopy(a)
        for result in a["devices"]["results"]:
            result.pop("pinned", None)
        if _normalise(a) != _normalise(b):
            return Verdict(
                "MISMATCH accepted devices, different results",
                mismatch=True,
                detail=f"claim #{index}: upstream {_normalise(a)} / draco {_normalise(b)}",
            )
    return Verdict(
        "MISMATCH valid allocation, but not upstream's first fit",
        mismatch=True,
        detail=f"upstream {_devices(theirs)}, draco {_devices(mine)}",
    )


def summarize(counts: Counter[str]) -> str:
    width = max((len(c) for c in counts), default=0)
    return "\n".join(
        f"  {category:<{width}}  {n:>6}" for category, n in sorted(counts.items(), key=lambda kv: -kv[1])
    )
