"""The operator, run with `draco operator`: Kopf's frame around one composition root.

Importing this package registers Kopf's login, startup and cleanup handlers
(`startup.py`), nothing else; `root.Operator` puts the process together: one API client,
one informer per kind (`informers.py`), and the controllers, each a package with a
``controller.py`` of one shape over a service that does the work against `draco.kube`:

    resourceclaim/       claims from templates, reservation, deallocation, cleanup
    scheduler/           allocation of gated pods: pin to a node, remove the gate
    deviceclassstatus/   DeviceClass status (selected, allocated, valid)
    devicetainteviction/ pods using devices with NoExecute taints; DeviceTaintRule status
"""

from __future__ import annotations

from draco.operator import startup

__all__ = ["startup"]
