"""The operator: Kopf handlers over services, run with `draco operator`.

Importing this package registers every handler with Kopf's default registry. The handler
modules are thin: they turn watch events into work-queue keys; the services they feed
(`resourceclaim.lifecycle`, `scheduler.allocation`) do the work against `draco.kube`.

    resourceclaim/       claims from templates, reservation, deallocation, cleanup
    scheduler/           allocation of gated pods: pin to a node, remove the gate
    deviceclassstatus/   DeviceClass status (selected, allocated, valid)
    devicetainteviction/ pods using devices with NoExecute taints; DeviceTaintRule status
"""

from __future__ import annotations

# `startup` first: its startup handler puts the API client and probes on the memo.
from draco.operator import startup  # isort: skip
from draco.operator.deviceclassstatus import handlers as deviceclassstatus
from draco.operator.devicetainteviction import handlers as devicetainteviction
from draco.operator.resourceclaim import handlers as resourceclaim
from draco.operator.scheduler import handlers as scheduler

__all__ = ["deviceclassstatus", "devicetainteviction", "resourceclaim", "scheduler", "startup"]
