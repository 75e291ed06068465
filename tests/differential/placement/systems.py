"""The two systems, each on a control plane of its own, and what they did with a pod.

- ``upstream``: kube-scheduler (default profile, its DRA plugin allocating the
  ``resource.k8s.io/v1`` claims), logging every node's score (``--vmodule
  schedule_one=10``: the lines "Calculated node's final score for pod" and "Plugin scored
  node for pod" of its scheduling cycle) so that ties can be read from upstream itself;
- ``draco``: ``draco operator`` (defaults, every namespace) and the same kube-scheduler
  binding what the operator un-gates.

Both kube-schedulers run with ``percentageOfNodesToScore: 100``: with fewer than 100
nodes (as here) upstream scores every feasible node anyway, and from 100 on it would stop
at a sample of feasible nodes, so its choice would depend on the order it met them.

Each system is watched once for all cases (pods, and Events for draco's
``FailedScheduling``). A case's incoming pod has an :class:`Outcome`:

- ``bound``: ``spec.nodeName`` set (with the claim's devices);
- ``unschedulable``: upstream's ``PodScheduled=False`` (reason Unschedulable), or draco's
  ``FailedScheduling`` Event while the pod still carries the gate;
- ``refused`` (draco only): un-gated (pinned) but kube-scheduler says Unschedulable;
- ``timeout``: none of these within the timeout.

Both systems retry an unschedulable pod after a backoff (1 s at first in both), so a
verdict short of ``bound`` is only taken once it has held for a grace period (3 s,
``refused`` 10 s, both times ``DRACO_TEST_TIMEOUT_SCALE``): long enough for a retry that
follows a late watch event, and for draco to notice a refused pod and place it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from draco.kube.client import (
    DEVICE_CLASSES,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Kube,
    KubeError,
    NotFoundError,
    Resource,
    connect,
)
from draco.tools.dev.components import (
    NATIVE_CLAIMS,
    NATIVE_CLASSES,
    NATIVE_SLICES,
    start_operator,
    start_scheduler,
    stop,
)
from draco.tools.dev.controlplane import ControlPlane

from . import render
from .generator import Json

SYSTEMS = ("upstream", "draco")
ROOT = Path(__file__).resolve().parents[3]
SCHEDULER_CONFIG = "percentageOfNodesToScore: 100\n"


def scale() -> float:
    return float(os.environ.get("DRACO_TEST_TIMEOUT_SCALE") or 1)


@dataclass
class Outcome:
    kind: str  # bound, unschedulable, refused, timeout
    #: Where the pod is bound; for ``refused``, the node draco pinned it to.
    node: str = ""
    #: The claim's allocated devices: the placement's, or those an unbound pod holds.
    devices: list[tuple[str, str, str, str]] = field(default_factory=list)
    message: str = ""
    seconds: float = 0.0
    #: draco's pins that were refused on the way (node, words), even when the safety net
    #: placed the pod again afterwards.
    refusals: list[tuple[str, str]] = field(default_factory=list)

    def json(self) -> Json:
        return {
            "kind": self.kind,
            "node": self.node,
            "devices": [list(d) for d in self.devices],
            "message": self.message,
            "seconds": round(self.seconds, 2),
            "refused pins": [list(r) for r in self.refusals],
        }


@dataclass
class Cycle:
    """One scheduling cycle of upstream that scored nodes: each node's total, and each
    plugin's score per node."""

    totals: dict[str, int] = field(default_factory=dict)
    plugins: dict[str, dict[str, int]] = field(default_factory=dict)


_PLUGIN_SCORE = re.compile(
    r'"Plugin scored node for pod" pod="([^"]+)" plugin="([^"]+)" node="([^"]+)" score=(-?\d+)'
)
_FINAL_SCORE = re.compile(
    r'"Calculated node\'s final score for pod" pod="([^"]+)" node="([^"]+)" score=(-?\d+)'
)


class ScoreLog:
    """Reads kube-scheduler's score lines as the log grows: the cycles of each pod."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""
        self.cycles: dict[str, list[Cycle]] = {}

    def read(self) -> None:
        with self.path.open("r", errors="replace") as log:
            log.seek(self.offset)
            text = self.partial + log.read()
            self.offset = log.tell()
        lines = text.split("\n")
        self.partial = lines.pop()
        for line in lines:
            if "scored node" in line:
                match = _PLUGIN_SCORE.search(line)
                if match:
                    pod, plugin, node, score = match.groups()
                    cycles = self.cycles.setdefault(pod, [])
                    if not cycles or cycles[-1].totals:
                        cycles.append(Cycle())
                    cycles[-1].plugins.setdefault(node, {})[plugin] = int(score)
            elif "final score" in line:
                match = _FINAL_SCORE.search(line)
                if match:
                    pod, node, score = match.groups()
                    cycles = self.cycles.setdefault(pod, [])
                    if not cycles or node in cycles[-1].totals:
                        cycles.append(Cycle())
                    cycles[-1].totals[node] = int(score)

    def pop(self, pod: str) -> list[Cycle]:
        self.read()
        return self.cycles.pop(pod, [])


@dataclass
class Watched:
    pod: Json | None = None
    failed: str = ""  # draco's latest FailedScheduling note for this pod's UID
    #: Every pin of draco's that kube-scheduler (or a kubelet) refused, whatever draco did
    #: next: the node and the words (the pod seen pinned and refused, or draco's
    #: PlacementRefused Event about a pod of this name: the safety net makes it again).
    refusals: list[tuple[str, str]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class System:
    """One system on its control plane: objects in, outcomes out."""

    def __init__(self, name: str, assets: Path, workdir: Path) -> None:
        self.name = name
        self.assets = assets
        self.workdir = workdir
        self.plane = ControlPlane(binaries=assets)
        self.kube: Kube | None = None
        self.processes: dict[str, Any] = {}
        self.native = name == "upstream"
        self.claims: Resource = NATIVE_CLAIMS if self.native else RESOURCE_CLAIMS
        self.slices: Resource = NATIVE_SLICES if self.native else RESOURCE_SLICES
        self.classes: Resource = NATIVE_CLASSES if self.native else DEVICE_CLASSES
        self.watched: dict[str, Watched] = {}
        self.failed_by_uid: dict[str, str] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.scores = ScoreLog(workdir / "kube-scheduler.log") if self.native else None

    # --- life -------------------------------------------------------------------------------

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.plane.start)
        if not self.native:
            await asyncio.to_thread(self.plane.kubectl, "apply", "--server-side", "-f", str(ROOT / "crds"))
            await asyncio.to_thread(
                self.plane.kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"
            )
        # connect() reads KUBECONFIG; the session's own (e2e tests beside) is put back.
        old = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(self.plane.kubeconfig)
        try:
            self.kube = await connect()
        finally:
            if old is None:
                del os.environ["KUBECONFIG"]
            else:
                os.environ["KUBECONFIG"] = old
        for body in render.classes():
            await self.kube.create(self.classes, body)
        args = ["--vmodule=schedule_one=10"] if self.native else []
        self.processes["kube-scheduler"] = await asyncio.to_thread(
            start_scheduler, self.plane, self.assets, self.workdir, config=SCHEDULER_CONFIG, args=args
        )
        if not self.native:
            self.processes["draco-operator"], _ = await asyncio.to_thread(
                start_operator, self.plane, self.workdir
            )
        self.tasks.append(asyncio.create_task(self._watch(PODS, self._on_pod)))
        if not self.native:
            self.tasks.append(asyncio.create_task(self._watch(EVENTS, self._on_event)))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.kube is not None:
            await self.kube.close()
        for process in self.processes.values():
            await asyncio.to_thread(stop, process)
        await asyncio.to_thread(self.plane.stop)

    def logs(self) -> list[Path]:
        return sorted(self.workdir.glob("*.log"))

    # --- watches ----------------------------------------------------------------------------

    async def _watch(self, resource: Resource, handle: Any) -> None:
        assert self.kube is not None
        while True:
            try:
                items, version = await self.kube.list_with_version(resource)
                for item in items:
                    handle(item)
                while True:
                    async for event in self.kube.watch(
                        resource, resource_version=version, timeout_seconds=300
                    ):
                        version = event.object.get("metadata", {}).get("resourceVersion") or version
                        if event.type in ("ADDED", "MODIFIED"):
                            handle(event.object)
            except asyncio.CancelledError:
                raise
            except KubeError:
                await asyncio.sleep(0.5)  # a 410 Gone or a hiccup: list again

    def _on_pod(self, pod: Json) -> None:
        meta = pod["metadata"]
        watched = self.watched.get(f"{meta['namespace']}/{meta['name']}")
        if watched is not None:
            watched.pod = pod
            watched.failed = self.failed_by_uid.get(meta.get("uid", ""), "")
            watched.changed.set()

    def _on_event(self, event: Json) -> None:
        if event.get("reportingController") != "draco-operator":
            return
        regarding = event.get("regarding") or {}
        if event.get("reason") == "PlacementRefused":
            refused = self.watched.get(f"{regarding.get('namespace')}/{regarding.get('name')}")
            if refused is not None:
                refused.refusals.append(("", str(event.get("note", ""))))
                refused.changed.set()
            return
        if event.get("reason") != "FailedScheduling":
            return
        self.failed_by_uid[regarding.get("uid", "")] = event.get("note", "")
        watched = self.watched.get(f"{regarding.get('namespace')}/{regarding.get('name')}")
        if (
            watched is not None
            and watched.pod is not None
            and watched.pod["metadata"].get("uid") == regarding.get("uid")
        ):
            watched.failed = event.get("note", "")
            watched.changed.set()

    # --- a case -----------------------------------------------------------------------------

    async def apply(self, case: Json, tag: str) -> None:
        """Everything of the case but the incoming pod and its claim."""
        kube = self.kube
        assert kube is not None
        await asyncio.gather(*(kube.create(NAMESPACES, n) for n in render.namespaces(case, tag)))

        async def node(body: Json) -> None:
            await kube.create(NODES, body)
            await kube.patch(
                NODES, body["metadata"]["name"], {"spec": {"taints": body["spec"]["taints"] or None}}
            )

        claims = render.existing_claims(case, tag)
        await asyncio.gather(
            *(node(n) for n in render.nodes(case, tag)),
            *(kube.create(self.slices, s) for s in render.slices(case, tag)),
            *(kube.create(self.claims, body) for body, _status in claims),
        )
        pods = await asyncio.gather(
            *(kube.create(PODS, p) for p in render.existing_pods(case, tag, self.name))
        )
        uids = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"] for p in pods}

        async def allocate(body: Json, status: Json) -> None:
            meta = body["metadata"]
            pod = meta["name"].removesuffix(f"-{render.CLAIM}")
            reserved = [{"resource": "pods", "name": pod, "uid": uids[(meta["namespace"], pod)]}]
            await kube.patch(
                self.claims,
                meta["name"],
                {"status": {**status, "reservedFor": reserved}},
                namespace=meta["namespace"],
                subresource="status",
            )

        await asyncio.gather(*(allocate(body, status) for body, status in claims))

    async def submit(self, case: Json, tag: str) -> None:
        """The incoming pod's claim, then the pod."""
        assert self.kube is not None
        pod = render.incoming_pod(case, tag, self.name)
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self.watched[key] = Watched()
        await self.kube.create(self.claims, render.incoming_claim(case, tag))
        await self.kube.create(PODS, pod)

    def _verdict(self, pod: Json, failed: str) -> tuple[str, str]:
        """(kind, message) of the pod as it is now; kind "" while undecided."""
        if pod["spec"].get("nodeName"):
            return "bound", ""
        gated = any(g.get("name") == render.GATE for g in pod["spec"].get("schedulingGates") or [])
        scheduled = next(
            (c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), {}
        )
        refused = scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
        if self.native:
            return ("unschedulable", scheduled.get("message", "")) if refused else ("", "")
        if gated and failed:
            return "unschedulable", failed
        if not gated and refused:
            return "refused", scheduled.get("message", "")
        return "", ""

    async def outcome(
        self, case: Json, tag: str, *, within_s: float, grace: float, refused_grace: float
    ) -> Outcome:
        assert self.kube is not None
        namespace = render.namespace_name(tag, case["pod"]["namespace"])
        key = f"{namespace}/{case['pod']['name']}"
        watched = self.watched[key]
        started = time.monotonic()
        deadline = started + within_s
        since: tuple[str, float] | None = None
        while True:
            watched.changed.clear()
            kind, message = self._verdict(watched.pod, watched.failed) if watched.pod else ("", "")
            if kind == "refused" and watched.pod is not None:
                pin = (_pinned_node(watched.pod), message)
                if pin not in watched.refusals:
                    watched.refusals.append(pin)
            now = time.monotonic()
            if kind == "bound":
                break
            if kind and (since is None or since[0] != kind):
                since = (kind, now)
            elif not kind:
                since = None
            wait_until = deadline
            if since is not None:
                wait_until = min(deadline, since[1] + (refused_grace if kind == "refused" else grace))
                if now >= wait_until:
                    break
            if now >= deadline:
                kind, message = "timeout", f"{kind or 'no verdict'}: {message}"
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watched.changed.wait(), timeout=max(0.01, wait_until - now))
        # The claim's devices: the placement's, or those an unbound pod holds.
        claim = await self.kube.get_or_none(
            self.claims, render.claim_name(case["pod"]["name"]), namespace=namespace
        )
        node = ""
        if watched.pod is not None and kind == "bound":
            node = watched.pod["spec"]["nodeName"]
        elif watched.pod is not None and kind == "refused":
            node = _pinned_node(watched.pod)
        return Outcome(
            kind,
            node=node,
            devices=render.device_results(claim),
            message=message,
            seconds=time.monotonic() - started,
            refusals=list(watched.refusals),
        )

    def cycles(self, case: Json, tag: str) -> list[Any]:
        """Upstream's scoring cycles of the case's incoming pod (none when only one node was feasible)."""
        if self.scores is None:
            return []
        return self.scores.pop(
            f"{render.namespace_name(tag, case['pod']['namespace'])}/{case['pod']['name']}"
        )

    async def cleanup(self, case: Json, tag: str) -> None:
        """Delete the case's pods (at once: no kubelet confirms), claims (finalizers off),
        slices and nodes. The namespaces stay: nothing here would finish deleting them."""
        kube = self.kube
        assert kube is not None
        pods = [(render.namespace_name(tag, p["namespace"]), p["name"]) for p in case["existing"]]
        pods.append((render.namespace_name(tag, case["pod"]["namespace"]), case["pod"]["name"]))
        self.watched.pop(f"{pods[-1][0]}/{pods[-1][1]}", None)
        await asyncio.gather(*(self._delete_now(PODS, name, namespace) for namespace, name in pods))
        claims = [
            (render.namespace_name(tag, p["namespace"]), render.claim_name(p["name"]))
            for p in case["existing"]
            if p["devices"]
        ]
        claims.append((pods[-1][0], render.claim_name(case["pod"]["name"])))

        async def claim(namespace: str, name: str) -> None:
            with contextlib.suppress(NotFoundError):
                await kube.patch(self.claims, name, {"metadata": {"finalizers": None}}, namespace=namespace)
            await kube.delete(self.claims, name, namespace=namespace)

        await asyncio.gather(
            *(claim(namespace, name) for namespace, name in claims),
            *(
                kube.delete(self.slices, render.node_name(tag, n["name"]))
                for n in case["nodes"]
                if n["devices"]
            ),
            *(kube.delete(NODES, render.node_name(tag, n["name"])) for n in case["nodes"]),
        )

    async def _delete_now(self, resource: Resource, name: str, namespace: str) -> None:
        """DELETE with ``gracePeriodSeconds=0``: a bound pod goes at once, no kubelet confirms."""
        assert self.kube is not None
        with contextlib.suppress(ApiException):  # 404: already gone
            await self.kube.api.call_api(
                resource.path(namespace=namespace, name=name),
                "DELETE",
                query_params=[("gracePeriodSeconds", 0)],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _request_timeout=60,
            )


def _pinned_node(pod: Json) -> str:
    """The node of draco's pin: the ``metadata.name In [node]`` field requirement every
    term of the pod's required node affinity carries ("" when there is none)."""
    required = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    common: set[str] | None = None
    for term in required.get("nodeSelectorTerms") or []:
        names = {
            r["values"][0]
            for r in term.get("matchFields") or []
            if r["key"] == "metadata.name" and r["operator"] == "In" and len(r.get("values") or []) == 1
        }
        common = names if common is None else common & names
    return sorted(common)[0] if common else ""
