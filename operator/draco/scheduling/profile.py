"""kube-scheduler's default profile as draco runs it: every rule module, registered.

`draco.scheduling.framework` holds the profile's shape and registry; each rule module
registers itself when imported. Importing this module imports them all, so callers that
place pods (the operator's allocation, `draco simulate`) get the whole profile from one
place and cannot forget a rule.
"""

from __future__ import annotations

from draco.scheduling import (
    hostports,
    imagelocality,
    interpodaffinity,
    nodeaffinity,
    noderesources,
    nodevolumelimits,
    tainttoleration,
    topologyspread,
    volumebinding,
    volumerestrictions,
    volumezone,
)
from draco.scheduling.framework import FILTERS, SCORES, PreparedPod, prepare, total_scores

__all__ = ["FILTERS", "RULE_MODULES", "SCORES", "PreparedPod", "prepare", "total_scores"]

#: The modules of the profile's rules (imported for their registration), in the profile's
#: order. The DynamicResources plugin's part (devices, the prioritized-list score) is not
#: registered here: the allocator and `draco.scheduling.prioritizedlist` answer for it.
RULE_MODULES = (
    tainttoleration,
    nodeaffinity,
    hostports,
    noderesources,
    volumerestrictions,
    nodevolumelimits,
    volumebinding,
    volumezone,
    topologyspread,
    interpodaffinity,
    imagelocality,
)
