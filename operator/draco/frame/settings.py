"""The Kopf settings of draco's two Kopf processes, each with the reason it is set.

Peering is not set here: both processes run Kopf `standalone` (the operator's replicas
take turns through draco's Lease, `draco.kube.leader`; webhooks are stateless and run
side by side). See docs/architecture.md, "Kopf", for what each process has Kopf do.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Final

import kopf

__all__ = ["RefusalsLoggedElsewhere", "RetryForever", "configure_kopf"]

#: How long the API server keeps a watch request of Kopf's open, and how long Kopf waits
#: for any line of it (bookmarks come about every minute) before it reconnects.
WATCH_SERVER_TIMEOUT_S: Final = 270
WATCH_INACTIVITY_S: Final = 300


class RetryForever:
    """Kopf's backoffs for a failed API request, never running out: 0.5 s doubling to 10 s.

    Kopf gives up on a request after its last backoff (about a minute of them by default)
    and the task that made it ends, which ends the operator. draco's own clients wait out
    an API server that is away (`draco.kube.reachable`); Kopf's requests in draco's
    processes (the scan of the API's resources, the watch of CRDs) do the same, so a long
    outage never makes a process exit."""

    def __iter__(self) -> Iterator[float]:
        return itertools.chain((0.5, 1.0, 2.0, 4.0, 8.0), itertools.repeat(10.0))


def configure_kopf(settings: kopf.OperatorSettings, *, watches_crds: bool) -> kopf.OperatorSettings:
    """`settings` as draco's processes run Kopf.

    `watches_crds`: whether Kopf keeps a watch on CRDs after its start-up scan (the webhook:
    its admission handlers find a request's resource in what the scan and the watch
    found, so a CRD installed or given a version later is served; the operator has no
    handler on a resource Kopf watches, so the watch would have no reader)."""
    # Kopf posts an Event per log line of a handler at or above this level. draco's Events
    # are explicit, with upstream's reasons, and repeats aggregate into a series
    # (`draco.kube.client.Kube.emit_event`), which Kopf's posting does not do.
    settings.posting.enabled = False
    settings.networking.error_backoffs = RetryForever()
    settings.scanning.disabled = not watches_crds
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_S
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT_S + 30
    settings.watching.connect_timeout = 30
    settings.watching.inactivity_timeout = WATCH_INACTIVITY_S
    # Kopf logs every handler's success at INFO: a line per admission request. DEBUG keeps them.
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    return settings


class RefusalsLoggedElsewhere(logging.Filter):
    """Drops Kopf's log line for an admission handler's refusal.

    Kopf logs a handler that raised `kopf.AdmissionError` as an error ("... failed
    permanently: <message>"), as it logs any handler's permanent failure. A refused write is
    the writer's mistake, not the webhook's: `draco webhook`'s server logs each refusal at
    info ("Rejected a write", with the user and the message). A handler that failed
    unexpectedly is still logged by Kopf, with its traceback (those records carry one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and record.exc_info is None)
