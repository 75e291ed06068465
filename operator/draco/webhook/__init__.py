"""Admission for draco's kinds: a validating webhook for all five (the API server's rules,
from `draco.validation`) and a mutating one for write-time defaults and `timeAdded`.

Importing this package registers the Kopf handlers; the operator calls
`configure_admission(settings, host=..., port=...)` from its startup handler to serve
them (self-signed certificate and Kopf-managed webhook configurations by default).
"""

from __future__ import annotations

from draco.webhook import handlers
from draco.webhook.handlers import admission_verdict, defaulting_patch
from draco.webhook.namespaces import use_api_client
from draco.webhook.server import MANAGED_CONFIGURATION_NAME, configure_admission

__all__ = [
    "MANAGED_CONFIGURATION_NAME",
    "admission_verdict",
    "configure_admission",
    "defaulting_patch",
    "handlers",
    "use_api_client",
]
