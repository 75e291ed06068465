"""The areas of `make compat` (which e2e files show each) and its table of results.

    compat_table.py --areas [AREA...]          the test files of those areas (none named: all
                                               but the optional ones, see OPTIONAL)
    compat_table.py --table DIR VERSION...     a Markdown table, version x area, from the
                                               JUnit files hack/compat.sh wrote in DIR

A cell is "pass (n)", "FAIL (k of n)" or "skipped (n)" with the first skip reason; a
version whose build failed or that was not run says so. The last columns are the wall
times of the build (0 when cached) and of the tests.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

#: Area -> the e2e files that show it works (what upstream would call a conformance set).
AREAS: dict[str, tuple[str, ...]] = {
    "claim lifecycle": ("tests/e2e/test_lifecycle.py",),
    "allocation": ("tests/e2e/test_scheduling.py",),
    "groups": ("tests/e2e/test_gangs.py",),
    "eviction": ("tests/e2e/test_eviction.py",),
    "extended resources": ("tests/e2e/test_extended_resources.py",),
    "agent": (
        "tests/e2e/test_agent_slices.py",
        "tests/e2e/test_agent_flow.py",
        "tests/e2e/test_agent_prepare.py",
    ),
    "pod webhook": ("tests/e2e/test_pod_webhook.py",),
    "webhook": ("tests/e2e/test_webhooks.py", "tests/e2e/test_webhook_process.py"),
    "leader election": ("tests/e2e/test_leader.py",),
    "CRDs and versions": ("tests/e2e/test_crds.py", "tests/e2e/test_versions.py", "tests/e2e/test_kube.py"),
    "chart": ("tests/e2e/test_chart.py",),
    "real node": (
        "tests/e2e/test_node_devices.py",
        "tests/e2e/test_node_extended_resources.py",
        "tests/e2e/test_node_nvidia.py",
    ),
}
#: Areas run only when named: the real node needs kubelet and kube-scheduler of each
#: version (another cold build of ~20 min each) and root (containerd, mounts, CNI).
OPTIONAL = frozenset({"real node"})
#: Short names for DRACO_COMPAT_AREAS.
SHORT = {name.split()[0].lower(): name for name in AREAS} | {"pod": "pod webhook", "node": "real node"}


def _area_of(classname: str) -> str | None:
    path = classname.replace(".", "/") + ".py"
    for area, files in AREAS.items():
        if any(path.endswith(f) or path.startswith(f[:-3]) for f in files):
            return area
    return None


def _cell(results: Counter[str], skip_reason: str) -> str:
    total = sum(results.values())
    if not total:
        return "-"
    if results["failed"]:
        return f"FAIL ({results['failed']} of {total})"
    if results["passed"]:
        skipped = f", {results['skipped']} skipped" if results["skipped"] else ""
        return f"pass ({results['passed']}{skipped})"
    return f"skipped ({results['skipped']}: {skip_reason})"


def table(folder: Path, versions: list[str]) -> str:
    lines = [
        "| version | " + " | ".join(AREAS) + " | build s | tests s |",
        "|---" * (len(AREAS) + 3) + "|",
    ]
    for version in versions:
        status = (
            (folder / f"{version}.status").read_text().strip()
            if (folder / f"{version}.status").exists()
            else ""
        )
        if status in ("", "build-failed"):
            text = "not run" if not status else "build failed"
            lines.append(f"| {version} | " + " | ".join(text for _ in AREAS) + " | | |")
            continue
        by_area: dict[str, Counter[str]] = {a: Counter() for a in AREAS}
        reasons: dict[str, str] = {}
        tree = ET.parse(folder / f"{version}.xml")
        for case in tree.iter("testcase"):
            area = _area_of(case.get("classname", ""))
            if area is None:
                continue
            if case.find("failure") is not None or case.find("error") is not None:
                by_area[area]["failed"] += 1
            elif (skip := case.find("skipped")) is not None:
                by_area[area]["skipped"] += 1
                reasons.setdefault(area, (skip.get("message") or "").removeprefix("Skipped: ")[:80])
            else:
                by_area[area]["passed"] += 1
        seconds = (
            (folder / f"{version}.seconds").read_text().split()
            if (folder / f"{version}.seconds").exists()
            else ["", ""]
        )
        cells = [_cell(by_area[a], reasons.get(a, "")) for a in AREAS]
        lines.append(f"| {version} | " + " | ".join(cells) + f" | {seconds[0]} | {seconds[1]} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--areas", nargs="*", metavar="AREA")
    parser.add_argument("--table", nargs="+", metavar=("DIR", "VERSION"))
    args = parser.parse_args(argv)
    if args.areas is not None:
        unknown = [a for a in args.areas if a not in SHORT]
        if unknown:
            print(f"unknown areas {unknown}; known: {sorted(SHORT)}", file=sys.stderr)
            return 2
        chosen = [SHORT[a] for a in args.areas] or [a for a in AREAS if a not in OPTIONAL]
        print(" ".join(f for area in chosen for f in AREAS[area]))
        return 0
    if args.table:
        folder, *versions = args.table
        print(table(Path(folder), versions))
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
