"""No silent ignore: a pod that still uses the native `spec.resourceClaims` in a namespace
draco serves gets one Warning Event saying what happened and what to do.

Such a pod was not translated by draco's pod webhook, and draco does not read its claims.
Why depends on the namespace's label `resource.draco.dev/pod-webhook` (read when the Event
is written; the operator cannot see the webhook's configuration):

- `enabled`: the namespace opted in, so the webhook should have translated the pod when it
  was created; there it fails closed (a down webhook refuses the pod), so the pod came
  before the label or before draco's webhook configuration, or the webhook runs with
  native-claim translation off;
- `disabled`: the namespace opted out, the webhook never sees its pods;
- no label: the namespace did not opt in.

Native DRA may be serving the pod, so the Event says so and draco changes nothing; it is
recorded once per pod (by uid), while the pod is unbound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import aiohttp

from draco.api.bodies import meta_of
from draco.api.constants import CLAIMS_ANNOTATION, POD_WEBHOOK_LABEL
from draco.api.corebodies import PodBody
from draco.errors import KubeError
from draco.kube.client import NAMESPACES, Kube
from draco.logs import get_logger

__all__ = ["REASON", "UntranslatedPods", "is_untranslated", "untranslated_message"]

log = get_logger(__name__)

REASON: Final = "UntranslatedResourceClaims"
_LEAD: Final = "pod uses spec.resourceClaims, which draco does not read"
_BY_HAND: Final = (
    "name the claims in the resource.draco.dev/claims annotation and add the scheduling gate "
    "resource.draco.dev/allocation (docs/pods.md)"
)
_NATIVE: Final = "nothing to do if native DRA serves this pod"
#: Pods remembered as warned; beyond that the set starts over (an Event may repeat).
_MAX_REMEMBERED: Final = 100_000


def untranslated_message(namespace: Mapping[str, Any] | None) -> str:
    """The Event's note for an untranslated pod in `namespace` (None: it could not be read)."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    label = labels.get(POD_WEBHOOK_LABEL)
    if namespace is None:
        why = (
            f"draco's pod webhook did not translate it: the namespace is not labelled {POD_WEBHOOK_LABEL}=enabled, "
            "or was not when the pod was created"
        )
        fix = f"label the namespace {POD_WEBHOOK_LABEL}=enabled or check the webhook, then recreate the pod, or {_BY_HAND}"
    elif label == "enabled":
        why = (
            f"the namespace is labelled {POD_WEBHOOK_LABEL}=enabled, but draco's pod webhook did not translate "
            "the pod when it was created: the pod was created before the namespace was labelled or before "
            "draco's webhook configuration was installed (where it is, a pod it cannot translate is refused), "
            "or the webhook runs with native-claim translation off (webhook.translateNativeClaims=off)"
        )
        fix = f"check the webhook's configuration, then delete and recreate the pod, or {_BY_HAND}"
    elif label == "disabled":
        why = f"the namespace is labelled {POD_WEBHOOK_LABEL}=disabled, so draco's pod webhook does not see its pods"
        fix = f"label it {POD_WEBHOOK_LABEL}=enabled and recreate the pod, or {_BY_HAND}"
    else:
        why = f"the namespace is not labelled {POD_WEBHOOK_LABEL}=enabled, so draco's pod webhook does not translate its pods"
        fix = f"label it {POD_WEBHOOK_LABEL}=enabled so that new pods are translated, and recreate the pod, or {_BY_HAND}"
    return f"{_LEAD}: {why}; {fix}; {_NATIVE}"


def is_untranslated(pod: PodBody) -> bool:
    """Unbound, not being deleted, with native claims and no draco annotation."""
    meta = meta_of(pod)
    spec = pod.get("spec") or {}
    return bool(
        spec.get("resourceClaims")
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and CLAIMS_ANNOTATION not in (meta.get("annotations") or {})
    )


class UntranslatedPods:
    """`await warn(pod)` for every pod event of a served namespace."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._warned: set[str] = set()

    async def warn(self, pod: PodBody) -> None:
        uid = meta_of(pod).get("uid") or ""
        if not uid or uid in self._warned or not is_untranslated(pod):
            return
        if len(self._warned) >= _MAX_REMEMBERED:
            self._warned.clear()
        self._warned.add(uid)
        namespace_name = meta_of(pod).get("namespace") or ""
        try:
            namespace = await self.kube.get_or_none(NAMESPACES, namespace_name)
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            log.warning(
                "Could not read the namespace of an untranslated pod",
                namespace=namespace_name,
                error=str(err),
            )
            namespace = None
        message = untranslated_message(namespace)
        try:
            await self.kube.emit_event(pod, reason=REASON, message=message, action="Allocate")
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("Could not record an Event", reason=REASON, error=str(err))
