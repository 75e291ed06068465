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
    """What a claim generated from the template gets."""

    metadata: ObjectMeta | None = None
    """Labels and annotations copied into each generated claim; no other metadata is allowed."""
    spec: ResourceClaimSpec
    """The spec copied verbatim into each generated claim. Required."""


class ResourceClaimTemplate(TypedObject):
    """A blueprint from which a ResourceClaim is created for each pod that references it; the
    claim is deleted with the pod. draco's copy of ``resource.k8s.io/v1`` ResourceClaimTemplate."""

    KIND: ClassVar[str] = KIND_RESOURCE_CLAIM_TEMPLATE
    NAMESPACED: ClassVar[bool] = True

    spec: ResourceClaimTemplateSpec
    """The claim to generate; immutable."""
