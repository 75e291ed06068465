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
"""

from __future__ import annotations

from typing import Final

from draco.errors import KubeError
from draco.kube.client import Kube, Resource
from draco.logs import get_logger

__all__ = ["PROBE_VALUE", "field_selector_served", "is_unsupported_field"]

log = get_logger(__name__)

#: The value a probe selects on: a valid field-selector value no node or slice is named
#: (`.invalid` is reserved), so a probe that works lists nothing.
PROBE_VALUE: Final = "draco-probe.invalid"


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
