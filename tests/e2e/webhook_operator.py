"""A minimal operator for the webhook e2e tests: draco's admission handlers served on the
port named by DRACO_TEST_WEBHOOK_PORT (the real operator calls the same function)."""

from __future__ import annotations

import os
from typing import Any

import kopf

import draco.webhook
from draco.kube.login import kopf_connection_info
from draco.webhook import configure_admission

assert draco.webhook.handlers  # registers the handlers


@kopf.on.login()
async def login(**_: Any) -> kopf.ConnectionInfo:
    # The operator's own credentials (draco.kube.config's order, KUBECONFIG read now).
    return await kopf_connection_info()


@kopf.on.startup()
def serve_admission(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10
    configure_admission(settings, host="127.0.0.1", port=int(os.environ["DRACO_TEST_WEBHOOK_PORT"]))
