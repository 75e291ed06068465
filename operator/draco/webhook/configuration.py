"""The Validating- and MutatingWebhookConfiguration that route draco's kinds to `draco
webhook`, built here so that the Helm chart's (charts/draco), `--print-configuration` and
the dev self-registration are one and the same.

Each configuration holds two webhooks, split by who writes and what a failure costs (the
reasoning is in docs/webhook.md):

- `user.*` — DeviceClasses, ResourceClaims, ResourceClaimTemplates, DeviceTaintRules:
  what people and their tools write. `failurePolicy: Fail`: while the webhook is down
  these writes are refused ("failed calling webhook"), because the CRD schema alone
  would store a selector that does not compile or an admin-access request from an
  unlabelled namespace. The users listed as exempt (the operator's service account,
  which creates claims from templates that were validated when they were written) skip
  it through `matchConditions`.
- `system.*` — ResourceSlices and the status of claims and taint rules: what the node
  agent and the operator write. `failurePolicy: Ignore`: while the webhook is down
  these writes go through with the CRD schema's checks only, so a crashed webhook never
  stops devices from being published or claims from being allocated and prepared.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from draco.api.constants import (
    GROUP,
    PLURAL_DEVICE_CLASSES,
    PLURAL_DEVICE_TAINT_RULES,
    PLURAL_RESOURCE_CLAIM_TEMPLATES,
    PLURAL_RESOURCE_CLAIMS,
    PLURAL_RESOURCE_SLICES,
    VERSION,
)

__all__ = [
    "CONFIGURATION_NAME",
    "MUTATE_PATH",
    "VALIDATE_PATH",
    "Endpoint",
    "webhook_configurations",
]

#: The name of both configurations (they are of different kinds).
CONFIGURATION_NAME: Final = "resource.draco.dev"
VALIDATE_PATH: Final = "/validate"
MUTATE_PATH: Final = "/mutate"
#: How long the API server waits for an answer. A user write waits at most this long for
#: a hung webhook (a dead one is refused at once). System writes (Ignore) get longer: the
#: update of a 1 MiB ResourceSlice carries two of them and takes about a second to check
#: on a busy node, and a timeout there would let it through unchecked; a hung webhook
#: delays the agent's writes by at most this much, it never blocks them.
USER_TIMEOUT_SECONDS: Final = 5
SYSTEM_TIMEOUT_SECONDS: Final = 10

_WRITES: Final = ["CREATE", "UPDATE"]
FailurePolicy = Literal["Fail", "Ignore"]


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


def _rule(resources: Sequence[str], operations: Sequence[str]) -> dict[str, Any]:
    return {
        "apiGroups": [GROUP],
        "apiVersions": [VERSION],
        "resources": list(resources),
        "operations": list(operations),
        "scope": "*",
    }


def _exemption(users: Sequence[str]) -> list[dict[str, Any]]:
    if not users:
        return []
    quoted = ", ".join("'" + u.replace("\\", "\\\\").replace("'", "\\'") + "'" for u in users)
    return [{"name": "not-draco-itself", "expression": f"!(request.userInfo.username in [{quoted}])"}]


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
    name: str = CONFIGURATION_NAME,
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
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            _webhook(
                f"user.validate.{GROUP}",
                endpoint=endpoint,
                path=VALIDATE_PATH,
                rules=[_rule(user_kinds, _WRITES)],
                policy="Fail",
                timeout=USER_TIMEOUT_SECONDS,
                exempt_users=exempt_users,
            ),
            _webhook(
                f"system.validate.{GROUP}",
                endpoint=endpoint,
                path=VALIDATE_PATH,
                rules=[_rule([PLURAL_RESOURCE_SLICES], _WRITES), _rule(statuses, ["UPDATE"])],
                policy="Ignore",
                timeout=SYSTEM_TIMEOUT_SECONDS,
            ),
        ],
    }
    mutating = {
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
    return [validating, mutating]
