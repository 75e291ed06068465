"""Admission for draco's kinds, served by its own process, `draco webhook`: a validating
webhook for all five kinds (the API server's rules, from `draco.validation`) and a
mutating one for write-time defaults and `timeAdded`.

    admission.py       AdmissionReview in, verdict or JSONPatch out (CPU work in threads)
    app.py             the aiohttp HTTPS server, probes, metrics, certificate reloading
    configuration.py   the Validating/MutatingWebhookConfiguration (failure policies)
    namespaces.py      namespace labels for the admin-access rule
    cli.py             `draco webhook`

Importing this package imports no web server or API client: the operator, the
simulator and the tests use `admission_verdict` and `defaulting_patch` directly.
"""

from __future__ import annotations

from draco.webhook.admission import admission_verdict, defaulting_patch

__all__ = ["admission_verdict", "defaulting_patch"]
