"""The ProvisioningRequest draco makes for a group (``--autoscaling-provisioning-requests``,
for cluster-autoscaler's atomic scale-up) is valid against the real CRD
(`hack/karpenter.sh` caches cluster-autoscaler's ProvisioningRequest CRD beside Karpenter's),
and so is its PodTemplate, the demand pod of a member."""

from __future__ import annotations

import json

import pytest

from draco.operator.autoscaling.service import ATOMIC_CLASS, provisioning_request
from draco.quantity import Quantity
from draco.scheduling.demand import demand_pod
from tests.autoscaling.conftest import DEMAND_NAMESPACE, Autoscaled
from tests.e2e import schedkit as k

pytestmark = pytest.mark.e2e


def test_the_provisioning_request_of_a_group_is_valid_against_the_crd(autoscaled: Autoscaled) -> None:
    member = k.pod("ns", "w0", [{"name": "dev", "resourceClaimTemplateName": "one"}], cpu="100m")
    member["metadata"]["uid"] = "0000-1111"
    demand = demand_pod(
        pod=member,
        namespace=DEMAND_NAMESPACE,
        core={"cpu": Quantity.parse("100m")},
        devices={"deviceclass.resource.draco.dev/gpu.example.com": 1},
        excluded=["node-a"],
        group_key="group:ns/train",
    )
    name = "demand-e2e-check"
    template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": DEMAND_NAMESPACE},
        "template": {"metadata": {"labels": demand["metadata"]["labels"]}, "spec": demand["spec"]},
    }
    request = provisioning_request(name=name, namespace=DEMAND_NAMESPACE, count=4, uids="0000-1111")
    kube = autoscaled.kube
    kube.kubectl("create", "-f", "-", input=json.dumps(template))
    kube.kubectl("create", "--validate=strict", "-f", "-", input=json.dumps(request))
    stored = k.get(kube, "provisioningrequests.autoscaling.x-k8s.io", name, namespace=DEMAND_NAMESPACE)
    assert stored is not None
    assert stored["spec"]["provisioningClassName"] == ATOMIC_CLASS
    assert stored["spec"]["podSets"] == [{"podTemplateRef": {"name": name}, "count": 4}]
    kube.kubectl(
        "delete", "provisioningrequests.autoscaling.x-k8s.io,podtemplates", name, "-n", DEMAND_NAMESPACE
    )
