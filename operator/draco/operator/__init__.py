"""The operator, run with `draco operator` (or ``kopf run -m draco.operator``): Kopf running
one composition root.

Importing this package registers Kopf's login, startup and cleanup handlers
(`startup.py`) on Kopf's default registry; `root.Operator` puts the process together: one
API client, one informer per kind (`informers.py`), and the controllers, each a package
with a ``handlers.py`` (its reactions, as Kopf event handlers fed by the informers:
`feed.py`) and a ``controller.py`` of one shape over a service that does the work against
`draco.kube`:

    resourceclaim/       claims from templates, reservation, deallocation, cleanup
    scheduler/           allocation of gated pods: pin to a node, remove the gate
    deviceclassstatus/   DeviceClass status (selected, allocated, valid)
    devicetainteviction/ pods using devices with NoExecute taints; DeviceTaintRule status
    resourcequota/       device quota's status.used
"""

from __future__ import annotations

from draco.operator import startup

__all__ = ["startup"]
