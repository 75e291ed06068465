"""Run a Python module under tracemalloc and write where its live memory was allocated
when it gets SIGUSR2.

Why: the operator's peak resident memory at scale (`versus_upstream.py --trace-memory`)
is only a number; this says which lines of code hold it (decoded watch bodies, caches,
indexes), so a cut can go after the largest holder. tracemalloc roughly doubles the
memory and slows allocation, so figures of a traced run are for where, not how much.

Run: ``python benchmarks/tracemem.py OUT FRAMES MODULE ARGS...``, then ``kill -USR2 PID``:
OUT gets the traced total, the 40 largest allocation sites by line and by file and, with
FRAMES > 1, the 15 largest tracebacks.
"""

from __future__ import annotations

import sys

# benchmarks/ holds operator.py, named like the standard library's `operator`; run as a
# script, this folder comes first on sys.path and would shadow it.
if sys.path and sys.path[0].rstrip("/").endswith("benchmarks"):
    del sys.path[0]

import gc
import runpy
import signal
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType


def dump(out: Path, frames: int) -> None:
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        ]
    )
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced now {current / 2**20:.1f} MiB, traced peak {peak / 2**20:.1f} MiB", "", "by line:"]
    for stat in snapshot.statistics("lineno")[:40]:
        frame = stat.traceback[0]
        lines.append(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d}  {frame.filename}:{frame.lineno}")
    lines += ["", "by file:"]
    for stat in snapshot.statistics("filename")[:40]:
        lines.append(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d}  {stat.traceback[0].filename}")
    if frames > 1:
        lines += ["", "by traceback:"]
        for stat in snapshot.statistics("traceback")[:15]:
            lines.append(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d}")
            lines += [f"    {frame.filename}:{frame.lineno}" for frame in stat.traceback]
    types = Counter(type(o).__name__ for o in gc.get_objects())
    lines += ["", "gc-tracked objects by type:"] + [f"{n:10d}  {t}" for t, n in types.most_common(15)]
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    out, frames, module, *rest = sys.argv[1:]
    sys.argv = [module, *rest]
    tracemalloc.start(int(frames))

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        dump(Path(out), int(frames))

    signal.signal(signal.SIGUSR2, on_signal)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
