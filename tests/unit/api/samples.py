"""Realistic objects of the five kinds as the API server returns them (written by hand
from the upstream ``resource.k8s.io/v1`` type docs), used by the round-trip tests and the
e2e CRD tests. Every function returns a fresh dict.
"""

from __future__ import annotations

from typing import Any

NATIVE = "resource.k8s.io/v1"

SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def _meta(name: str, *, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta.update(
        {
            "uid": "6f1c2f5e-8a4b-4d0e-9d4e-3d1f6b7a9c01",
            "resourceVersion": "48213",
            "generation": 1,
            "creationTimestamp": "2026-11-20T21:14:03Z",
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": NATIVE,
                    "time": "2026-11-20T21:14:03Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}, "f:spec": {}},
                }
            ],
        }
    )
    meta.update(extra)
    return meta


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": NATIVE,
        "kind": "DeviceClass",
        "metadata": _meta("gpu.example.com", labels={"team": "ml"}),
        "spec": {
            "selectors": [
                {"cel": {"expression": 'device.driver == "gpu.example.com"'}},
                {
                    "cel": {
                        "expression": 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
                    }
                },
            ],
            "config": [
                {
                    "opaque": {
                        "driver": "gpu.example.com",
                        "parameters": {
                            "apiVersion": "gpu.example.com/v1",
                            "kind": "GpuConfig",
                            "sharing": {"strategy": "TimeSlicing", "interval": None},
                        },
                    }
                }
            ],
            "extendedResourceName": "example.com/gpu",
        },
    }


def resource_claim_template() -> dict[str, Any]:
    return {
        "apiVersion": NATIVE,
        "kind": "ResourceClaimTemplate",
        "metadata": _meta("single-gpu", namespace="ml"),
        "spec": {
            "metadata": {"labels": {"app": "trainer"}, "annotations": {"note": "one gpu"}},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.example.com",
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ]
                }
            },
        },
    }


def resource_claim() -> dict[str, Any]:
    return {
        "apiVersion": NATIVE,
        "kind": "ResourceClaim",
        "metadata": _meta(
            "trainer-0-gpu-x7k2p",
            namespace="ml",
            annotations={"resource.kubernetes.io/pod-claim-name": "gpu"},
            finalizers=["resource.kubernetes.io/delete-protection"],
            ownerReferences=[
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "trainer-0",
                    "uid": "0b8e9a51-2c1d-4f3a-8e7b-5d6c4b3a2f10",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        ),
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {
                                "name": "big",
                                "deviceClassName": "gpu.example.com",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": 'device.attributes["gpu.example.com"].model == "H200"'
                                        }
                                    }
                                ],
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                            {
                                "name": "small",
                                "deviceClassName": "gpu.example.com",
                                "allocationMode": "ExactCount",
                                "count": 2,
                                "tolerations": [
                                    {
                                        "key": "example.com/unhealthy",
                                        "operator": "Exists",
                                        "effect": "NoExecute",
                                        "tolerationSeconds": 300,
                                    }
                                ],
                            },
                        ],
                    },
                    {
                        "name": "nic",
                        "exactly": {
                            "deviceClassName": "nic.example.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "adminAccess": False,
                            "capacity": {"requests": {"bandwidth": "10G"}},
                        },
                    },
                ],
                "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": "example.com/numa"}],
                "config": [
                    {
                        "requests": ["gpu/big"],
                        "opaque": {"driver": "gpu.example.com", "parameters": {"mig": False}},
                    }
                ],
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu/big",
                            "driver": "gpu.example.com",
                            "pool": "node-a",
                            "device": "gpu-0",
                        },
                        {
                            "request": "nic",
                            "driver": "nic.example.com",
                            "pool": "node-a",
                            "device": "eth1",
                            "shareID": "3f2b8c9d-1e4a-4b6c-9d8e-7f6a5b4c3d2e",
                            "consumedCapacity": {"bandwidth": "10G"},
                        },
                    ],
                    "config": [
                        {
                            "source": "FromClass",
                            "requests": ["gpu/big"],
                            "opaque": {
                                "driver": "gpu.example.com",
                                "parameters": {"sharing": {"strategy": "None"}},
                            },
                        },
                        {
                            "source": "FromClaim",
                            "requests": ["gpu/big"],
                            "opaque": {"driver": "gpu.example.com", "parameters": {"mig": False}},
                        },
                    ],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
                    ]
                },
                "allocationTimestamp": "2026-11-20T21:14:05Z",
            },
            "reservedFor": [
                {"resource": "pods", "name": "trainer-0", "uid": "0b8e9a51-2c1d-4f3a-8e7b-5d6c4b3a2f10"}
            ],
            "devices": [
                {
                    "driver": "nic.example.com",
                    "pool": "node-a",
                    "device": "eth1",
                    "shareID": "3f2b8c9d-1e4a-4b6c-9d8e-7f6a5b4c3d2e",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "observedGeneration": 1,
                            "lastTransitionTime": "2026-11-20T21:14:07Z",
                            "reason": "Prepared",
                            "message": "",
                        }
                    ],
                    "data": {"vf": 3, "pci": "0000:3b:00.1"},
                    "networkData": {
                        "interfaceName": "net1",
                        "ips": ["192.0.2.5/24", "2001:db8::5/64"],
                        "hardwareAddress": "ea:9f:2b:11:0c:7d",
                    },
                }
            ],
        },
    }


def resource_slice() -> dict[str, Any]:
    return {
        "apiVersion": NATIVE,
        "kind": "ResourceSlice",
        "metadata": _meta(
            "node-a-gpu.example.com-9x2lq",
            generateName="node-a-gpu.example.com-",
            ownerReferences=[
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": "node-a",
                    "uid": "d1e2f3a4-0000-4000-8000-000000000001",
                }
            ],
        ),
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
            "nodeName": "node-a",
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "model": {"string": "H200"},
                        "index": {"int": 0},
                        "healthy": {"bool": True},
                        "driverVersion": {"version": "580.65.6"},
                        "example.com/numa": {"int": 1},
                        "example.com/links": {"strings": ["nvlink0", "nvlink1"]},
                    },
                    "capacity": {
                        "memory": {"value": "141Gi"},
                        "cores": {"value": "16896"},
                    },
                    "consumesCounters": [
                        {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "141Gi"}}}
                    ],
                    "taints": [
                        {
                            "key": "example.com/unhealthy",
                            "value": "ecc",
                            "effect": "NoSchedule",
                            "timeAdded": "2026-11-20T21:20:00Z",
                        }
                    ],
                    "bindsToNode": True,
                    "bindingConditions": ["example.com/prepared"],
                    "bindingFailureConditions": ["example.com/failed"],
                },
                {
                    "name": "eth1",
                    "attributes": {"example.com/numa": {"int": 1}},
                    "capacity": {
                        "bandwidth": {
                            "value": "100G",
                            "requestPolicy": {
                                "default": "1G",
                                "validRange": {"min": "1G", "max": "100G", "step": "1G"},
                            },
                        },
                        "queues": {
                            "value": "8",
                            "requestPolicy": {"default": "1", "validValues": ["1", "2", "4", "8"]},
                        },
                    },
                    "allowMultipleAllocations": True,
                },
            ],
        },
    }


def counter_slice() -> dict[str, Any]:
    """A slice that only publishes shared counters (devices live in another slice)."""
    return {
        "apiVersion": NATIVE,
        "kind": "ResourceSlice",
        "metadata": _meta("node-a-counters"),
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 2},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}
                        ]
                    }
                ]
            },
            "sharedCounters": [
                {"name": "gpu-0-counters", "counters": {"memory": {"value": "141Gi"}, "sm": {"value": "132"}}}
            ],
        },
    }


def device_taint_rule() -> dict[str, Any]:
    return {
        "apiVersion": NATIVE,
        "kind": "DeviceTaintRule",
        "metadata": _meta("drain-gpu-0"),
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"},
            "taint": {
                "key": "example.com/maintenance",
                "value": "planned",
                "effect": "NoExecute",
                "timeAdded": "2026-11-20T22:00:00Z",
            },
        },
        "status": {
            "conditions": [
                {
                    "type": "EvictionInProgress",
                    "status": "False",
                    "observedGeneration": 1,
                    "lastTransitionTime": "2026-11-20T22:00:09Z",
                    "reason": "Completed",
                    "message": "1 pod evicted since starting the controller.",
                }
            ]
        },
    }


ALL_SAMPLES = {
    "DeviceClass": device_class,
    "ResourceClaimTemplate": resource_claim_template,
    "ResourceClaim": resource_claim,
    "ResourceSlice": resource_slice,
    "CounterSlice": counter_slice,
    "DeviceTaintRule": device_taint_rule,
}
