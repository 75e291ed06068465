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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from draco.agent.drivers.nvidia import NVIDIA_DRIVER_NAME, NvidiaDriver, NvidiaOptions
from draco.agent.drivers.nvidia_sharing import Tools
from draco.agent.drivers.nvml_replay import ReplayNvml
from draco.agent.publisher import desired_slices
from draco.errors import AgentError

NVML = Path(__file__).parent / "data" / "nvml"
H100 = (NVML / "h100-80gb-hbm3.json", NVML / "h100-80gb-hbm3.added.json")
A100_MIG = (NVML / "a100-sxm4-40gb-mig.json",)
SHAPES = {"h100": H100, "a100-mig": A100_MIG}
NODE = "gpu-node"


@dataclass
class HostTools(Tools):
    """The host programs of a machine under test: the ones in `programs` are "on the PATH"
    (`nvidia-smi`, `nvidia-cuda-mps-control`); running one records the command and fails
    with its message when `refuse` names it. Unit tests never run the host's own."""

    programs: Sequence[str] = ()
    refuse: Mapping[str, str] = field(default_factory=dict)
    ran: list[tuple[list[str], dict[str, str], str | None]] = field(default_factory=list)

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name in self.programs else None

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdin: str | None = None
    ) -> str:
        self.ran.append((list(argv), dict(env or {}), stdin))
        program = Path(argv[0]).name
        if program in self.refuse:
            raise AgentError(f"{' '.join(argv)} exited 1: {self.refuse[program]}")
        return ""


def replay(shape: Sequence[Path]) -> ReplayNvml:
    return ReplayNvml.from_files(shape)


def host_root(
    tmp_path: Path, shape: Sequence[Path], *, pcie_root: str | None = None, numa_node: int | None = None
) -> Path:
    """A host tree with the files of `shape` (`mig-minors`) and, with `pcie_root`, the
    sysfs link of each recorded GPU's PCI device under that root complex, its `numa_node`
    file saying `numa_node` when given."""
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
                if numa_node is not None:
                    (device / "numa_node").write_text(f"{numa_node}\n")
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
    options: NvidiaOptions | None = None,
) -> NvidiaDriver:
    root = host_root(tmp_path, shape) if tmp_path is not None else Path("/nonexistent-host")
    return NvidiaDriver(
        replay(shape),
        name=name,
        binding_conditions=binding_conditions,
        host_root=root,
        options=options or NvidiaOptions(tools=HostTools()),
    )


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
