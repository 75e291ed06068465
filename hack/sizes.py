"""Size limits of the package's code: no module of ``operator/draco`` over MODULE_LINES
lines unless :data:`MODULE_EXCEPTIONS` lists it with the reason, and no function of the
operator and the API client (:data:`FUNCTION_ROOTS`) over FUNCTION_LINES lines (from its
``def`` to its last line, its docstring not counted) unless a comment says why.

A function gives its reason with ``# size: <why>`` on the line of its ``def`` or the line
just above it; a module over the limit, in :data:`MODULE_EXCEPTIONS` (an entry for a
module back within the limit is reported too, so the list stays true). ``make lint`` runs
this; it prints every problem and fails if there is one.

    python hack/sizes.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path("operator/draco")
FUNCTION_ROOTS = (PACKAGE / "operator", PACKAGE / "kube")
MODULE_LINES = 600
FUNCTION_LINES = 60
MARK = "# size:"

#: The modules over MODULE_LINES, each with why it stays one module.
MODULE_EXCEPTIONS: dict[str, str] = {
    "cel/compiler.py": "one translation of CEL's grammar into closures: a node kind per method, read together",
    "cel/functions.py": "the DRA CEL environment's function library, one table of every function it declares",
    "agent/drivers/nvidia.py": "everything NVML answers about a GPU and its MIG partitions, behind one driver",
    "api/crds.py": "the CRDs made from the models: every CRD's spec and the schema additions upstream makes explicit, one table per kind",
    "allocator/inventory.py": "the allocator's device index: built, marked and released in one place",
    "allocator/plans.py": "one node's search plan per request, candidates and constraints together",
    "scheduling/view.py": "the allocation's one view of the cluster: every change frozen and applied the same way",
    "scheduling/eviction.py": "the device-taint-eviction controller's pure state, one upstream controller's rules",
    "tools/dev/controlplane.py": "a dev tool: etcd and kube-apiserver started and stopped as envtest does",
    "tools/dev/node.py": "a dev tool: containerd, kubelet and kube-scheduler of a real test node",
}


def _reasoned(lines: list[str], lineno: int) -> bool:
    """Whether the def at 1-based ``lineno`` (or the line above it) carries a reason."""
    return any(MARK in lines[i] for i in (lineno - 1, lineno - 2) if 0 <= i < len(lines))


def module_problems(path: Path) -> list[str]:
    length = len(path.read_text().splitlines())
    listed = path.relative_to(PACKAGE).as_posix() in MODULE_EXCEPTIONS
    if length > MODULE_LINES and not listed:
        return [f"{path}: {length} lines (limit {MODULE_LINES}; or list it in MODULE_EXCEPTIONS with why)"]
    if length <= MODULE_LINES and listed:
        return [f"{path}: {length} lines, within the limit: take it off MODULE_EXCEPTIONS"]
    return []


def function_problems(path: Path) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    found: list[str] = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        length = (node.end_lineno or node.lineno) - first + 1
        body = node.body[0] if node.body else None
        if (
            isinstance(body, ast.Expr)
            and isinstance(body.value, ast.Constant)
            and isinstance(body.value.value, str)
        ):
            length -= (body.end_lineno or body.lineno) - body.lineno + 1
        if length > FUNCTION_LINES and not _reasoned(lines, node.lineno) and not _reasoned(lines, first):
            found.append(f"{path}:{node.lineno}: {node.name} is {length} lines (limit {FUNCTION_LINES})")
    return found


def main() -> int:
    found = [p for f in sorted(PACKAGE.rglob("*.py")) for p in module_problems(f)]
    missing = [name for name in MODULE_EXCEPTIONS if not (PACKAGE / name).exists()]
    found += [f"{PACKAGE / name}: in MODULE_EXCEPTIONS but gone" for name in missing]
    found += [p for root in FUNCTION_ROOTS for f in sorted(root.rglob("*.py")) for p in function_problems(f)]
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
