"""Device metadata files (KEP-5304): what a container can read about its devices.

Inside the container the file of request R of driver D is

    /var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<R>/<D>-metadata.json

or, for a claim generated from a template, `resourceclaimtemplates/<podClaimName>/...`
(the pod's name for the claim, from the `resource.draco.dev/pod-claim-name` annotation).
A subrequest allocation uses the top-level request in the path and the full
`<request>/<subrequest>` inside the file. On the host the files live under
`<state-dir>/dra-device-metadata/<driver>/<namespace>_<claim>/<R>/metadata.json` and the
claim's CDI spec bind-mounts them read-only. `metadata.generation` grows on every rewrite.

Each file is a JSON stream, as upstream's kubelet plugin library writes it: the same
`DeviceMetadata` object once per API version, newest first, one object per line —
`metadata.resource.k8s.io/v1beta1` (Kubernetes 1.38, kubernetes/kubernetes#138994), then
`v1alpha1`. The two are the same object; a consumer reads through the stream and uses the
first object whose apiVersion it knows (`first_known`), so one built for either version
reads the file. A reader that expects a single JSON document must move to the stream.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from draco.agent.checkpoint import write_atomically
from draco.agent.drivers.base import Mount
from draco.runtime.files import PUBLIC_MODE

__all__ = [
    "CONTAINER_METADATA_DIR",
    "METADATA_API_VERSIONS",
    "MetadataDevice",
    "build_metadata",
    "container_path",
    "encode_stream",
    "first_known",
    "host_claim_dir",
    "host_path",
    "metadata_mount",
    "top_request",
    "write_metadata",
]

CONTAINER_METADATA_DIR: Final = PurePosixPath("/var/run/kubernetes.io/dra-device-attributes")
#: The versions every file holds, newest first (upstream: "the two most recent versions").
METADATA_API_VERSIONS: Final = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
METADATA_KIND: Final = "DeviceMetadata"
#: Read by the containers, whatever their user.
_FILE_MODE: Final = PUBLIC_MODE


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
    """One DeviceMetadata object (in the newest version; `encode_stream` writes it in each);
    `requests` maps the full request name to its devices."""
    body: dict[str, Any] = {
        "kind": METADATA_KIND,
        "apiVersion": METADATA_API_VERSIONS[0],
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


def encode_stream(body: Mapping[str, Any]) -> bytes:
    """`body` once per version of `METADATA_API_VERSIONS`, newest first, a line each."""
    return b"".join(
        json.dumps({**body, "apiVersion": version}, separators=(",", ":")).encode() + b"\n"
        for version in METADATA_API_VERSIONS
    )


def first_known(text: str, *, versions: Sequence[str] = METADATA_API_VERSIONS) -> dict[str, Any]:
    """The first object of a metadata file's stream in one of `versions` (what a consumer
    that knows those versions reads); ValueError when there is none."""
    decoder = json.JSONDecoder()
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            raise ValueError(f"no DeviceMetadata object of {', '.join(versions)} in the stream")
        obj, at = decoder.raw_decode(text, at)
        if isinstance(obj, dict) and obj.get("kind") == METADATA_KIND and obj.get("apiVersion") in versions:
            return obj


def write_metadata(path: Path, body: Mapping[str, Any]) -> None:
    write_atomically(path, encode_stream(body), mode=_FILE_MODE)
    for folder in (path.parent, path.parent.parent):
        folder.chmod(0o755)


def metadata_mount(*, host: Path, container: PurePosixPath) -> Mount:
    return Mount(host_path=str(host), container_path=str(container), options=("ro", "bind"))
