"""Admission for draco's kinds, served by its own process, `draco webhook`: Kopf admission
handlers, a validating one for all five kinds (the API server's rules, from
`draco.validation`, with errors named in the version the user wrote) and a mutating one
for write-time defaults and `timeAdded`; and the pod webhook, which gates pods that use
draco and translates upstream's `spec.resourceClaims` (docs/pods.md).

    handlers.py        the Kopf admission handlers, one id per webhook path
    admission.py       the decisions: verdict, defaults (CPU work in threads)
    app.py             Kopf's admission server: aiohttp over HTTPS, the CRDs' conversion,
                       probes, metrics, certificate reloading
    configuration.py   the Validating/MutatingWebhookConfiguration (failure policies)
    namespaces.py      namespace labels for the admin-access rule
    quota.py           device quota charged at claim creation
    pods.py            the pod webhook's patch: translation and the gate (pure)
    podadmission.py    the pod webhook's operations, DeviceClasses read with a short TTL
    cli.py             `draco webhook`: Kopf with these handlers and this server

Importing this package imports no web server, API client or Kopf: the simulator and the
tests use `admission_verdict` and `defaulted_spec` directly.
"""

from __future__ import annotations

from draco.webhook.admission import admission_verdict, defaulted_spec

__all__ = ["admission_verdict", "defaulted_spec"]
