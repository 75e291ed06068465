"""Defaulting the API server does on write that is not a static default: stamping
``timeAdded`` on device taints.

Static defaults (``allocationMode``, ``count``, toleration ``operator``) are applied when a
model is built; see the models. This module is for the mutating webhook, which knows the
time.
"""

from __future__ import annotations

from datetime import datetime

from draco.api.devicetaintrule import DeviceTaintRule
from draco.api.resourceslice import ResourceSlice

__all__ = ["stamp_taint_times"]


def stamp_taint_times(
    obj: ResourceSlice | DeviceTaintRule,
    *,
    now: datetime,
    old: ResourceSlice | DeviceTaintRule | None = None,
) -> bool:
    """Set ``timeAdded`` to ``now`` on every taint that has none; True if anything changed.

    For a DeviceTaintRule update (``old`` given), a taint whose ``timeAdded`` was left as
    before while its effect changed also gets ``now``, as upstream does; changing only
    the key or value keeps the time.
    """
    changed = False
    if isinstance(obj, DeviceTaintRule):
        taint = obj.spec.taint
        if taint.time_added is None:
            taint.time_added = now
            changed = True
        elif isinstance(old, DeviceTaintRule):
            previous = old.spec.taint
            if taint.time_added == previous.time_added and taint.effect != previous.effect:
                taint.time_added = now
                changed = True
        return changed
    for device in obj.devices:
        for taint in device.taints or ():
            if taint.time_added is None:
                taint.time_added = now
                changed = True
    return changed
