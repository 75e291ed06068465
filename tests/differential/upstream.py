"""Running the same allocation problem through upstream's allocator and through draco's.

A *problem* is one node, DeviceClasses, ResourceSlices, already-allocated claims and the
claims to allocate, all in the stored (defaulted) JSON of ``resource.k8s.io/v1``. Upstream
is k8s.io/dynamic-resource-allocation's structured allocator, run by the Go program in
hack/upstream-allocator (built and cached by hack/upstream-allocator.sh); draco is
:func:`draco.allocator.allocate`. Both answer with an :class:`Outcome`.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "hack" / "upstream-allocator.sh"

Json = dict[str, Any]

#: The outcome kinds. ``node-error`` is upstream's error that fails only this node
#: (ErrFailedAllocationOnNode); draco has no such kind.
OUTCOMES = ("allocated", "unfit", "node-error", "error", "timeout")


@dataclass
class Outcome:
    kind: str
    #: One AllocationResult per claim, in claim order, when allocated.
    results: list[Json] = field(default_factory=list)
    message: str = ""


def go_available() -> bool:
    return shutil.which("go") is not None


def build_upstream() -> Path:
    """The path of the upstream-allocator binary, built on first use (minutes) and cached."""
    done = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"hack/upstream-allocator.sh failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


class Upstream:
    """One long-running upstream-allocator process, answering problems one at a time."""

    def __init__(self, binary: Path) -> None:
        self._process = subprocess.Popen(
            [str(binary)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def solve(self, problem: Mapping[str, Any]) -> Outcome:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(problem, separators=(",", ":")) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"upstream-allocator exited with {self._process.wait()}")
        answer = json.loads(line)
        kind = answer["outcome"]
        message = answer.get("error", "")
        if kind == "error" and "context deadline exceeded" in message:
            kind = "timeout"
        return Outcome(kind=kind, results=answer.get("results") or [], message=message)

    def judge(self, request: Mapping[str, Any]) -> list[list[Json]]:
        """Upstream CEL's verdicts (``op: cel``): per expression, per device."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request, separators=(",", ":")) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"upstream-allocator exited with {self._process.wait()}")
        answer = json.loads(line)
        if answer.get("error"):
            raise RuntimeError(f"upstream-allocator: {answer['error']}")
        return list(answer.get("cel") or [])

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def solve_draco(problem: Mapping[str, Any], *, max_steps: int | None = None) -> Outcome:
    """draco's answer to ``problem`` (a fresh inventory and selector cache each time)."""
    from draco.allocator import Allocated, Inventory, Node, SearchBudget, SelectorCache, allocate
    from draco.errors import AllocationInputError, AllocationTimeoutError

    inventory = Inventory.build(
        classes=copy.deepcopy(problem["classes"]),
        slices=copy.deepcopy(problem["slices"]),
        allocated_claims=copy.deepcopy(problem.get("allocated") or []),
        cache=SelectorCache(),
    )
    node = problem["node"]
    budget = SearchBudget(max_steps=max_steps) if max_steps is not None else None
    try:
        out = allocate(
            inventory=inventory,
            node=Node(node["name"], dict(node.get("labels") or {})),
            claims=copy.deepcopy(problem["claims"]),
            budget=budget,
        )
    except AllocationInputError as exc:
        return Outcome(kind="error", message=str(exc))
    except AllocationTimeoutError as exc:
        return Outcome(kind="timeout", message=str(exc))
    if not isinstance(out, Allocated):
        return Outcome(kind="unfit", message=out.explanation)
    results = []
    for claim in problem["claims"]:
        meta = claim["metadata"]
        key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        model = out.results[key]
        results.append(model.to_dict() if hasattr(model, "to_dict") else dict(model))
    return Outcome(kind="allocated", results=results)


# --- stored objects: what the API server's defaulting adds -------------------------------


def _default_tolerations(tolerations: list[Json] | None) -> None:
    for toleration in tolerations or []:
        toleration.setdefault("operator", "Equal")


def _default_exact(request: Json) -> None:
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount":
        request.setdefault("count", 1)
    _default_tolerations(request.get("tolerations"))


def stored_claim(claim: Mapping[str, Any]) -> Json:
    """``claim`` as the API server stores it (request defaults filled in)."""
    out = copy.deepcopy(dict(claim))
    meta = out.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"uid-{meta.get('namespace')}-{meta.get('name')}")
    for request in ((out.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if request.get("exactly") is not None:
            _default_exact(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            _default_exact(sub)
    return out
