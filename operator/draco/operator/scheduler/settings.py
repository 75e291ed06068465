"""The allocation's options (from the operator's command line), shared by the single pods'
attempts (`allocation.py`) and the groups' (`gangs.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from draco.scheduling.nodeorder import PlacementPolicy

__all__ = ["DEFAULT_ALLOCATION_TIMEOUT_S", "DEFAULT_GROUP_TIMEOUT_S", "AllocationSettings"]

#: Upstream's filter timeout (DynamicResourcesArgs.filterTimeout): the wall-clock budget of
#: one allocation attempt.
DEFAULT_ALLOCATION_TIMEOUT_S: Final = 10.0
#: How long a group may hold devices without all its members released (coscheduling's
#: default permit wait).
DEFAULT_GROUP_TIMEOUT_S: Final = 60.0


@dataclass(frozen=True)
class AllocationSettings:
    """Options of the allocation service."""

    policy: PlacementPolicy = "scheduler"
    binding_timeout_s: float = 600.0
    #: Wall-clock budget of one attempt (selector evaluation and search); 0: none.
    allocation_timeout_s: float = DEFAULT_ALLOCATION_TIMEOUT_S
    #: Map extended-resource requests to DeviceClasses (one special claim per pod).
    extended_resources: bool = True
    #: Label allocated claims with their node (``resource.draco.dev/node``): node agents
    #: select on it where the API server does not serve the field ``status.nodeName``.
    node_label: bool = False
    #: How long a group of pods may hold devices without all its pods released (`gangs.py`).
    group_timeout_s: float = DEFAULT_GROUP_TIMEOUT_S
    #: How long a pod that preempted waits for its victims before preemption is decided again.
    preemption_timeout_s: float = 60.0
