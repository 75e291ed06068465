"""Write an OCI image layout tarball holding a busybox image and a pause image.

No registry is reachable from our machines, so the test node's images are made here from
Debian's statically linked busybox: one layer (busybox plus a symlink per applet, a
passwd and a group file) shared by two images,

- `<name>`: the workload image, `sh` by default;
- `<pause>`: the pod sandbox image, `sleep` forever (the runtime stops sandboxes with
  SIGKILL, so a pause process that handles signals is not needed).

The tarball is deterministic (fixed timestamps and owners) and is what
`ctr images import` reads; each manifest carries the image name as the
`io.containerd.image.name` annotation, so no `--base-name` is needed.

    python3 hack/lib/oci_image.py --busybox /bin/busybox --out images.tar \\
        --name draco.invalid/busybox:local --pause draco.invalid/pause:local

Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


def _info(name: str, *, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def layer(busybox: Path) -> bytes:
    """The uncompressed layer tar: busybox, its applets, /etc/passwd, /etc/group, /tmp."""
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    names = sorted({a.strip() for a in applets.stdout.split() if a.strip() and a.strip() != "busybox"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("bin", "etc", "tmp", "proc", "sys", "dev", "root"):
            tar.addfile(_info(folder, kind=tarfile.DIRTYPE, mode=0o1777 if folder == "tmp" else 0o755))
        data = busybox.read_bytes()
        tar.addfile(_info("bin/busybox", mode=0o755, size=len(data)), io.BytesIO(data))
        for name in names:
            link = _info(f"bin/{name}", kind=tarfile.SYMTYPE, mode=0o777)
            link.linkname = "busybox"
            tar.addfile(link)
        for path, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ):
            raw = text.encode()
            tar.addfile(_info(path, size=len(raw)), io.BytesIO(raw))
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(*, busybox: Path, out: Path, name: str, pause: str) -> None:
    raw = layer(busybox)
    compressed = gzip.compress(raw, compresslevel=9, mtime=0)
    blobs: dict[str, bytes] = {_digest(compressed): compressed}
    manifests = []
    for ref, config in (
        (name, {"Cmd": ["sh"], "Env": ["PATH=/bin"], "WorkingDir": "/"}),
        (pause, {"Entrypoint": ["/bin/sleep", "2147483647"], "Env": ["PATH=/bin"], "WorkingDir": "/"}),
    ):
        config_blob = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": config,
                "rootfs": {"type": "layers", "diff_ids": [_digest(raw)]},
                "history": [{"created_by": f"hack/lib/oci_image.py from {busybox}"}],
            },
            sort_keys=True,
        ).encode()
        blobs[_digest(config_blob)] = config_blob
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_MANIFEST,
                "config": {
                    "mediaType": MEDIA_CONFIG,
                    "digest": _digest(config_blob),
                    "size": len(config_blob),
                },
                "layers": [
                    {"mediaType": MEDIA_LAYER, "digest": _digest(compressed), "size": len(compressed)}
                ],
            },
            sort_keys=True,
        ).encode()
        blobs[_digest(manifest)] = manifest
        manifests.append(
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": _digest(manifest),
                "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
                },
            }
        )
    index = json.dumps({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests}).encode()
    layout = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info("oci-layout", size=len(layout)), io.BytesIO(layout))
        tar.addfile(_info("index.json", size=len(index)), io.BytesIO(index))
        for folder in ("blobs", "blobs/sha256"):
            tar.addfile(_info(folder, kind=tarfile.DIRTYPE, mode=0o755))
        for digest, data in sorted(blobs.items()):
            tar.addfile(_info(f"blobs/sha256/{digest.split(':', 1)[1]}", size=len(data)), io.BytesIO(data))
    tmp.rename(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busybox", type=Path, required=True, help="a statically linked busybox")
    parser.add_argument("--out", type=Path, required=True, help="the OCI layout tarball to write")
    parser.add_argument("--name", required=True, help="the workload image's name")
    parser.add_argument("--pause", required=True, help="the sandbox image's name")
    args = parser.parse_args()
    build(busybox=args.busybox, out=args.out, name=args.name, pause=args.pause)


if __name__ == "__main__":
    main()
