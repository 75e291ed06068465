"""The GPU shapes the NVIDIA driver's tests replay, and what a node with them looks like.

- `H100`: NVML's answers recorded on a real NVIDIA H100 80GB HBM3 (MIG mode off,
  identifiers anonymised), plus `h100-80gb-hbm3.added.json`: the answers the recording
  lacks (MIG placements, brand), written from NVIDIA's documentation and marked as such.
- `A100_MIG`: an A100-SXM4-40GB in MIG mode with four MIG devices, written by hand from
  NVIDIA's documentation (not a recording), with its `/proc/driver/nvidia-caps/mig-minors`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from draco.agent.drivers.nvidia import NVIDIA_DRIVER_NAME, NvidiaDriver
from draco.agent.drivers.nvml_replay import ReplayNvml
from draco.agent.publisher import desired_slices

NVML = Path(__file__).parent / "data" / "nvml"
H100 = (NVML / "h100-80gb-hbm3.json", NVML / "h100-80gb-hbm3.added.json")
A100_MIG = (NVML / "a100-sxm4-40gb-mig.json",)
SHAPES = {"h100": H100, "a100-mig": A100_MIG}
NODE = "gpu-node"


def replay(shape: Sequence[Path]) -> ReplayNvml:
    return ReplayNvml.from_files(shape)


def host_root(tmp_path: Path, shape: Sequence[Path], *, pcie_root: str | None = None) -> Path:
    """A host tree with the files of `shape` (`mig-minors`) and, with `pcie_root`, the
    sysfs link of each recorded GPU's PCI device under that root complex."""
    root = tmp_path / "host"
    root.mkdir(parents=True, exist_ok=True)
    for path in shape:
        data = json.loads(path.read_text())
        for name, text in (data.get("files") or {}).items():
            target = root / name.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if pcie_root is None:
            continue
        for key, entry in (data.get("calls") or {}).items():
            if key.endswith("] nvmlDeviceGetPciInfo") and entry.get("ok"):
                raw = str(entry["value"]["busId"])
                bdf = raw[-12:].lower()  # 00000000:00:06.0 -> 0000:00:06.0
                device = root / "sys" / "devices" / pcie_root / bdf
                device.mkdir(parents=True, exist_ok=True)
                link = root / "sys" / "bus" / "pci" / "devices" / bdf
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(device, link.parent))
    return root


def driver(
    shape: Sequence[Path],
    *,
    tmp_path: Path | None = None,
    name: str = NVIDIA_DRIVER_NAME,
    binding_conditions: bool = False,
) -> NvidiaDriver:
    root = host_root(tmp_path, shape) if tmp_path is not None else Path("/nonexistent-host")
    return NvidiaDriver(replay(shape), name=name, binding_conditions=binding_conditions, host_root=root)


def published_slices(drv: NvidiaDriver, *, node: str = NODE) -> list[dict[str, Any]]:
    """The ResourceSlices the agent would publish for `drv` on `node`."""
    specs = desired_slices(
        driver=drv.name, node=node, inventory=drv.inventory(node), now=datetime(2026, 11, 26, tzinfo=UTC)
    )
    out = []
    for name, spec in specs:
        spec["pool"] = {**spec["pool"], "generation": 1, "resourceSliceCount": len(specs)}
        out.append(
            {
                "apiVersion": "resource.draco.dev/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    return out
