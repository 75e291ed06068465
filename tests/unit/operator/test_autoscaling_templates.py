"""The operator's node templates (`draco.operator.autoscaling.templates`) over an in-memory
API: a NodePool or node-template ConfigMap whose device file is invalid is refused whole,
with one ``InvalidNodeTemplate`` Event per version of it, and its node group is asked
nothing: pods that no valid template takes are told why (`service._choose`), instead of
a demand no template steers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from draco.operator.autoscaling.service import _choose
from draco.operator.autoscaling.templates import CONFIG_MAPS, NODE_POOLS, REASON_INVALID_TEMPLATE, Templates
from draco.scheduling.nodetemplates import DEVICES_ANNOTATION, TEMPLATE_KEY, TEMPLATE_LABEL, Candidate
from tests.unit.fakekube import RESOURCES, FakeKube

Obj = dict[str, Any]
GPU = "gpu.example.com"
NAMESPACE = "draco"
GPU_CLASS: Obj = {
    "apiVersion": "resource.draco.dev/v1",
    "kind": "DeviceClass",
    "metadata": {"name": GPU},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
}
#: The first device is fine, the second's capacity is no quantity: nothing of it may be used.
HALF_GOOD = [
    {
        "driver": GPU,
        "devices": [
            {"name": "gpu-0", "capacity": {"memory": {"value": "40Gi"}}},
            {"name": "gpu-1", "capacity": {"memory": {"value": "forty"}}},
        ],
    }
]
GOOD = [{"driver": GPU, "devices": [{"name": "gpu-0"}]}]


@pytest.fixture(autouse=True)
def served() -> Iterator[None]:
    """The fake API serves NodePools (Karpenter's CRD) and ConfigMaps for these tests only."""
    added = [r for r in (NODE_POOLS, CONFIG_MAPS) if r.plural not in RESOURCES]
    RESOURCES.update({r.plural: r for r in added})
    yield
    for resource in added:
        RESOURCES.pop(resource.plural, None)


def nodepool(name: str, devices: list[Obj]) -> Obj:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "annotations": {DEVICES_ANNOTATION: yaml.safe_dump(devices)}},
        "spec": {"template": {"spec": {"requirements": []}}},
    }


def config_map(name: str, devices: list[Obj]) -> Obj:
    document = {
        "apiVersion": "autoscaling.resource.draco.dev/v1alpha1",
        "kind": "NodeTemplate",
        "metadata": {"name": name},
        "spec": {"labels": {"pool": name}, "devices": devices},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {TEMPLATE_LABEL: "true"}},
        "data": {TEMPLATE_KEY: yaml.safe_dump(document)},
    }


def gpu_candidate() -> Candidate:
    claim = {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU}}]}},
    }
    return Candidate(key="ns/p", spec={}, claims=(claim,), resources={})


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_an_invalid_template_is_refused_whole_and_its_group_asked_nothing() -> None:
    kube = FakeKube()
    kube.fake.put(NODE_POOLS, nodepool("bad-pool", HALF_GOOD))
    kube.fake.put(CONFIG_MAPS, config_map("bad-group", HALF_GOOD))
    clock = Clock()
    templates = Templates(kube=kube, namespace=NAMESPACE, clock=clock)

    found = await templates.current([GPU_CLASS])
    assert not found.usable and bool(found)
    [pool_message, group_message] = found.invalid
    assert pool_message.startswith("NodePool bad-pool is invalid: ")
    assert f"[{DEVICES_ANNOTATION}][0].devices[1].capacity[memory].value" in pool_message
    assert group_message.startswith(f"ConfigMap {NAMESPACE}/bad-group: node template bad-group is invalid: ")
    assert "spec.devices[0].devices[1].capacity[memory].value" in group_message
    events = kube.fake.events(REASON_INVALID_TEMPLATE)
    assert sorted(e["regarding"]["name"] for e in events) == ["bad-group", "bad-pool"]
    assert all(e["type"] == "Warning" for e in events)

    chosen, why = _choose([gpu_candidate()], found, [GPU_CLASS], group=False)
    assert chosen == []
    assert pool_message in why and group_message in why and "asked nothing until it is fixed" in why

    # Read again (past the cache): the same versions are not told twice.
    clock.now += 60
    assert (await templates.current([GPU_CLASS])).invalid == found.invalid
    assert len(kube.fake.events(REASON_INVALID_TEMPLATE)) == 2


async def test_beside_a_valid_template_an_invalid_one_takes_no_pod() -> None:
    kube = FakeKube()
    kube.fake.put(NODE_POOLS, nodepool("good-pool", GOOD))
    kube.fake.put(CONFIG_MAPS, config_map("bad-group", HALF_GOOD))
    found = await Templates(kube=kube, namespace=NAMESPACE).current([GPU_CLASS])
    assert [t.name for t in found.usable] == ["NodePool good-pool"]
    chosen, _why = _choose([gpu_candidate()], found, [GPU_CLASS], group=False)
    assert [t.steering() for t in chosen] == [{"karpenter.sh/nodepool": "good-pool"}]


async def test_a_first_decision_sees_every_template_made_before_its_report() -> None:
    """A reading cached from before a pod's report is not its first decision's (a NodePool
    made just before the pod is seen); a later decision may reuse a recent reading; a
    NodePool being deleted is no template."""
    kube = FakeKube()
    clock = Clock()
    templates = Templates(kube=kube, namespace=NAMESPACE, clock=clock)
    assert not await templates.current([GPU_CLASS])
    kube.fake.put(NODE_POOLS, nodepool("new-pool", GOOD))
    clock.now = 0.5
    assert not await templates.current([GPU_CLASS])  # a recheck: the recent reading
    reported = clock.now
    clock.now = 2.0
    found = await templates.current([GPU_CLASS], not_before=reported)
    assert [t.name for t in found.usable] == ["NodePool new-pool"]
    going = nodepool("going", GOOD)
    going["metadata"]["finalizers"] = ["karpenter.sh/termination"]  # held while its nodes go
    kube.fake.put(NODE_POOLS, going)
    await kube.delete(NODE_POOLS, "going")
    clock.now = 10.0
    assert [t.name for t in (await templates.current([GPU_CLASS])).usable] == ["NodePool new-pool"]
