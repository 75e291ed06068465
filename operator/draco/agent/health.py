"""Device health: a taint on the device, a condition on its claims, a condition on their pods.

A device that is unhealthy must not get new claims, which is what a taint on the device in
its ResourceSlice means to the operator's allocator (KEP-5055). Its effect is the
driver's choice (`--nvidia-taint-effect`, the fake file's `taintEffect`): `NoSchedule`
only keeps new claims away, as NVIDIA's DRA driver does, since an XID often hurts one
process and not the next; `NoExecute` also makes the operator's eviction controller evict
the pods that use the device. The reason is in the taint's value, so `kubectl get
resourceslices -o yaml` tells an admin what happened.

The claims already prepared on the device, and their pods, are told too (KEP-4680 shows
device health in the pod's status; draco writes what it can write without the kubelet):

- each `status.devices` entry of the claim gets a `Healthy` condition, False with reason
  `Unhealthy` and a message naming the device and the cause, while the device is tainted;
- each pod in the claim's `reservedFor` gets the pod condition
  `resource.draco.dev/DevicesHealthy` False, with the same words, and a Warning Event
  `DeviceUnhealthy`.

When the taint goes (recovery), both conditions go and the pod gets a Normal Event
`DeviceHealthy`. The claim's condition is the record of what the pods were told: the agent
updates the pods first and the claim after, so a crash in between repeats the pods'
update, never skips it.

The NVIDIA driver maps NVML events here; the fake driver maps `healthy: false` here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from draco.api.constants import TAINT_EFFECT_NO_EXECUTE, TAINT_EFFECT_NO_SCHEDULE, UNHEALTHY_TAINT_KEY

__all__ = [
    "EVENT_COMPONENT",
    "FATAL_XIDS",
    "HEALTHY_CONDITION",
    "HEALTH_TAINT_EFFECTS",
    "POD_HEALTH_CONDITION",
    "REASON_DEVICE_HEALTHY",
    "REASON_DEVICE_UNHEALTHY",
    "UNHEALTHY_REASON",
    "UNHEALTHY_TAINT_KEY",
    "describe_problem",
    "device_problem",
    "is_fatal_xid",
    "unhealthy_taint",
]

#: The effects a driver may give its health taints.
HEALTH_TAINT_EFFECTS: Final = (TAINT_EFFECT_NO_SCHEDULE, TAINT_EFFECT_NO_EXECUTE)
#: The condition of a claim's `status.devices` entry while the device is unhealthy.
HEALTHY_CONDITION: Final = "Healthy"
#: Its reason (and the pod condition's).
UNHEALTHY_REASON: Final = "Unhealthy"
#: The pod condition while a device of one of its claims is unhealthy.
POD_HEALTH_CONDITION: Final = "resource.draco.dev/DevicesHealthy"
#: The `reportingController` of every Event the agent writes (its `reportingInstance` is the
#: node's name, as the kubelet's).
EVENT_COMPONENT: Final = "draco-agent"
#: The Events on the pod.
REASON_DEVICE_UNHEALTHY: Final = "DeviceUnhealthy"
REASON_DEVICE_HEALTHY: Final = "DeviceHealthy"

#: XIDs after which the GPU needs a reset: memory errors, fallen off the bus, GSP and
#: NVLink failures. Application errors (13, 31, 43, 45, 68) only hurt the process that
#: caused them and do not make the device unhealthy.
FATAL_XIDS: Final = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})
#: What NVIDIA's XID catalogue calls them, for the messages users read.
_XID_MEANING: Final = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

_LABEL_VALUE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_XID_VALUE = re.compile(r"^xid-(\d+)$")


def unhealthy_taint(reason: str, *, effect: str = TAINT_EFFECT_NO_EXECUTE) -> dict[str, Any]:
    """The taint for an unhealthy device; `reason` becomes a label-safe value."""
    if effect not in HEALTH_TAINT_EFFECTS:
        raise ValueError(
            f"a health taint's effect is one of {', '.join(HEALTH_TAINT_EFFECTS)}, not {effect!r}"
        )
    value = _LABEL_VALUE_UNSAFE.sub("-", reason).strip("-_.")[:63].strip("-_.") or "unhealthy"
    return {"key": UNHEALTHY_TAINT_KEY, "value": value, "effect": effect}


def is_fatal_xid(xid: int) -> bool:
    return xid in FATAL_XIDS


def describe_problem(value: str) -> str:
    """A health taint's value in words: `xid-79` -> `XID 79 (GPU has fallen off the bus)`."""
    match = _XID_VALUE.match(value)
    if match:
        xid = int(match[1])
        meaning = _XID_MEANING.get(xid)
        return f"XID {xid}" + (f" ({meaning})" if meaning else "")
    if value == "gpu-lost":
        return "the GPU is lost (NVML cannot reach it)"
    return value.replace("-", " ")


def device_problem(taints: Sequence[Mapping[str, Any]]) -> str | None:
    """The value of the device's health taint (its cause), None when it has none."""
    for taint in taints:
        if taint.get("key") == UNHEALTHY_TAINT_KEY:
            return str(taint.get("value") or "unhealthy")
    return None
