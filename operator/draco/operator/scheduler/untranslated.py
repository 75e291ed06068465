"""No silent ignore: a pod that still uses the native `spec.resourceClaims` in a namespace
draco serves gets one Warning Event saying what to do.

Such a pod was not translated by draco's pod webhook (its namespace did not opt in, the
webhook was down: its failurePolicy is Ignore, or `--translate-native-claims=off`), so
draco does not read its claims. Native DRA may be serving it, so the Event says so and
draco changes nothing; it is recorded once per pod (by uid), while the pod is unbound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import aiohttp

from draco.api.constants import CLAIMS_ANNOTATION
from draco.errors import KubeError
from draco.kube.client import Kube
from draco.logs import get_logger

__all__ = ["REASON", "UntranslatedPods", "is_untranslated"]

log = get_logger(__name__)

REASON: Final = "UntranslatedResourceClaims"
MESSAGE: Final = (
    "pod uses spec.resourceClaims, which draco does not read: label the namespace "
    "resource.draco.dev/pod-webhook=enabled so that draco's pod webhook translates new pods, or name "
    "the claims in the resource.draco.dev/claims annotation and add the scheduling gate "
    "resource.draco.dev/allocation (docs/pods.md); nothing to do if native DRA serves this pod"
)
#: Pods remembered as warned; beyond that the set starts over (an Event may repeat).
_MAX_REMEMBERED: Final = 100_000


def is_untranslated(pod: Mapping[str, Any]) -> bool:
    """Unbound, not being deleted, with native claims and no draco annotation."""
    meta = pod.get("metadata") or {}
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

    async def warn(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid or uid in self._warned or not is_untranslated(pod):
            return
        if len(self._warned) >= _MAX_REMEMBERED:
            self._warned.clear()
        self._warned.add(uid)
        try:
            await self.kube.emit_event(dict(pod), reason=REASON, message=MESSAGE, action="Allocate")
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("Could not record an Event", reason=REASON, error=str(err))
