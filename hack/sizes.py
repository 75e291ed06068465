"""Size limits of the package's code: no module over MODULE_LINES lines and no function
over FUNCTION_LINES lines (from its ``def`` to its last line, its docstring not counted),
unless a comment says why.

A module gives its reason with a line ``# size: <why>`` anywhere in it; a function with
``# size: <why>`` on the line of its ``def`` or the line just above it. ``make lint``
runs this; it prints every module and function over the limits without a reason and
fails if there is one.

    python hack/sizes.py [ROOT ...]      (default: operator/draco)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE_LINES = 600
FUNCTION_LINES = 60
MARK = "# size:"


def _reasoned(lines: list[str], lineno: int) -> bool:
    """Whether the def at 1-based ``lineno`` (or the line above it) carries a reason."""
    return any(MARK in lines[i] for i in (lineno - 1, lineno - 2) if 0 <= i < len(lines))


def problems(path: Path) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    found: list[str] = []
    if len(lines) > MODULE_LINES and not any(line.lstrip().startswith(MARK) for line in lines):
        found.append(f"{path}: {len(lines)} lines (limit {MODULE_LINES})")
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


def main(roots: list[str]) -> int:
    found = [
        p
        for root in roots or ["operator/draco"]
        for f in sorted(Path(root).rglob("*.py"))
        for p in problems(f)
    ]
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
