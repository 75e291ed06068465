"""The operator: Kopf handlers over services, run with `draco operator` (or
`kopf run -m draco.controllers`).

Importing this package registers every handler with Kopf's default registry. The handler
modules are thin: they turn watch events into work-queue keys; the services they feed
(`lifecycle`, `scheduling`) do the work against `kube.Kube`, the one seam to the API.
"""

import draco.controllers.deviceclasses  # noqa: F401  (DeviceClass status handlers)
