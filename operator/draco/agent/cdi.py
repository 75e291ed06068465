"""CDI specs: how the container runtime learns what a prepared device needs.

One spec file per claim and driver, `<cdi-dir>/draco-<driver>-<claimUID>.json`, kind
`<driver>/<class>`, with one CDI device per allocated device (its env vars, device nodes
and mounts) plus one per request that bind-mounts the KEP-5304 metadata file. The runtime
gets the qualified names `<driver>/<class>=<device>`; the agent also records them in the
claim's `status.devices[].data.cdiDeviceIDs`, where a user can see them.

CDI 0.6.0 is the oldest version with every field used here and is read by every runtime
that supports CDI at all (containerd ≥ 1.7, CRI-O ≥ 1.23).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from draco.agent.checkpoint import write_atomically
from draco.agent.drivers.base import ContainerEdits
from draco.runtime.files import PUBLIC_MODE

__all__ = ["CDI_VERSION", "CdiDevice", "build_spec", "cdi_device_name", "cdi_kind", "spec_path", "write_spec"]

CDI_VERSION: Final = "0.6.0"

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")
_CLASS_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class CdiDevice:
    name: str
    edits: ContainerEdits


def cdi_kind(driver: str, cdi_class: str) -> str:
    """`<vendor>/<class>`: the driver name is a DNS subdomain, which CDI accepts as vendor."""
    return f"{driver}/{_CLASS_UNSAFE.sub('-', cdi_class) or 'device'}"


def cdi_device_name(*parts: str) -> str:
    """A CDI device name from claim UID, device and so on (letters, digits, `_.:-`)."""
    return _NAME_UNSAFE.sub("-", "-".join(p for p in parts if p)).strip("-_.:")


def spec_path(cdi_dir: Path, *, driver: str, claim_uid: str) -> Path:
    return cdi_dir / f"draco-{driver}-{claim_uid}.json"


def build_spec(*, kind: str, devices: Sequence[CdiDevice], claim: str) -> dict[str, Any]:
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "annotations": {"draco.dev/claim": claim},
        "devices": [{"name": d.name, "containerEdits": d.edits.to_cdi()} for d in devices],
    }


def write_spec(path: Path, spec: dict[str, Any]) -> None:
    # 0644, as CDI's own writers make specs: the runtime reads them; they carry no secret.
    write_atomically(path, json.dumps(spec, indent=2).encode(), mode=PUBLIC_MODE)
