"""The operator: Kopf handlers over services, run with `draco operator` (or
`kopf run -m draco.controllers`).

Importing this package registers every handler with Kopf's default registry. The handler
modules are thin: they turn watch events into work-queue keys; the services they feed
(`lifecycle`, `scheduling`) do the work against `kube.Kube`, the one seam to the API.
"""

from __future__ import annotations

import draco.webhooks  # noqa: F401  (admission handlers, served unless `--no-webhook`)

# `startup` first: its startup handler puts the API client and probes on the memo.
from draco.controllers import startup  # isort: skip
from draco.controllers import claims, deviceclasses, scheduling

__all__ = ["claims", "deviceclasses", "scheduling", "startup"]
