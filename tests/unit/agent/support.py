"""Builders shared by the agent's unit and e2e tests: claims as the API returns them, and
the JSON schemas the agent's files are checked against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

DATA = Path(__file__).parent / "data"

FAKE_YAML = """
drivers:
- name: gpu.draco.dev
  cdiClass: gpu
  sharedCounters:
  - name: node-counters
    counters: {memory: 160Gi}
  devices:
  - name: gpu-{index}
    count: 4
    attributes:
      model: A100
      index: {int: "{index}"}
      driverVersion: {version: 550.54.15}
    capacity: {memory: 40Gi}
    deviceNodes: [/dev/null]
- name: nic.draco.dev
  devices:
  - name: nic-0
    env: {NIC_MODE: fast}
"""


def validate_cdi(spec: Any) -> None:
    jsonschema.validate(spec, json.loads((DATA / "cdi-spec.schema.json").read_text()))


def validate_metadata(body: Any) -> None:
    jsonschema.validate(body, json.loads((DATA / "device-metadata.schema.json").read_text()))


def result(
    device: str, *, request: str = "gpu", driver: str = "gpu.draco.dev", pool: str = "node-a", **extra: Any
) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def claim(
    *results: dict[str, Any],
    name: str = "claim-1",
    namespace: str = "ns",
    uid: str = "0b0c5d3e-1111-4222-8333-444455556666",
    pod_claim_name: str | None = None,
    devices_status: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "7"}
    if pod_claim_name:
        meta["annotations"] = {"resource.draco.dev/pod-claim-name": pod_claim_name}
    status: dict[str, Any] = {}
    if results:
        status["allocation"] = {"devices": {"results": list(results)}}
    if devices_status is not None:
        status["devices"] = devices_status
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": status,
    }
