"""ResourceClaimTemplate: the blueprint from which a claim is generated per pod.

Same shape as upstream ``resource.k8s.io/v1``. ``spec.metadata`` may carry only labels
and annotations (copied into the generated claim); ``spec.spec`` is copied verbatim.
"""

from __future__ import annotations

from typing import ClassVar

from draco.api.claimspec import ResourceClaimSpec
from draco.api.constants import KIND_RESOURCE_CLAIM_TEMPLATE
from draco.api.meta import ApiModel, ObjectMeta, TypedObject

__all__ = ["ResourceClaimTemplate", "ResourceClaimTemplateSpec"]


class ResourceClaimTemplateSpec(ApiModel):
    metadata: ObjectMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(TypedObject):
    KIND: ClassVar[str] = KIND_RESOURCE_CLAIM_TEMPLATE
    NAMESPACED: ClassVar[bool] = True

    spec: ResourceClaimTemplateSpec
