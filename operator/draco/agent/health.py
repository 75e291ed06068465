"""Device health becomes device taints: one key, NoExecute, a value saying why.

A device that is unhealthy must not get new claims and its pods must go, which is exactly
what a NoExecute taint on the device in its ResourceSlice means to the operator's
allocator and eviction controller (KEP-5055). The reason is in the taint's value so
`kubectl get resourceslices -o yaml` tells an admin what happened.

The NVIDIA driver maps NVML events here; the fake driver maps `healthy: false` here.
"""

from __future__ import annotations

import re
from typing import Any, Final

from draco.api.constants import TAINT_EFFECT_NO_EXECUTE

__all__ = [
    "FATAL_XIDS",
    "UNHEALTHY_TAINT_KEY",
    "is_fatal_xid",
    "unhealthy_taint",
]

#: The taint key of every health problem the agent reports.
UNHEALTHY_TAINT_KEY: Final = "draco.dev/unhealthy"

#: XIDs after which the GPU needs a reset: memory errors, fallen off the bus, GSP and
#: NVLink failures. Application errors (13, 31, 43, 45, 68) only hurt the process that
#: caused them and do not make the device unhealthy.
FATAL_XIDS: Final = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})

_LABEL_VALUE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def unhealthy_taint(reason: str) -> dict[str, Any]:
    """The NoExecute taint for an unhealthy device; `reason` becomes a label-safe value."""
    value = _LABEL_VALUE_UNSAFE.sub("-", reason).strip("-_.")[:63].strip("-_.") or "unhealthy"
    return {"key": UNHEALTHY_TAINT_KEY, "value": value, "effect": TAINT_EFFECT_NO_EXECUTE}


def is_fatal_xid(xid: int) -> bool:
    return xid in FATAL_XIDS
