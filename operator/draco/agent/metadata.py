"""Device metadata files (KEP-5304): what a container can read about its devices.

Inside the container the file of request R of driver D is

    /var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<R>/<D>-metadata.json

or, for a claim generated from a template, `resourceclaimtemplates/<podClaimName>/...`
(the pod's name for the claim, from the `resource.draco.dev/pod-claim-name` annotation).
A subrequest allocation uses the top-level request in the path and the full
`<request>/<subrequest>` inside the file. On the host the files live under
`<state-dir>/dra-device-metadata/<driver>/<namespace>_<claim>/<R>/metadata.json` and the
claim's CDI spec bind-mounts them read-only. Each file holds one `DeviceMetadata` object
of `metadata.resource.k8s.io/v1alpha1`; `metadata.generation` grows on every rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from draco.agent.checkpoint import write_atomically
from draco.agent.drivers.base import Mount

__all__ = [
    "CONTAINER_METADATA_DIR",
    "METADATA_API_VERSION",
    "MetadataDevice",
    "build_metadata",
    "container_path",
    "host_claim_dir",
    "host_path",
    "metadata_mount",
    "top_request",
    "write_metadata",
]

CONTAINER_METADATA_DIR: Final = PurePosixPath("/var/run/kubernetes.io/dra-device-attributes")
METADATA_API_VERSION: Final = "metadata.resource.k8s.io/v1alpha1"
METADATA_KIND: Final = "DeviceMetadata"
_FILE_MODE: Final = 0o644


@dataclass(frozen=True)
class MetadataDevice:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Mapping[str, Any]]


def top_request(request: str) -> str:
    """`gpu/high-mem` -> `gpu`: paths use the top-level request only."""
    return request.split("/", 1)[0]


def container_path(
    *, claim_name: str, pod_claim_name: str | None, request: str, driver: str
) -> PurePosixPath:
    base = (
        CONTAINER_METADATA_DIR / "resourceclaimtemplates" / pod_claim_name
        if pod_claim_name
        else CONTAINER_METADATA_DIR / "resourceclaims" / claim_name
    )
    return base / top_request(request) / f"{driver}-metadata.json"


def host_claim_dir(state_dir: Path, *, driver: str, namespace: str, claim_name: str) -> Path:
    return state_dir / "dra-device-metadata" / driver / f"{namespace}_{claim_name}"


def host_path(state_dir: Path, *, driver: str, namespace: str, claim_name: str, request: str) -> Path:
    claim_dir = host_claim_dir(state_dir, driver=driver, namespace=namespace, claim_name=claim_name)
    return claim_dir / top_request(request) / "metadata.json"


def build_metadata(
    *,
    namespace: str,
    claim_name: str,
    claim_uid: str,
    pod_claim_name: str | None,
    generation: int,
    requests: Mapping[str, Sequence[MetadataDevice]],
) -> dict[str, Any]:
    """One DeviceMetadata object; `requests` maps the full request name to its devices."""
    body: dict[str, Any] = {
        "kind": METADATA_KIND,
        "apiVersion": METADATA_API_VERSION,
        "metadata": {"name": claim_name, "namespace": namespace, "uid": claim_uid, "generation": generation},
    }
    if pod_claim_name:
        body["podClaimName"] = pod_claim_name
    body["requests"] = [
        {
            "name": request,
            "devices": [
                {
                    "driver": d.driver,
                    "pool": d.pool,
                    "name": d.name,
                    "attributes": {k: dict(v) for k, v in d.attributes.items()},
                }
                for d in devices
            ],
        }
        for request, devices in requests.items()
    ]
    return body


def write_metadata(path: Path, body: Mapping[str, Any]) -> None:
    write_atomically(path, json.dumps(body, indent=2).encode(), mode=_FILE_MODE)
    for folder in (path.parent, path.parent.parent):
        folder.chmod(0o755)


def metadata_mount(*, host: Path, container: PurePosixPath) -> Mount:
    return Mount(host_path=str(host), container_path=str(container), options=("ro", "bind"))
