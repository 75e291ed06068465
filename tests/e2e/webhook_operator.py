"""A minimal operator for the webhook e2e tests: draco's admission handlers served on the
port named by DRACO_TEST_WEBHOOK_PORT (the real operator calls the same function)."""

from __future__ import annotations

import os
from typing import Any

import kopf

import draco.webhook
from draco.webhook import configure_admission

assert draco.webhook.handlers  # registers the handlers


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # KUBECONFIG is set by the test session after kubernetes_asyncio was imported, so its
    # default path is stale; Kopf's own kubeconfig reader looks at the variable now.
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def serve_admission(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10
    configure_admission(settings, host="127.0.0.1", port=int(os.environ["DRACO_TEST_WEBHOOK_PORT"]))
