"""The pods of the agent's node, and what each of their containers holds of draco's devices.

An agent that serves one real node watches that node's pods (field selector
``spec.nodeName``, the kubelet's own view) so it can say which container holds which
device it prepared (`draco.agent.attribution`): for its PodResources server
(`draco.agent.podresources`) and for the info metric

    draco_device_allocation{node, driver, pool, device, uuid, namespace, pod, container, claim} 1

one series per device and container holding it (``uuid`` empty for a device without a
``uuid`` attribute), computed when scraped. Joined on ``uuid`` with dcgm-exporter's
``UUID`` label it gives any GPU metric its pod without dcgm-exporter's own Kubernetes
mapping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from draco.agent.attribution import AttributedDevice, PodDevices, pod_devices
from draco.agent.checkpoint import PREPARE_COMPLETED
from draco.agent.main import Agent
from draco.agent.prepare import NodePreparer
from draco.kube.client import PODS, Obj
from draco.kube.informer import resource_version
from draco.kube.watch import list_watch

__all__ = ["ALLOCATION_METRIC", "AllocationCollector", "NodePods"]

ALLOCATION_METRIC: Final = "draco_device_allocation"
_LABELS: Final = ("node", "driver", "pool", "device", "uuid", "namespace", "pod", "container", "claim")


class NodePods:
    """The agent's one node's pods (a watch), and their devices (`devices`)."""

    def __init__(self, agent: Agent) -> None:
        (self.node,) = agent.config.nodes
        self.agent = agent
        self.preparer: NodePreparer = agent.preparers[self.node]
        self.pods: dict[str, Obj] = {}
        self.listed = asyncio.Event()

    async def run(self) -> None:
        await list_watch(
            self.agent.kube,
            PODS,
            on_list=self._listed,
            on_event=self._event,
            field_selector=f"spec.nodeName={self.node}",
        )

    def _listed(self, items: list[Obj]) -> None:
        self.pods = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in items}
        self.listed.set()

    def _event(self, kind: str, obj: Obj) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        if kind == "DELETED":
            self.pods.pop(key, None)
        elif key not in self.pods or resource_version(self.pods[key]) <= resource_version(obj):
            self.pods[key] = obj

    # ---- what the containers hold

    def _claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        for claim in list(self.agent.claims.values()):
            meta = claim["metadata"]
            if meta.get("name") == name and meta.get("namespace") == namespace:
                return claim
        return None

    def _prepared(self, claim: Mapping[str, Any]) -> Sequence[AttributedDevice] | None:
        record = self.preparer.checkpoint.get(str(claim["metadata"].get("uid")))
        if record is None or record.state != PREPARE_COMPLETED:
            return None
        devices: list[AttributedDevice] = []
        for prepared in record.devices:
            driver = self.agent.drivers.get(prepared.driver)
            device = driver.inventory(self.node).device(prepared.device) if driver else None
            uuid = (device.attributes.get("uuid") or {}).get("string") if device else None
            devices.append(
                AttributedDevice(
                    driver=prepared.driver,
                    pool=prepared.pool,
                    device=prepared.device,
                    request=prepared.request,
                    share_id=prepared.share_id,
                    cdi_device_ids=prepared.cdi_device_ids,
                    uuid=str(uuid) if uuid else None,
                    plugin_id=driver.device_plugin_id(device) if driver and device else None,
                )
            )
        return devices

    def pod(self, namespace: str, name: str) -> PodDevices | None:
        """One pod's devices; None when the pod is not on this node or is done."""
        pod = self.pods.get(f"{namespace}/{name}")
        return pod_devices(pod, claims=self._claim, prepared=self._prepared) if pod else None

    def devices(self) -> list[PodDevices]:
        """Every pod of the node that is not done, with what its containers hold."""
        out = []
        for pod in list(self.pods.values()):
            found = pod_devices(pod, claims=self._claim, prepared=self._prepared)
            if found is not None:
                out.append(found)
        return out

    def allocatable(self) -> list[tuple[str, str]]:
        """The device-plugin names of every device this node publishes, where its driver
        names one (``GetAllocatableResources``)."""
        out: list[tuple[str, str]] = []
        for driver in self.agent.drivers.values():
            for device in driver.inventory(self.node).devices:
                plugin = driver.device_plugin_id(device)
                if plugin is not None:
                    out.append(plugin)
        return out


class AllocationCollector(Collector):
    """``draco_device_allocation``, computed from `NodePods` when scraped."""

    def __init__(self, pods: NodePods) -> None:
        self.pods = pods

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            ALLOCATION_METRIC,
            "Devices draco prepared on this node, one series per container holding one (always 1).",
            labels=_LABELS,
        )
        for pod in self.pods.devices():
            for container, claim, device in pod.devices():
                family.add_metric(
                    [
                        self.pods.node,
                        device.driver,
                        device.pool,
                        device.device,
                        device.uuid or "",
                        pod.namespace,
                        pod.name,
                        container,
                        claim.name,
                    ],
                    1,
                )
        yield family

    def describe(self) -> Iterator[Metric]:
        return iter(())
