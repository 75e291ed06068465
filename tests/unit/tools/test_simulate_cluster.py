"""The cluster `draco simulate` builds from its input: nodes, advertised extended
resources, the pods that occupy nodes, namespaces, storage objects and workload selectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draco.allocator.inventory import Inventory
from draco.scheduling.cluster import Snapshot
from draco.tools.simulation.cluster import UNLIMITED, UNREPORTED_PODS, snapshot
from draco.tools.simulation.inputs import load

Obj = dict[str, Any]

INPUT = """
apiVersion: v1
kind: List
items:
- apiVersion: resource.draco.dev/v1
  kind: DeviceClass
  metadata: {name: gpu}
  spec:
    extendedResourceName: example.com/gpu
    selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]
- apiVersion: resource.draco.dev/v1
  kind: ResourceSlice
  metadata: {name: sliced-gpus}
  spec:
    driver: gpu.example.com
    nodeName: sliced
    pool: {name: sliced, generation: 1, resourceSliceCount: 1}
    devices: [{name: gpu-0}, {name: gpu-1}]
- apiVersion: v1
  kind: Node
  metadata: {name: reported, labels: {zone: a}}
  spec:
    taints: [{key: dedicated, value: infra, effect: NoSchedule}]
  status:
    allocatable:
      cpu: "8"
      memory: 32Gi
      pods: "20"
      deviceclass.resource.draco.dev/gone: "3"
    images: [{names: [registry.example/app:1], sizeBytes: 1000}]
- apiVersion: v1
  kind: Node
  metadata: {name: handwritten}
- apiVersion: v1
  kind: Namespace
  metadata: {name: team-a, labels: {team: a}}
- apiVersion: v1
  kind: Pod
  metadata: {name: bound, namespace: team-a}
  spec:
    nodeName: reported
    containers: [{name: c, image: registry.example/app:1, resources: {requests: {cpu: "2"}}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: pinned}
  spec:
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchFields: [{key: metadata.name, operator: In, values: [handwritten]}]
    containers: [{name: c, image: app}]
- apiVersion: v1
  kind: Pod
  metadata: {name: gated, namespace: team-a}
  spec:
    schedulingGates: [{name: resource.draco.dev/allocation}]
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchFields: [{key: metadata.name, operator: In, values: [handwritten]}]
    containers: [{name: c, image: app}]
- apiVersion: v1
  kind: Pod
  metadata: {name: done, namespace: team-a}
  spec: {nodeName: reported, containers: [{name: c, image: app}]}
  status: {phase: Succeeded}
- apiVersion: v1
  kind: Pod
  metadata: {name: simulated, namespace: team-a}
  spec: {nodeName: reported, containers: [{name: c, image: app}]}
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {name: data, namespace: team-a}
  spec: {volumeName: vol}
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: vol}
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: local}
  provisioner: kubernetes.io/no-provisioner
- apiVersion: storage.k8s.io/v1
  kind: CSINode
  metadata: {name: reported}
- apiVersion: storage.k8s.io/v1
  kind: CSIDriver
  metadata: {name: csi.example.com}
- apiVersion: storage.k8s.io/v1
  kind: CSIStorageCapacity
  metadata: {name: cap, namespace: kube-system}
  storageClassName: local
- apiVersion: storage.k8s.io/v1
  kind: VolumeAttachment
  metadata: {name: attach}
  spec: {nodeName: reported, attacher: csi.example.com}
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: team-a}
  spec: {selector: {app: web}}
- apiVersion: v1
  kind: ReplicationController
  metadata: {name: old, namespace: team-a}
  spec: {selector: {app: old}}
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata: {name: web-1, namespace: team-a}
  spec: {selector: {matchLabels: {app: web}}}
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: db, namespace: team-a}
  spec: {selector: {matchExpressions: [{key: app, operator: In, values: [db]}]}}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: ignored, namespace: team-a}
  spec: {selector: {matchLabels: {app: web}}}
"""


def build(tmp_path: Path) -> Snapshot:
    path = tmp_path / "input.yaml"
    path.write_text(INPUT)
    objects = load([str(path)])
    inventory = Inventory.build(classes=objects.classes, slices=objects.slices)
    return snapshot(objects, inventory, simulated={"team-a/simulated"}, extra_nodes=["named"])


def test_nodes_come_from_nodes_slices_and_the_named_node(tmp_path: Path) -> None:
    state = build(tmp_path)
    assert sorted(state.node_names()) == ["handwritten", "named", "reported", "sliced"]
    reported = state.node("reported")
    assert reported is not None
    assert reported.labels == {"zone": "a"}
    assert [t.key for t in reported.taints] == ["dedicated"]
    assert reported.images == {"registry.example/app:1": 1000}
    # Held to what it reports; the implicit name no class maps any more is gone.
    assert reported.allocatable == {"cpu": 8000, "memory": 32 * 1024**3, "pods": 20}
    unreported = {
        "pods": UNREPORTED_PODS,
        "cpu": UNLIMITED,
        "memory": UNLIMITED,
        "ephemeral-storage": UNLIMITED,
    }
    handwritten = state.node("handwritten")
    assert handwritten is not None and handwritten.allocatable == unreported
    # The slices' node advertises its devices under every name the class is reached by.
    sliced = state.node("sliced")
    assert sliced is not None
    assert sliced.allocatable == {
        **unreported,
        "example.com/gpu": 2,
        "deviceclass.resource.draco.dev/gpu": 2,
        "deviceclass.resource.kubernetes.io/gpu": 2,
    }


def test_pods_that_occupy_a_node_count_there(tmp_path: Path) -> None:
    state = build(tmp_path)
    # Bound and pinned pods count; gated, finished and simulated ones do not.
    assert sorted(pod.key for pod in state.pods) == ["default/pinned", "team-a/bound"]
    assert [pod.name for pod in state.pods_on("handwritten")] == ["pinned"]
    assert state.requested("reported") == {"cpu": 2000, "pods": 1}
    assert state.image_state("registry.example/app:1") is not None


def test_namespaces_storage_and_workloads_are_read(tmp_path: Path) -> None:
    state = build(tmp_path)
    assert state.namespace_labels("team-a") == {"team": "a"}
    assert state.namespace_labels("default") is None
    assert state.persistent_volume_claim("team-a", "data") is not None
    assert state.persistent_volume("vol") is not None
    assert state.storage_class("local") is not None
    assert state.csi_node("reported") is not None
    assert state.csi_driver("csi.example.com") is not None
    assert len(list(state.csi_storage_capacities())) == 1
    assert len(list(state.volume_attachments("reported"))) == 1
    assert list(state.service_selectors("team-a")) == [{"app": "web"}]
    for kind, name, labels in (
        ("ReplicationController", "old", {"app": "old"}),
        ("ReplicaSet", "web-1", {"app": "web"}),
        ("StatefulSet", "db", {"app": "db"}),
    ):
        selector = state.controller_selector("team-a", kind, name)
        assert selector is not None and selector.matches(labels), kind
        assert not selector.matches({"app": "other"})
    assert state.controller_selector("team-a", "Deployment", "ignored") is None


def test_a_resource_pool_status_request_in_the_dump_is_left_out(tmp_path: Path) -> None:
    # `kubectl get draco` lists ResourcePoolStatusRequests with the claims and slices: the
    # README's recipe pipes that dump in, and one such request refused the whole input.
    path = tmp_path / "dump.yaml"
    path.write_text(
        INPUT
        + """- apiVersion: resource.draco.dev/v1alpha3
  kind: ResourcePoolStatusRequest
  metadata: {name: pools}
  spec: {driver: gpu.example.com}
"""
    )
    objects = load([str(path)])
    assert [c.name for c in objects.classes] == ["gpu"]
