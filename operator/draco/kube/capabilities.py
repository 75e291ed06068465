"""What the API server in front of us serves, asked of the server rather than read from its
version string.

draco's CRDs declare `selectableFields` (node agents watch only their nodes' claims with a
field selector on ``status.nodeName``), but a kube-apiserver before 1.31, or one with the
CustomResourceFieldSelectors feature gate off, drops that part of a CRD and answers a field
selector on it with 400 ("field label not supported"). A version string cannot tell which
(gates are per cluster), so the answer comes from one cheap probe: a list of the resource
with the field selector, for a value no object carries. The operator and the agent ask the
same question, so they agree on how claims are found: by the field where it is served, by
the label ``resource.draco.dev/node`` where it is not.

What no fallback can replace is refused at start by `require_supported_server`, with the
version and the feature in the message: draco needs Kubernetes 1.30 or newer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from draco.errors import KubeError, UnsupportedServerError
from draco.kube.client import Kube, Resource
from draco.logs import get_logger

__all__ = [
    "MINIMUM_VERSION",
    "PROBE_VALUE",
    "field_selector_served",
    "is_unsupported_field",
    "require_supported_server",
    "server_minor",
    "unsupported_reason",
]

log = get_logger(__name__)

#: The value a probe selects on: a valid field-selector value no node or slice is named
#: (`.invalid` is reserved), so a probe that works lists nothing.
PROBE_VALUE: Final = "draco-probe.invalid"


#: The oldest Kubernetes draco runs on, and what it needs of it.
MINIMUM_VERSION: Final = (1, 30)
_MINIMUM_NEEDS: Final = (
    "pod scheduling gates (GA in 1.30: pods wait for their devices behind one), "
    "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and webhook matchConditions "
    "(GA in 1.30: the chart's agent policy and pod webhook)"
)


def server_minor(version: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of a ``/version`` answer; managed clusters write minors like "30+".
    None when it cannot be read."""
    try:
        major = int(re.sub(r"\D", "", str(version.get("major", ""))))
        minor = int(re.sub(r"\D", "", str(version.get("minor", ""))))
    except ValueError:
        match = re.match(r"v?(\d+)\.(\d+)", str(version.get("gitVersion", "")))
        return (int(match[1]), int(match[2])) if match else None
    return major, minor


def unsupported_reason(version: Mapping[str, Any]) -> str | None:
    """Why draco cannot run against the server of `version` (None: it can)."""
    found = server_minor(version)
    if found is None or found >= MINIMUM_VERSION:
        return None
    return (
        f"Kubernetes {version.get('gitVersion') or '.'.join(map(str, found))} is too old: draco needs "
        f"{MINIMUM_VERSION[0]}.{MINIMUM_VERSION[1]} or newer for {_MINIMUM_NEEDS}"
    )


async def require_supported_server(kube: Kube) -> Mapping[str, Any]:
    """The server's version; raises `UnsupportedServerError` (its message says which
    version and which feature) where draco cannot run."""
    version = await kube.server_version()
    reason = unsupported_reason(version)
    if reason is not None:
        raise UnsupportedServerError(reason)
    return version


def is_unsupported_field(exc: KubeError) -> bool:
    """Whether `exc` is the API server refusing a field selector it does not serve."""
    return exc.status == 400 and "field label not supported" in str(exc)


async def field_selector_served(kube: Kube, resource: Resource, field: str) -> bool:
    """Whether `resource` can be listed and watched with a field selector on `field` (a CRD
    selectable field). Any other failure than "not supported" is raised: the caller cannot
    decide without an answer."""
    try:
        await kube.list(resource, field_selector=f"{field}={PROBE_VALUE}")
    except KubeError as exc:
        if not is_unsupported_field(exc):
            raise
        log.info(
            "Field selector not served; selecting by label instead",
            resource=resource.plural,
            field=field,
            error=str(exc),
        )
        return False
    return True
