"""Kopf's answer to an AdmissionReview, as `draco webhook` runs it, without a cluster.

`kopf.operator` learns the cluster's resources by scanning the API before its admission
server starts; here the resources draco's handlers serve are given instead, and Kopf's
own request-answering function (what it hands its admission server) is bound over
`draco.webhook.handlers.REGISTRY`, as Kopf binds it. Kopf's internals, for tests only.
"""

from __future__ import annotations

import functools
from typing import Any

import kopf
from kopf._cogs.structs import references
from kopf._core.engines import admission, indexing
from kopf._core.reactor import inventory, observation

from draco.api.constants import GROUP
from draco.api.crds import CRD_SPECS
from draco.frame.memories import AdmissionMemories
from draco.frame.settings import configure_kopf
from draco.validation import NAMESPACED_KINDS
from draco.webhook.handlers import REGISTRY

_WORKLOADS = (
    ("apps", "deployments", "Deployment"),
    ("apps", "replicasets", "ReplicaSet"),
    ("apps", "statefulsets", "StatefulSet"),
    ("apps", "daemonsets", "DaemonSet"),
    ("batch", "jobs", "Job"),
    ("batch", "cronjobs", "CronJob"),
)


#: The plural of each of draco's kinds (what an AdmissionReview's `resource` names).
PLURALS = {spec.model.KIND: spec.plural for spec in CRD_SPECS}


def served_resources() -> set[references.Resource]:
    """What Kopf's scan would find of the resources draco's handlers name."""
    found = {
        references.Resource(
            group=spec.group,
            version=version,
            plural=spec.plural,
            kind=spec.model.KIND,
            namespaced=spec.model.KIND in NAMESPACED_KINDS or spec.group != GROUP,
            subresources=frozenset({"status"}),
            preferred=version == spec.versions[0],
        )
        for spec in CRD_SPECS
        for version in spec.versions
    }
    found.add(references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True))
    for group, plural, kind in _WORKLOADS:
        found.add(references.Resource(group=group, version="v1", plural=plural, kind=kind, namespaced=True))
    return found


def admission_fn(
    memo: dict[str, Any] | None = None, *, memories: inventory.ResourceMemories | None = None
) -> kopf.WebhookFn:
    """Kopf's function answering a review with draco's handlers (`memo`: what the CLI puts
    on Kopf's memo)."""
    insights = references.Insights()
    # What Kopf keeps of its scan: the resources the handlers' selectors match.
    observation.revise_resources(
        group=None, insights=insights, registry=REGISTRY, resources=served_resources()
    )
    return functools.partial(
        admission.serve_admission_request,
        settings=configure_kopf(kopf.OperatorSettings(), watches_crds=True),
        registry=REGISTRY,
        insights=insights,
        memories=memories if memories is not None else AdmissionMemories(),
        memobase=kopf.Memo(memo or {}),
        indices=indexing.OperatorIndexers().indices,
    )
