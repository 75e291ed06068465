"""The operator's run options, shared with every part through Kopf's memo (`memo.options`).

`draco operator` fills them from its command line; under `kopf run -m draco.operator`
(tests with KopfRunner) the defaults apply: no metrics or probe servers, every namespace,
no leader election (that lives in `draco operator` itself).

`namespaces` narrows what the operator *acts on* (claims made from templates, reservations
kept, gated pods allocated), never what allocation *sees*: devices are cluster-scoped, so
the scheduler's view always holds every claim, pod and node of the cluster. Otherwise an
operator serving `a` would hand out devices that claims of `b` hold, and would not count
`b`'s pods against a node's cpu and memory. One allocator at a time per cluster is the
Lease's job (every `draco operator` takes the same one unless told otherwise).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from draco.runtime.metricsserver import MetricsServing

__all__ = ["OperatorOptions", "PlacementPolicy", "plain_namespaces", "serves_namespace"]

#: How the scheduler picks among nodes that fit: kube-scheduler's default scores
#: (`draco.scheduling.nodeorder`), most used, least used, or the first in name order.
PlacementPolicy = Literal["scheduler", "pack", "spread", "first"]


@dataclass(frozen=True)
class OperatorOptions:
    namespaces: tuple[str, ...] = ()
    #: Where and how `/metrics` is served (`draco.runtime.metricsserver`; port 0: not at all).
    metrics: MetricsServing = field(default_factory=MetricsServing)
    health_port: int = 0
    workers: int = 16
    placement_policy: PlacementPolicy = "scheduler"
    #: How long kube-scheduler's refusal of a pinned pod must last before draco releases
    #: its devices and places it again (`--refusal-grace`).
    refusal_grace_s: float = 5.0
    binding_timeout_s: float = 600.0
    #: How long a pod that preempted waits for its victims before preemption is decided
    #: again (`--preemption-timeout`).
    preemption_timeout_s: float = 60.0
    #: How long a group of pods may hold devices without all of them released (`--group-timeout`).
    group_timeout_s: float = 60.0
    #: Run the device-taint-eviction controller (`--no-device-taint-eviction`: don't).
    device_taint_eviction: bool = True
    #: Serve extended resources backed by DeviceClasses: special claims for pods' extended
    #: resource requests, and their capacity on the Nodes (`--no-extended-resources`: don't).
    extended_resources: bool = True
    leader_elect: bool = False
    leader_election_namespace: str = "default"
    leader_election_id: str = "draco-operator"
    #: Wall-clock budget of one allocation attempt (upstream's filter timeout); 0: none.
    allocation_timeout_s: float = 10.0
    #: Label allocated claims with their node (``resource.draco.dev/node``): set at start
    #: where the API server does not serve the claims' selectable field ``status.nodeName``
    #: (node agents then select their claims by that label).
    claims_node_label: bool = False
    #: Make the device demand of pods that fit nowhere visible to cluster autoscalers, and
    #: keep nodes whose devices are in use from scale-down (`--autoscaling`; docs/autoscaling.md).
    autoscaling: bool = False
    #: Where demand pods (and ProvisioningRequests) live, and node-template ConfigMaps are read.
    autoscaling_namespace: str = "default"
    #: A group of pods asks cluster-autoscaler for its nodes with one ProvisioningRequest
    #: (atomic scale-up) instead of one demand pod per member.
    autoscaling_provisioning_requests: bool = False


def _is_pattern(namespace: str) -> bool:
    return any(ch in namespace for ch in "*?!,[")


def plain_namespaces(patterns: Iterable[str]) -> tuple[str, ...] | None:
    """The namespaces to LIST one by one, or None when a pattern is a glob (then LIST all
    and keep what `serves_namespace` accepts)."""
    names = tuple(patterns)
    return None if any(_is_pattern(n) for n in names) else names


def serves_namespace(namespace: str, patterns: Iterable[str]) -> bool:
    """Whether `--namespace` patterns (Kopf's syntax: comma-separated globs, `!` excludes,
    a leading exclusion implies `*`) select `namespace`; no patterns select everything."""
    chosen = tuple(patterns)
    return not chosen or _serves(namespace, chosen)


@functools.lru_cache(maxsize=4096)
def _serves(namespace: str, patterns: tuple[str, ...]) -> bool:
    # Every watch event asks; a cluster has few namespaces and one set of patterns.
    return any(_matches(namespace, pattern) for pattern in patterns)


def _matches(namespace: str, pattern: str) -> bool:
    globs = [g.strip() for g in pattern.split(",") if g.strip()]
    if not globs or globs[0].startswith("!"):
        globs.insert(0, "*")
    first = matched = fnmatch.fnmatchcase(namespace, globs[0])
    for glob in globs[1:]:
        if glob.startswith("!"):
            matched = matched and not fnmatch.fnmatchcase(namespace, glob[1:])
        else:
            matched = matched or (first and fnmatch.fnmatchcase(namespace, glob))
    return matched
