"""Workload and PodGroup: groups of pods placed all or nothing (gang scheduling).

The ``scheduling.k8s.io/v1beta1`` shapes of Kubernetes 1.37 (KEP-4671 gang scheduling,
KEP-5832 the PodGroup as its own object, KEP-5729 claims of a group), field for field,
under the group ``scheduling.draco.dev``: a manifest written for upstream works after
changing only its ``apiVersion``. Upstream's alpha ``compositePodGroupTemplates`` (and a
PodGroup's ``parentCompositePodGroupName``) are not served.

One field is draco's own: ``schedulingConstraints.deviceTopology`` asks that every device
of the group's claims share the value of one attribute (an NVLink clique, say), as a
claim's ``matchAttribute`` constraint does within one claim. A pod names its PodGroup with
the label ``scheduling.draco.dev/pod-group`` (upstream's ``spec.schedulingGroup``, which a
core Pod before 1.36 does not have).
"""

from __future__ import annotations

from typing import ClassVar

from draco.api.constants import KIND_POD_GROUP, KIND_WORKLOAD, SCHEDULING_API_VERSION
from draco.api.meta import ApiModel, Condition, TypedObject

__all__ = [
    "AllDisruptionMode",
    "BasicSchedulingPolicy",
    "DeviceTopologyConstraint",
    "DisruptionMode",
    "GangSchedulingPolicy",
    "PodGroup",
    "PodGroupResourceClaim",
    "PodGroupResourceClaimStatus",
    "PodGroupSchedulingConstraints",
    "PodGroupSchedulingPolicy",
    "PodGroupSpec",
    "PodGroupStatus",
    "PodGroupTemplate",
    "SingleDisruptionMode",
    "TopologyConstraint",
    "TypedLocalObjectReference",
    "Workload",
    "WorkloadReference",
    "WorkloadSpec",
]


class TypedLocalObjectReference(ApiModel):
    """A typed object in the same namespace."""

    api_group: str | None = None
    """The group of the object; empty for the core group."""
    kind: str
    """The kind of the object. Required."""
    name: str
    """The name of the object. Required."""


class BasicSchedulingPolicy(ApiModel):
    """Each pod of the group is placed on its own, as any pod is."""


class GangSchedulingPolicy(ApiModel):
    """The group is placed all or nothing."""

    min_count: int
    """How many pods must be placed together, with their devices, before any of them is released to run;
    at least 1. The only field of a PodGroup that may change."""


class PodGroupSchedulingPolicy(ApiModel):
    """How the group is placed: exactly one of ``basic`` and ``gang``."""

    basic: BasicSchedulingPolicy | None = None
    """Place each pod on its own."""
    gang: GangSchedulingPolicy | None = None
    """Place the group all or nothing."""


class TopologyConstraint(ApiModel):
    """Every pod of the group lands in one domain of a node label."""

    key: str
    """The node label whose value is the domain (``topology.kubernetes.io/zone``, a rack label). Required."""


class DeviceTopologyConstraint(ApiModel):
    """draco: every device of the group's claims has the same value of one attribute."""

    match_attribute: str
    """A fully qualified device attribute (``gpu.nvidia.com/cliqueID``) that every device allocated for the
    group must have, with one value for all of them. Required."""


class PodGroupSchedulingConstraints(ApiModel):
    """Where the group may land."""

    topology: list[TopologyConstraint] | None = None
    """At most one node-label domain constraint."""
    device_topology: list[DeviceTopologyConstraint] | None = None
    """draco: at most one device-attribute domain constraint."""


class PodGroupResourceClaim(ApiModel):
    """A claim of the group: one claim shared by its pods, reserved for the group rather than for each
    pod. A pod uses it by naming an entry of the same name and reference in its own claims."""

    name: str
    """The name of the entry within the group (a DNS label). Required."""
    resource_claim_name: str | None = None
    """An existing ResourceClaim in the group's namespace; exactly one of this and
    ``resourceClaimTemplateName``."""
    resource_claim_template_name: str | None = None
    """A ResourceClaimTemplate from which one claim is made for the group, deleted with it."""


class SingleDisruptionMode(ApiModel):
    """Pods of the group may be disrupted one by one."""


class AllDisruptionMode(ApiModel):
    """Pods of the group are disrupted together."""


class DisruptionMode(ApiModel):
    """How the group's pods may be disrupted: exactly one of ``single`` and ``all``."""

    single: SingleDisruptionMode | None = None
    """One by one."""
    all: AllDisruptionMode | None = None
    """All together."""


class _GroupPolicyFields(ApiModel):
    """The fields a PodGroupTemplate and a PodGroup share."""

    scheduling_policy: PodGroupSchedulingPolicy
    """How the group is placed. Required."""
    scheduling_constraints: PodGroupSchedulingConstraints | None = None
    """Where the group may land."""
    resource_claims: list[PodGroupResourceClaim] | None = None
    """Claims shared by the group's pods (at most 4)."""
    disruption_mode: DisruptionMode | None = None
    """How the group's pods may be disrupted."""
    priority_class_name: str | None = None
    """The PriorityClass of the group."""
    priority: int | None = None
    """The priority of the group."""
    preemption_policy: str | None = None
    """``Never`` or ``PreemptLowerPriority`` (draco never preempts)."""


class PodGroupTemplate(_GroupPolicyFields):
    """A template from which a workload's controller makes PodGroups."""

    name: str
    """The name of the template within the Workload (a DNS label). Required."""


class WorkloadSpec(ApiModel):
    """The templates of a workload's pod groups."""

    controller_ref: TypedLocalObjectReference | None = None
    """The object that controls the workload (a Job, a JobSet); informational."""
    pod_group_templates: list[PodGroupTemplate]
    """The templates (at most 8, names unique). Required."""


class Workload(TypedObject):
    """The scheduling policy of a workload's pod groups. draco's copy of ``scheduling.k8s.io/v1beta1``
    Workload."""

    KIND: ClassVar[str] = KIND_WORKLOAD
    NAMESPACED: ClassVar[bool] = True
    DEFAULT_API_VERSION: ClassVar[str] = SCHEDULING_API_VERSION

    spec: WorkloadSpec
    """The pod group templates. Required."""


class WorkloadReference(ApiModel):
    """The Workload template a PodGroup was made from."""

    workload_name: str
    """The Workload's name. Required."""
    template_name: str
    """The template's name within it. Required."""


class PodGroupSpec(_GroupPolicyFields):
    """How a group of pods is placed."""

    workload_ref: WorkloadReference | None = None
    """The Workload template this group was made from."""


class PodGroupResourceClaimStatus(ApiModel):
    """The claim made for a template entry of the group."""

    name: str
    """The entry's name in ``spec.resourceClaims``. Required."""
    resource_claim_name: str | None = None
    """The claim made for it; absent when none was needed."""


class PodGroupStatus(ApiModel):
    """Where the group stands."""

    conditions: list[Condition] | None = None
    """``PodGroupInitiallyScheduled``: True once the group was placed (it stays True), False with what is
    missing while it waits."""
    resource_claim_statuses: list[PodGroupResourceClaimStatus] | None = None
    """The claims made from the group's templates."""


class PodGroup(TypedObject):
    """A group of pods placed together: all of them, or (with a gang policy) at least ``minCount``, get
    their devices before any of them runs. draco's copy of ``scheduling.k8s.io/v1beta1`` PodGroup; pods
    join it with the label ``scheduling.draco.dev/pod-group``."""

    KIND: ClassVar[str] = KIND_POD_GROUP
    NAMESPACED: ClassVar[bool] = True
    DEFAULT_API_VERSION: ClassVar[str] = SCHEDULING_API_VERSION

    spec: PodGroupSpec
    """The policy and constraints of the group. Required."""
    status: PodGroupStatus | None = None
    """Where the group stands."""

    def min_count(self) -> int | None:
        """The gang's minimum, or None for a basic group."""
        gang = self.spec.scheduling_policy.gang
        return gang.min_count if gang is not None else None
