"""Helpers for the claim-lifecycle e2e tests: objects as JSON through kubectl, and pods
stamped out the way the controllers we don't run (Job, scheduler) would do it."""

from __future__ import annotations

import copy
import json
import secrets
from typing import Any, cast

from draco.api.constants import (
    API_VERSION,
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    FINALIZER,
    SCHEDULING_GATE,
)
from draco.tools.dev.controlplane import ControlPlane

Obj = dict[str, Any]

CLAIMS = f"resourceclaims.{API_VERSION.split('/')[0]}"
TEMPLATES = f"resourceclaimtemplates.{API_VERSION.split('/')[0]}"
CLASSES = f"deviceclasses.{API_VERSION.split('/')[0]}"


def apply(kube: ControlPlane, obj: Obj, *, namespace: str | None = None) -> Obj:
    args = ["apply", "--server-side", "--field-manager=e2e", "-o", "json", "-f", "-"]
    if namespace:
        args[1:1] = ["-n", namespace]
    return json.loads(kube.kubectl(*args, input=json.dumps(obj)).stdout)


def create(kube: ControlPlane, obj: Obj, *, namespace: str) -> Obj:
    return json.loads(
        kube.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(obj)).stdout
    )


def get(kube: ControlPlane, kind: str, name: str, *, namespace: str | None = None) -> Obj | None:
    args = ["get", kind, name, "-o", "json", "--ignore-not-found"]
    if namespace:
        args += ["-n", namespace]
    out = kube.kubectl(*args).stdout.strip()
    return json.loads(out) if out else None


def list_objects(kube: ControlPlane, kind: str, *, namespace: str) -> list[Obj]:
    return json.loads(kube.kubectl("get", kind, "-n", namespace, "-o", "json").stdout)["items"]


def events(kube: ControlPlane, *, namespace: str, reason: str | None = None) -> list[Obj]:
    items = list_objects(kube, "events", namespace=namespace)
    return [e for e in items if reason is None or e.get("reason") == reason]


def device_class(name: str) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }


def claim_spec(class_name: str) -> Obj:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class_name}}]}}


def template(
    name: str,
    class_name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    meta: Obj = {}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    spec: Obj = {"spec": claim_spec(class_name)}
    if meta:
        spec["metadata"] = meta
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": spec,
    }


def user_claim(name: str, class_name: str) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": claim_spec(class_name),
    }


def pod(name: str, claims: list[Obj], *, gated: bool = True) -> Obj:
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {CLAIMS_ANNOTATION: json.dumps(claims)}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    if gated:
        body["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return body


def recorded_claim(kube: ControlPlane, pod_name: str, pod_claim: str, *, namespace: str) -> str | None:
    found = get(kube, "pod", pod_name, namespace=namespace)
    if found is None:
        return None
    raw = (found["metadata"].get("annotations") or {}).get(CLAIM_STATUSES_ANNOTATION)
    return json.loads(raw).get(pod_claim) if raw else None


def allocate(kube: ControlPlane, claim_name: str, *, namespace: str, pods: list[Obj]) -> Obj:
    """Do what the scheduler does: finalizer first, then allocation and reservations, the
    second write conditional on the first (its resourceVersion), as the scheduler's is.

    The operator under test runs its own allocation beside this: between the two writes it
    may see a claim with draco's finalizer and no allocation, which it treats as idle and
    takes the finalizer off; the status write then conflicts and both are done again
    (without the condition, the claim would end up allocated without the finalizer, which
    nobody deallocates, as upstream does not)."""
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.example.com",
                        "pool": "node-1",
                        "device": f"gpu-{secrets.token_hex(2)}",
                    }
                ]
            }
        },
        "reservedFor": [
            {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods
        ],
    }
    for _ in range(10):
        marked = kube.kubectl(
            "patch", CLAIMS, claim_name, "-n", namespace, "--type=merge", "-o", "json",
            "-p", json.dumps({"metadata": {"finalizers": [FINALIZER]}}),
        )  # fmt: skip
        version = json.loads(marked.stdout)["metadata"]["resourceVersion"]
        out = kube.kubectl(
            "patch", CLAIMS, claim_name, "-n", namespace, "--subresource=status", "--type=merge",
            "-o", "json", "-p", json.dumps({"metadata": {"resourceVersion": version}, "status": status}),
            check=False,
        )  # fmt: skip
        if out.returncode == 0:
            return cast(Obj, json.loads(out.stdout))
        if "modified" not in out.stderr and "Conflict" not in out.stderr:
            raise AssertionError(f"allocating {namespace}/{claim_name}: {out.stderr}")
    raise AssertionError(f"allocating {namespace}/{claim_name}: still conflicting after 10 tries")


def set_phase(kube: ControlPlane, pod_name: str, phase: str, *, namespace: str) -> None:
    kube.kubectl(
        "patch",
        "pod",
        pod_name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": phase}}),
    )


def bind(kube: ControlPlane, pod_name: str, node: str, *, namespace: str) -> None:
    """What kube-scheduler does once a pod is un-gated: POST pods/binding."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod_name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    kube.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{pod_name}/binding",
        "-f",
        "-",
        input=json.dumps(binding),
    )


def stamp_job_pods(kube: ControlPlane, job: Obj, *, indexes: range) -> list[Obj]:
    """Create the Job's pods from its template, as the Job controller would (we run none)."""
    created = []
    for index in indexes:
        body = copy.deepcopy(job["spec"]["template"])
        meta = body.setdefault("metadata", {})
        meta["generateName"] = f"{job['metadata']['name']}-"
        meta.setdefault("labels", {}).update(
            {"job-name": job["metadata"]["name"], "batch.kubernetes.io/job-completion-index": str(index)}
        )
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job["metadata"]["name"],
                "uid": job["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        body["apiVersion"] = "v1"
        body["kind"] = "Pod"
        created.append(create(kube, body, namespace=job["metadata"]["namespace"]))
    return created
