"""The Validating- and MutatingWebhookConfiguration that route draco's kinds to `draco
webhook`, built here so that the Helm chart's (charts/draco), `--print-configuration` and
the dev self-registration are one and the same.

Each configuration holds two webhooks, split by who writes and what a failure costs (the
reasoning is in docs/webhook.md):

- `user.*` — DeviceClasses, ResourceClaims, ResourceClaimTemplates, DeviceTaintRules,
  and `scheduling.draco.dev`'s Workloads and PodGroups: what people and their tools write. `failurePolicy: Fail`: while the webhook is down
  these writes are refused ("failed calling webhook"), because the CRD schema alone
  would store a selector that does not compile or an admin-access request from an
  unlabelled namespace. The users listed as exempt (the operator's service account,
  which creates claims from templates that were validated when they were written) skip
  it through `matchConditions`.
- `system.*` — ResourceSlices and the status of claims and taint rules: what the node
  agent and the operator write. `failurePolicy: Ignore`: while the webhook is down
  these writes go through with the CRD schema's checks only, so a crashed webhook never
  stops devices from being published or claims from being allocated and prepared.

Where users are exempt, a third validating webhook, `quota.*`, sees only their claim
CREATEs (the operator's claims from templates) and only charges them to their
namespace's device quota (`draco.webhook.quota`), `failurePolicy: Ignore`: a down webhook
never stops the operator from creating a pod's claims, it only leaves them uncharged
until the operator counts the namespace again.

Where the node agents' user is named (`agent_users`), a fourth validating webhook,
`agent-events.*`, sees only their Event writes (events.k8s.io, CREATE and UPDATE) and
refuses an Event about a pod of another node or a claim allocated elsewhere
(`draco.webhook.agentevents`), `failurePolicy: Fail`: while the webhook is down an
agent's Events are refused (the agent logs them; its devices and claims go on), never let
through unchecked.

The MutatingWebhookConfiguration also holds the pod webhooks (`pods.*`, pods CREATE, and
for the translating one the UPDATEs that re-apply native claims it translated). In the
namespaces that opted in (`pods.translate.*`, and `workloads.translate.*`) they fail
closed, `failurePolicy: Fail`: while the webhook is down a pod that could concern draco
is refused there ("failed calling webhook"; a workload controller creates it again once
the webhook answers), never admitted untranslated and ungated to wait for ever. In the
other namespaces (`pods.gate.*`, with `pod_webhook="all"`) they fail open: a down webhook
never blocks a pod of a namespace that did not ask for draco; the operator's Warning
Event names the pods it left untranslated. Which pods are sent is decided by the API server,
never by us: `pods.translate.*` for namespaces labelled
`resource.draco.dev/pod-webhook: enabled`, `pods.gate.*` (only with `pod_webhook="all"`)
for every other namespace but kube-system and those labelled `disabled`; and in both, a
`matchConditions` expression sends only pods that could concern draco (the claims
annotation, `spec.resourceClaims`, or a resource name with a domain). Where it translates,
`workloads.translate.*` sees the workloads (Deployments, ReplicaSets, StatefulSets,
DaemonSets, Jobs, CronJobs) of the same namespaces whose pod template names native claims:
before 1.34 the API server drops them from a stored template unless the
DynamicResourceAllocation gate is on (`draco.webhook.workloads`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from draco.api.constants import (
    CLAIMS_ANNOTATION,
    GROUP,
    PLURAL_DEVICE_CLASSES,
    PLURAL_DEVICE_TAINT_RULES,
    PLURAL_POD_GROUPS,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_POOL_STATUS_REQUESTS,
    PLURAL_RESOURCE_SLICES,
    PLURAL_WORKLOADS,
    POD_GROUP_LABEL,
    POD_WEBHOOK_LABEL,
    POOL_STATUS_VERSION,
    SCHEDULING_GROUP,
    SCHEDULING_VERSION,
    VERSION,
)
from draco.api.versions import V1BETA1, V1BETA2

__all__ = [
    "CONFIGURATION_NAME",
    "MUTATE_PATH",
    "MUTATE_PODS_PATH",
    "MUTATE_PODS_TRANSLATE_PATH",
    "MUTATE_WORKLOADS_PATH",
    "POD_WEBHOOK_LABEL",
    "VALIDATE_AGENT_EVENTS_PATH",
    "VALIDATE_PATH",
    "VALIDATE_QUOTA_PATH",
    "Endpoint",
    "webhook_configurations",
]

#: The name of both configurations (they are of different kinds).
CONFIGURATION_NAME: Final = "resource.draco.dev"
VALIDATE_PATH: Final = "/validate"
#: Only the device quota of claims being created (the exempt users' claims).
VALIDATE_QUOTA_PATH: Final = "/validate-quota"
#: Only the Events of the node agents' user.
VALIDATE_AGENT_EVENTS_PATH: Final = "/validate-agent-events"
MUTATE_PATH: Final = "/mutate"
MUTATE_PODS_PATH: Final = "/mutate-pods"
MUTATE_PODS_TRANSLATE_PATH: Final = "/mutate-pods/translate"
MUTATE_WORKLOADS_PATH: Final = "/mutate-workloads"
#: Pods that could concern draco: those naming claims (either shape), asking for a resource
#: with a domain (a candidate extended resource) or in a draco PodGroup (placed with their
#: group, claims or not). Everything else is never sent.
_RESOURCE_WITH_DOMAIN = (
    "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.contains('/')))"
    " || (has(c.resources.requests) && c.resources.requests.exists(k, k.contains('/'))))"
)
POD_MATCH_EXPRESSION: Final = (
    "has(object.spec.resourceClaims)"
    f" || (has(object.metadata.annotations) && '{CLAIMS_ANNOTATION}' in object.metadata.annotations)"
    f" || (has(object.metadata.labels) && '{POD_GROUP_LABEL}' in object.metadata.labels)"
    f" || object.spec.containers.exists(c, {_RESOURCE_WITH_DOMAIN})"
    f" || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, {_RESOURCE_WITH_DOMAIN}))"
)
#: Of pod UPDATEs, the translating webhook sees only those that bring native claims back
#: (`kubectl apply` of a translated pod's manifest again; `pods.reapply_patch`), never the
#: operator's pin or any other pod update.
POD_REAPPLY_EXPRESSION: Final = "request.operation == 'CREATE' || (has(object.spec.resourceClaims) && !has(oldObject.spec.resourceClaims))"
#: Workloads whose pod template names native claims (a CronJob's is one level deeper).
WORKLOAD_MATCH_EXPRESSION: Final = (
    "(has(object.spec.template) && has(object.spec.template.spec)"
    " && has(object.spec.template.spec.resourceClaims))"
    " || (has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec)"
    " && has(object.spec.jobTemplate.spec.template) && has(object.spec.jobTemplate.spec.template.spec)"
    " && has(object.spec.jobTemplate.spec.template.spec.resourceClaims))"
)
#: How long the API server waits for an answer. A user write waits at most this long for
#: a hung webhook (a dead one is refused at once). System writes (Ignore) get longer: the
#: update of a 1 MiB ResourceSlice carries two of them and takes about a second to check
#: on a busy node, and a timeout there would let it through unchecked; a hung webhook
#: delays the agent's writes by at most this much, it never blocks them.
USER_TIMEOUT_SECONDS: Final = 5
SYSTEM_TIMEOUT_SECONDS: Final = 10

_WRITES: Final = ["CREATE", "UPDATE"]
FailurePolicy = Literal["Fail", "Ignore"]
#: Which namespaces' pods the pod webhook sees: none, the opted-in ones, all.
PodWebhookMode = Literal["off", "opted-in", "all"]
#: Where the native shape is translated: nowhere (native DRA serves pods), opted-in namespaces.
TranslateMode = Literal["off", "opted-in"]


@dataclass(frozen=True)
class Endpoint:
    """How the API server reaches the webhook: a Service (`namespace/name`, port) or a
    URL (`https://host:port`), and the CA bundle to trust (None: left for cert-manager's
    CA injector, named by `inject_ca_from`)."""

    url: str | None = None
    service: tuple[str, str] | None = None
    service_port: int = 443
    ca_bundle: bytes | None = None
    inject_ca_from: str | None = None

    def client_config(self, path: str) -> dict[str, Any]:
        config: dict[str, Any]
        if self.service is not None:
            namespace, name = self.service
            config = {
                "service": {"namespace": namespace, "name": name, "path": path, "port": self.service_port}
            }
        elif self.url is not None:
            config = {"url": self.url.rstrip("/") + path}
        else:
            raise ValueError("a webhook endpoint needs a Service or a URL")
        if self.ca_bundle is not None:
            config["caBundle"] = base64.b64encode(self.ca_bundle).decode()
        return config


#: Every version draco serves: the API server asks the webhooks about an object in the
#: version its writer used (never converted first), so defaults are written and errors
#: named in that version's fields (`draco.validation.versions`).
API_VERSIONS: Final = (VERSION, V1BETA2, V1BETA1)


def _rule(resources: Sequence[str], operations: Sequence[str]) -> dict[str, Any]:
    return {
        "apiGroups": [GROUP],
        "apiVersions": list(API_VERSIONS),
        "resources": list(resources),
        "operations": list(operations),
        "scope": "*",
    }


#: Workloads and PodGroups (`scheduling.draco.dev`): written by users and their workload
#: controllers, validated as the resource kinds are (a PodGroup's status is draco's to write).
_GROUP_RULE: Final = {
    "apiGroups": [SCHEDULING_GROUP],
    "apiVersions": [SCHEDULING_VERSION],
    "resources": [PLURAL_WORKLOADS, PLURAL_POD_GROUPS],
    "operations": ["CREATE", "UPDATE"],
    "scope": "Namespaced",
}


def _pool_status_rule(resource: str, operations: Sequence[str]) -> dict[str, Any]:
    """ResourcePoolStatusRequests (one version, cluster-scoped): written by users, answered
    in their status by the operator."""
    return {
        "apiGroups": [GROUP],
        "apiVersions": [POOL_STATUS_VERSION],
        "resources": [resource],
        "operations": list(operations),
        "scope": "Cluster",
    }


def _users(users: Sequence[str]) -> str:
    return ", ".join("'" + u.replace("\\", "\\\\").replace("'", "\\'") + "'" for u in users)


def _exemption(users: Sequence[str]) -> list[dict[str, Any]]:
    if not users:
        return []
    return [{"name": "not-draco-itself", "expression": f"!(request.userInfo.username in [{_users(users)}])"}]


def _webhook(
    name: str,
    *,
    endpoint: Endpoint,
    path: str,
    rules: list[dict[str, Any]],
    policy: FailurePolicy,
    timeout: int,
    exempt_users: Sequence[str] = (),
) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": endpoint.client_config(path),
        "rules": rules,
        "failurePolicy": policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": timeout,
    }
    conditions = _exemption(exempt_users)
    if conditions:
        webhook["matchConditions"] = conditions
    return webhook


def webhook_configurations(
    endpoint: Endpoint,
    *,
    exempt_users: Sequence[str] = (),
    agent_users: Sequence[str] = (),
    name: str = CONFIGURATION_NAME,
    pod_webhook: PodWebhookMode = "opted-in",
    translate_native: TranslateMode = "opted-in",
) -> list[dict[str, Any]]:
    """The ValidatingWebhookConfiguration and the MutatingWebhookConfiguration, in that order."""
    user_kinds = [
        PLURAL_DEVICE_CLASSES,
        PLURAL_RESOURCE_CLAIMS,
        PLURAL_RESOURCE_CLAIM_TEMPLATES,
        PLURAL_DEVICE_TAINT_RULES,
    ]
    statuses = [f"{PLURAL_RESOURCE_CLAIMS}/status", f"{PLURAL_DEVICE_TAINT_RULES}/status"]
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "draco-webhook"}}
    if endpoint.inject_ca_from:
        metadata["annotations"] = {"cert-manager.io/inject-ca-from": endpoint.inject_ca_from}
    validating: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            _webhook(
                f"user.validate.{GROUP}",
                endpoint=endpoint,
                path=VALIDATE_PATH,
                rules=[
                    _rule(user_kinds, _WRITES),
                    _GROUP_RULE,
                    _pool_status_rule(PLURAL_RESOURCE_POOL_STATUS_REQUESTS, _WRITES),
                ],
                policy="Fail",
                timeout=USER_TIMEOUT_SECONDS,
                exempt_users=exempt_users,
            ),
            _webhook(
                f"system.validate.{GROUP}",
                endpoint=endpoint,
                path=VALIDATE_PATH,
                rules=[
                    _rule([PLURAL_RESOURCE_SLICES], _WRITES),
                    _rule(statuses, ["UPDATE"]),
                    _pool_status_rule(f"{PLURAL_RESOURCE_POOL_STATUS_REQUESTS}/status", ["UPDATE"]),
                ],
                policy="Ignore",
                timeout=SYSTEM_TIMEOUT_SECONDS,
            ),
        ],
    }
    if exempt_users:
        quota = _webhook(
            f"quota.validate.{GROUP}",
            endpoint=endpoint,
            path=VALIDATE_QUOTA_PATH,
            rules=[_rule([PLURAL_RESOURCE_CLAIMS], ["CREATE"])],
            policy="Ignore",
            timeout=USER_TIMEOUT_SECONDS,
        )
        quota["matchConditions"] = [
            {"name": "draco-itself", "expression": f"request.userInfo.username in [{_users(exempt_users)}]"}
        ]
        validating["webhooks"].append(quota)
    if agent_users:
        events = _webhook(
            f"agent-events.validate.{GROUP}",
            endpoint=endpoint,
            path=VALIDATE_AGENT_EVENTS_PATH,
            rules=[
                {
                    "apiGroups": ["events.k8s.io"],
                    "apiVersions": ["v1"],
                    "resources": ["events"],
                    "operations": _WRITES,
                    "scope": "Namespaced",
                }
            ],
            policy="Fail",
            timeout=USER_TIMEOUT_SECONDS,
        )
        events["matchConditions"] = [
            {"name": "a-node-agent", "expression": f"request.userInfo.username in [{_users(agent_users)}]"}
        ]
        validating["webhooks"].append(events)
    mutating: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            {
                **_webhook(
                    f"user.default.{GROUP}",
                    endpoint=endpoint,
                    path=MUTATE_PATH,
                    rules=[_rule(user_kinds[1:], _WRITES)],
                    policy="Fail",
                    timeout=USER_TIMEOUT_SECONDS,
                    exempt_users=exempt_users,
                ),
                "reinvocationPolicy": "Never",
            },
            {
                **_webhook(
                    f"system.default.{GROUP}",
                    endpoint=endpoint,
                    path=MUTATE_PATH,
                    rules=[_rule([PLURAL_RESOURCE_SLICES], _WRITES)],
                    policy="Ignore",
                    timeout=SYSTEM_TIMEOUT_SECONDS,
                ),
                "reinvocationPolicy": "Never",
            },
        ],
    }
    mutating["webhooks"].extend(_pod_webhooks(endpoint, pod_webhook, translate_native))
    return [validating, mutating]


def _pod_webhook(
    name: str,
    *,
    endpoint: Endpoint,
    path: str,
    selector: dict[str, Any],
    policy: FailurePolicy,
    reapply: bool = False,
) -> dict[str, Any]:
    operations = ["CREATE", "UPDATE"] if reapply else ["CREATE"]
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": operations}
    conditions = [{"name": "may-concern-draco", "expression": POD_MATCH_EXPRESSION}]
    if reapply:
        conditions.append(
            {"name": "created-or-native-claims-reapplied", "expression": POD_REAPPLY_EXPRESSION}
        )
    return {
        **_webhook(
            name, endpoint=endpoint, path=path, rules=[{**rule, "scope": "Namespaced"}], policy=policy,
            timeout=USER_TIMEOUT_SECONDS,
        ),
        "namespaceSelector": selector,
        "matchConditions": conditions,
        # The patch is idempotent: run again if a later webhook changed the pod.
        "reinvocationPolicy": "IfNeeded",
    }  # fmt: skip


def _workload_webhook(*, endpoint: Endpoint, selector: dict[str, Any]) -> dict[str, Any]:
    rules = [
        {"apiGroups": ["apps"], "apiVersions": ["v1"],
         "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"]},
        {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs", "cronjobs"]},
    ]  # fmt: skip
    return {
        **_webhook(
            f"workloads.translate.{GROUP}", endpoint=endpoint, path=MUTATE_WORKLOADS_PATH,
            rules=[{**r, "operations": _WRITES, "scope": "Namespaced"} for r in rules], policy="Fail",
            timeout=USER_TIMEOUT_SECONDS,
        ),
        "namespaceSelector": selector,
        "matchConditions": [{"name": "template-names-native-claims", "expression": WORKLOAD_MATCH_EXPRESSION}],
        "reinvocationPolicy": "IfNeeded",
    }  # fmt: skip


def _pod_webhooks(endpoint: Endpoint, mode: PodWebhookMode, translate: TranslateMode) -> list[dict[str, Any]]:
    if mode == "off":
        return []
    opted_in = {"matchExpressions": [{"key": POD_WEBHOOK_LABEL, "operator": "In", "values": ["enabled"]}]}
    webhooks = [
        _pod_webhook(
            f"pods.translate.{GROUP}",
            endpoint=endpoint,
            path=MUTATE_PODS_TRANSLATE_PATH if translate == "opted-in" else MUTATE_PODS_PATH,
            selector=opted_in,
            policy="Fail",
            reapply=translate == "opted-in",
        )
    ]
    if translate == "opted-in":
        webhooks.append(_workload_webhook(endpoint=endpoint, selector=opted_in))
    if mode == "all":
        others = {
            "matchExpressions": [
                {"key": POD_WEBHOOK_LABEL, "operator": "NotIn", "values": ["enabled", "disabled"]},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
            ]
        }
        webhooks.append(
            _pod_webhook(
                f"pods.gate.{GROUP}",
                endpoint=endpoint,
                path=MUTATE_PODS_PATH,
                selector=others,
                policy="Ignore",
            )
        )
    return webhooks
