"""Names, well-known strings and size limits of draco's resource API.

Everything here mirrors upstream ``resource.k8s.io/v1`` (Kubernetes 1.37) under draco's
own domain, so that the validation, the allocator, the operator and the generated CRDs all
agree on one set of numbers. Where a limit has an upstream Go constant, the name here is
that constant's name in upper snake case.
"""

from __future__ import annotations

from typing import Final

# --- group and versions ---------------------------------------------------------------

GROUP: Final = "resource.draco.dev"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
NATIVE_GROUP: Final = "resource.k8s.io"
NATIVE_VERSION: Final = "v1"
NATIVE_API_VERSION: Final = f"{NATIVE_GROUP}/{NATIVE_VERSION}"
#: Both apiVersions a manifest may carry; the shapes are identical.
SUPPORTED_API_VERSIONS: Final = (API_VERSION, NATIVE_API_VERSION)
#: Workload and PodGroup: upstream's ``scheduling.k8s.io/v1beta1`` (Kubernetes 1.37) under
#: draco's domain, as the resource kinds are ``resource.k8s.io/v1`` under it.
SCHEDULING_GROUP: Final = "scheduling.draco.dev"
SCHEDULING_VERSION: Final = "v1beta1"
SCHEDULING_API_VERSION: Final = f"{SCHEDULING_GROUP}/{SCHEDULING_VERSION}"
NATIVE_SCHEDULING_API_VERSION: Final = "scheduling.k8s.io/v1beta1"
#: ResourcePoolStatusRequest: upstream's ``resource.k8s.io/v1alpha3`` (Kubernetes 1.37,
#: KEP-5677) under draco's group, in upstream's version (it is alpha there).
POOL_STATUS_VERSION: Final = "v1alpha3"
POOL_STATUS_API_VERSION: Final = f"{GROUP}/{POOL_STATUS_VERSION}"
NATIVE_POOL_STATUS_API_VERSION: Final = f"{NATIVE_GROUP}/{POOL_STATUS_VERSION}"

# --- kinds and plural resource names ---------------------------------------------------

KIND_DEVICE_CLASS: Final = "DeviceClass"
KIND_RESOURCE_CLAIM: Final = "ResourceClaim"
KIND_RESOURCE_CLAIM_TEMPLATE: Final = "ResourceClaimTemplate"
KIND_RESOURCE_SLICE: Final = "ResourceSlice"
KIND_DEVICE_TAINT_RULE: Final = "DeviceTaintRule"
KIND_RESOURCE_POOL_STATUS_REQUEST: Final = "ResourcePoolStatusRequest"

PLURAL_DEVICE_CLASSES: Final = "deviceclasses"
PLURAL_RESOURCE_CLAIMS: Final = "resourceclaims"
PLURAL_RESOURCE_CLAIM_TEMPLATES: Final = "resourceclaimtemplates"
PLURAL_RESOURCE_SLICES: Final = "resourceslices"
PLURAL_DEVICE_TAINT_RULES: Final = "devicetaintrules"
PLURAL_RESOURCE_POOL_STATUS_REQUESTS: Final = "resourcepoolstatusrequests"

KIND_WORKLOAD: Final = "Workload"
KIND_POD_GROUP: Final = "PodGroup"
PLURAL_WORKLOADS: Final = "workloads"
PLURAL_POD_GROUPS: Final = "podgroups"

# --- well-known strings (upstream's under draco's domain) ------------------------------

#: Finalizer on allocated claims (upstream: resource.kubernetes.io/delete-protection).
FINALIZER: Final = f"{GROUP}/delete-protection"
#: Annotation on template-generated claims; value = the pod's claim entry name.
POD_CLAIM_NAME_ANNOTATION: Final = f"{GROUP}/pod-claim-name"
#: Annotation on the special extended-resource claim; the only valid value is "true".
EXTENDED_RESOURCE_CLAIM_ANNOTATION: Final = f"{GROUP}/extended-resource-claim"
#: Pod annotation recording the special claim and which container's extended resource maps
#: to which of its requests (JSON ``{resourceClaimName, requestMappings: [{containerName,
#: resourceName, requestName}]}``; the role of ``pod.status.extendedResourceClaimStatus``).
EXTENDED_RESOURCE_CLAIM_STATUS_ANNOTATION: Final = f"{GROUP}/extended-resource-claim-status"
#: Namespace label that allows ``adminAccess: true``; the value must be exactly "true".
ADMIN_ACCESS_LABEL: Final = f"{GROUP}/admin-access"
#: Namespace label of the pod webhook: `enabled` opts the namespace's pods in, `disabled`
#: keeps them out of the cluster-wide mode.
POD_WEBHOOK_LABEL: Final = f"{GROUP}/pod-webhook"
#: Every DeviceClass ``c`` implicitly backs the extended resource ``<prefix><c>``.
IMPLICIT_EXTENDED_RESOURCE_PREFIX: Final = f"deviceclass.{GROUP}/"
#: ... and upstream's implicit name of a class, ``deviceclass.resource.kubernetes.io/<c>``
#: (what manifests written for native DRA ask for), too.
UPSTREAM_IMPLICIT_EXTENDED_RESOURCE_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
#: Both implicit prefixes, draco's first.
IMPLICIT_EXTENDED_RESOURCE_PREFIXES: Final = (
    IMPLICIT_EXTENDED_RESOURCE_PREFIX,
    UPSTREAM_IMPLICIT_EXTENDED_RESOURCE_PREFIX,
)
#: Pod annotation naming its claims (the role of ``pod.spec.resourceClaims``).
CLAIMS_ANNOTATION: Final = f"{GROUP}/claims"
#: Pod annotation recording generated claim names (``pod.status.resourceClaimStatuses``).
CLAIM_STATUSES_ANNOTATION: Final = f"{GROUP}/claim-statuses"
#: Scheduling gate held on pods until their claims are allocated.
SCHEDULING_GATE: Final = f"{GROUP}/allocation"
#: The scheduler name draco answers to: a pod whose ``spec.schedulerName`` is this is
#: placed *and bound* by draco itself (kube-scheduler leaves it alone), instead of being
#: gated, pinned and left to kube-scheduler to bind. One write per pod fewer, and
#: kube-scheduler's cycle is skipped; see docs/architecture.md for the trade-off.
SCHEDULER_NAME: Final = "draco"
#: The scheduler a pod names when it names none (kube-scheduler's default profile).
DEFAULT_SCHEDULER_NAME: Final = "default-scheduler"
#: Pod annotation the allocation writes when it removes the gate: the UID of the pod it
#: placed. A pod made from a copy of another (``kubectl replace --force``) carries the old
#: pod's pin and annotations but not its UID, so it is known not to be the pod draco
#: reserved the claims for.
PLACED_UID_ANNOTATION: Final = f"{GROUP}/placed-uid"
#: The claim status field naming the node whose agent prepares the claim's devices: written
#: with the allocation (the node of the pod it was allocated for), gone with it. Node agents
#: watch only their nodes' claims with a field selector on it (a CRD selectable field),
#: instead of every claim of the cluster. Not in upstream (the kubelet asks its drivers per
#: pod instead).
NODE_FIELD: Final = "status.nodeName"
#: The label that does the same where the API server does not serve CRD selectable fields
#: (kube-apiserver before 1.31, or the CustomResourceFieldSelectors gate off): the operator
#: then writes it with the allocation, and removes it with the claim's finalizer.
NODE_LABEL: Final = f"{GROUP}/node"
#: The device taint key of every health problem a node agent reports (its value says
#: which): what the operator's metrics and `draco top` count as unhealthy.
UNHEALTHY_TAINT_KEY: Final = "draco.dev/unhealthy"
#: The pod condition set before a taint eviction, and its reason.
DISRUPTION_TARGET_CONDITION: Final = "DisruptionTarget"
DELETION_BY_DEVICE_TAINT_MANAGER_REASON: Final = "DeletionByDeviceTaintManager"
#: The DisruptionTarget reason on a pod preempted to make room for one of higher priority
#: (kube-scheduler's, `v1.PodReasonPreemptionByScheduler`).
PREEMPTION_BY_SCHEDULER_REASON: Final = "PreemptionByScheduler"
#: The DeviceTaintRule status condition maintained by the eviction controller.
EVICTION_IN_PROGRESS_CONDITION: Final = "EvictionInProgress"
#: DeviceClass status condition draco adds (not upstream).
VALID_CONDITION: Final = "Valid"
#: ResourcePoolStatusRequest's conditions and their reasons (upstream's).
POOL_STATUS_COMPLETE_CONDITION: Final = "Complete"
POOL_STATUS_FAILED_CONDITION: Final = "Failed"
POOL_STATUS_COMPLETE_REASON: Final = "CalculationComplete"
POOL_STATUS_FAILED_REASON: Final = "CalculationFailed"

#: Pod label naming the draco PodGroup the pod belongs to (the role of upstream's
#: ``spec.schedulingGroup.podGroupName``, which a core Pod before 1.36 does not have).
POD_GROUP_LABEL: Final = f"{SCHEDULING_GROUP}/pod-group"
#: The PodGroup condition draco maintains (upstream's, 1.37): True once the group was placed.
POD_GROUP_SCHEDULED_CONDITION: Final = "PodGroupInitiallyScheduled"
#: Its reasons (upstream's ``Unschedulable``; draco's ``Placed`` and ``TimedOut``).
POD_GROUP_UNSCHEDULABLE_REASON: Final = "Unschedulable"
POD_GROUP_PLACED_REASON: Final = "Placed"
POD_GROUP_TIMED_OUT_REASON: Final = "TimedOut"
#: reservedFor entries of a group claim name the PodGroup (KEP-5729).
POD_GROUP_RESOURCE: Final = PLURAL_POD_GROUPS

# --- enum values -------------------------------------------------------------------------

ALLOCATION_MODE_EXACT_COUNT: Final = "ExactCount"
ALLOCATION_MODE_ALL: Final = "All"
ALLOCATION_MODES: Final = (ALLOCATION_MODE_EXACT_COUNT, ALLOCATION_MODE_ALL)

TOLERATION_OP_EXISTS: Final = "Exists"
TOLERATION_OP_EQUAL: Final = "Equal"
TOLERATION_OPERATORS: Final = (TOLERATION_OP_EXISTS, TOLERATION_OP_EQUAL)

TAINT_EFFECT_NONE: Final = "None"
TAINT_EFFECT_NO_SCHEDULE: Final = "NoSchedule"
TAINT_EFFECT_NO_EXECUTE: Final = "NoExecute"
TAINT_EFFECTS: Final = (TAINT_EFFECT_NONE, TAINT_EFFECT_NO_SCHEDULE, TAINT_EFFECT_NO_EXECUTE)

ALLOCATION_CONFIG_SOURCE_CLASS: Final = "FromClass"
ALLOCATION_CONFIG_SOURCE_CLAIM: Final = "FromClaim"
ALLOCATION_CONFIG_SOURCES: Final = (ALLOCATION_CONFIG_SOURCE_CLASS, ALLOCATION_CONFIG_SOURCE_CLAIM)

NODE_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")

SKIP_NODE_PREPARE: Final = "NodePrepareResources"
SKIP_NODE_UNPREPARE: Final = "NodeUnprepareResources"
SKIP_NODE_ALL: Final = "*"
SKIP_NODE_OPERATIONS: Final = (SKIP_NODE_PREPARE, SKIP_NODE_UNPREPARE, SKIP_NODE_ALL)

#: reservedFor entries for pods use the core group ("") and resource "pods".
POD_RESOURCE: Final = "pods"

# --- limits (upstream's) ----------------------------------------------------------------

ALLOCATION_RESULTS_MAX_SIZE: Final = 32
DEVICE_REQUESTS_MAX_SIZE: Final = ALLOCATION_RESULTS_MAX_SIZE
DEVICE_CONSTRAINTS_MAX_SIZE: Final = 32
DEVICE_CONFIG_MAX_SIZE: Final = 32
#: allocation.devices.config holds class plus claim configs.
ALLOCATION_CONFIG_MAX_SIZE: Final = 2 * DEVICE_CONFIG_MAX_SIZE
#: requests[] inside a constraint or a claim config.
REQUEST_REFERENCES_MAX_SIZE: Final = DEVICE_REQUESTS_MAX_SIZE
RESOURCE_SLICE_MAX_DEVICES: Final = 128
RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS: Final = 64
RESERVED_FOR_MAX_SIZE: Final = 256
FIRST_AVAILABLE_MAX: Final = 8
SELECTORS_MAX: Final = 32
CEL_EXPRESSION_MAX_BYTES: Final = 10 * 1024
CEL_COST_LIMIT: Final = 1_000_000
OPAQUE_PARAMETERS_MAX_BYTES: Final = 10 * 1024
DEVICE_STATUS_DATA_MAX_BYTES: Final = 10 * 1024
#: Declared upstream (DeviceTolerationsMaxLength) but not enforced by 1.37 validation: unused.
TOLERATIONS_MAX: Final = 16
TAINTS_MAX: Final = 16
ATTRIBUTES_AND_CAPACITIES_MAX: Final = 32
#: DRAListTypeAttributes: values of list-typed attributes per device, in total.
LIST_ATTRIBUTE_VALUES_MAX: Final = 48
SHARED_COUNTERS_MAX: Final = 8
COUNTERS_PER_SET_MAX: Final = 32
CONSUMES_COUNTERS_MAX: Final = 2
BINDING_CONDITIONS_MAX: Final = 4
BINDING_FAILURE_CONDITIONS_MAX: Final = 4
DEVICE_STATUS_CONDITIONS_MAX: Final = 8
DEVICE_TAINT_RULE_CONDITIONS_MAX: Final = 8
CAPACITY_VALID_VALUES_MAX: Final = 10
NETWORK_INTERFACE_NAME_MAX_BYTES: Final = 256
NETWORK_IPS_MAX: Final = 16
NETWORK_HARDWARE_ADDRESS_MAX_BYTES: Final = 128

DRIVER_NAME_MAX_LENGTH: Final = 63
POOL_NAME_MAX_LENGTH: Final = 253
DEVICE_NAME_MAX_LENGTH: Final = 63
DNS_LABEL_MAX_LENGTH: Final = 63
DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
#: Domain part of a qualified attribute/capacity name (validated like a driver name).
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
#: Identifier part of a qualified attribute/capacity name.
DEVICE_MAX_ID_LENGTH: Final = 32
#: string and version attribute values.
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH: Final = 64
#: shareID is a lower-case RFC 4122 UUID.
SHARE_ID_LENGTH: Final = 36
#: Workload and PodGroup (upstream's WorkloadMaxPodGroupTemplates, MaxPodGroupResourceClaims).
WORKLOAD_MAX_POD_GROUP_TEMPLATES: Final = 8
MAX_POD_GROUP_RESOURCE_CLAIMS: Final = 4
#: ``schedulingConstraints.topology`` (and draco's ``deviceTopology``) hold one entry.
POD_GROUP_TOPOLOGY_MAX: Final = 1
#: upstream's HighestUserDefinablePriority.
HIGHEST_USER_DEFINABLE_PRIORITY: Final = 1_000_000_000
#: ResourcePoolStatusRequest: pools in a status, conditions.
POOL_STATUS_MAX_POOLS: Final = 1000
POOL_STATUS_CONDITIONS_MAX: Final = 10
POOL_STATUS_LIMIT_DEFAULT: Final = 100
#: ``partitionSummary`` and ``shareableSummary.capacity``; ``validationError``'s bytes.
POOL_STATUS_LIST_MAX: Final = 32
POOL_STATUS_VALIDATION_ERROR_MAX_BYTES: Final = 256
#: Generated claim names: ``<pod>-<claim>-`` is cut to this budget before the suffix.
GENERATED_NAME_PREFIX_MAX_LENGTH: Final = 57
